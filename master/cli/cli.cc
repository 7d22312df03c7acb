// What the subcommands share: their output formats, how each declares its action, and where the
// worker binary is.
#include "master/cli/cli.h"

#include <filesystem>

namespace hippo::cli {

const char* to_string(Format format) {
  switch (format) {
    case Format::kTable:
      return "table";
    case Format::kJson:
      return "json";
    case Format::kCsv:
      return "csv";
  }
  return "?";
}

std::string formats_text(const Formats& formats) {
  if (formats.empty()) return "nothing on stdout (so no --format)";
  std::string text;
  for (size_t i = 0; i < formats.size(); ++i) {
    if (i > 0) text += i + 1 == formats.size() ? " or " : ", ";
    text += to_string(formats[i]);
    if (i == 0) text += " (default)";
  }
  return text;
}

std::string worker_binary() {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "hippo-worker").string();
}

void set_action(CLI::App* cmd, Action* action, const Formats& formats, std::function<int()> run) {
  cmd->footer("Prints " + formats_text(formats) + ".");
  cmd->callback([action, formats, run] { *action = {formats, run}; });
}

}  // namespace hippo::cli
