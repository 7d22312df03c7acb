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

void add_study_argument(CLI::App* cmd, std::string* study) {
  CLI::Option* name = cmd->add_option("study", *study, "the study's name, or its id as #N");
  CLI::Option* id = cmd->add_option_function<int64_t>(
                           "--id", [study](const int64_t& n) { *study = "#" + std::to_string(n); },
                           "the study's id (as #N)")
                        ->check(CLI::NonNegativeNumber);
  name->excludes(id);
  cmd->parse_complete_callback([name, id] {
    if (name->count() + id->count() == 0)
      throw CLI::RequiredError("the study (its name, #N or --id N)");
  });
}

void set_action(CLI::App* cmd, Action* action, const Formats& formats, std::function<int()> run) {
  cmd->footer("Prints " + formats_text(formats) + ".");
  cmd->callback([action, formats, run] { *action = {formats, run}; });
}

}  // namespace hippo::cli
