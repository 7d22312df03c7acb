#include "master/checkpoint_files.h"

#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <system_error>

#include "storage/plan.h"

namespace hippo::master {
namespace {

constexpr size_t kIncarnationDigits = 16;  // also the temporary files' random suffix

bool all_of_class(const std::string& text, int (*in_class)(int)) {
  if (text.empty()) return false;
  for (unsigned char c : text)
    if (!in_class(c)) return false;
  return true;
}

int is_lower_hex(int c) {
  return std::isdigit(c) || (c >= 'a' && c <= 'f');
}

}  // namespace

std::string checkpoint_file_name(const std::string& incarnation, int64_t state) {
  return "state-" + incarnation + "-" + std::to_string(state) + ".ckpt";
}

std::optional<std::string> incarnation_of(const std::string& file) {
  // state-<16 hex>-<digits>.ckpt, optionally followed by .tmp.<16 hex>
  const std::string prefix = "state-", extension = ".ckpt", temporary = ".tmp.";
  if (file.rfind(prefix, 0) != 0) return std::nullopt;
  const std::string incarnation = file.substr(prefix.size(), kIncarnationDigits);
  if (incarnation.size() != kIncarnationDigits || !all_of_class(incarnation, is_lower_hex))
    return std::nullopt;
  size_t at = prefix.size() + kIncarnationDigits;
  if (file.compare(at, 1, "-") != 0) return std::nullopt;
  const size_t end = file.find(extension, ++at);
  if (end == std::string::npos || !all_of_class(file.substr(at, end - at), ::isdigit))
    return std::nullopt;
  const std::string rest = file.substr(end + extension.size());
  if (rest.empty()) return incarnation;
  if (rest.rfind(temporary, 0) == 0 && rest.size() == temporary.size() + kIncarnationDigits &&
      all_of_class(rest.substr(temporary.size()), is_lower_hex))
    return incarnation;
  return std::nullopt;
}

void remove_checkpoint_file(const std::string& dir, const std::string& file) {
  if (file.empty()) return;
  // unlink: a file or a symlink (never what it points to), never a directory; already gone is fine.
  ::unlink((std::filesystem::path(dir) / file).c_str());
}

void remove_after_commit(SearchPlan& plan, const std::string& dir, const std::string& file) {
  if (file.empty()) return;
  plan.after_commit([dir, file] { remove_checkpoint_file(dir, file); });
}

int64_t sweep_checkpoint_files(const std::string& dir, const std::set<std::string>& incarnations,
                               const std::set<std::string>& named) {
  int64_t removed = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const std::optional<std::string> incarnation = incarnation_of(name);
    if (!incarnation || !incarnations.count(*incarnation) || named.count(name)) continue;
    if (::unlink(entry.path().c_str()) == 0) ++removed;
  }
  return removed;
}

}  // namespace hippo::master
