#include "master/checkpoint_files.h"

#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "storage/plan.h"

namespace hippo::master {

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
