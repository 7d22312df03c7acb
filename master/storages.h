// Where checkpoint files live when workers do not share one disk. Every checkpoint directory is a
// storage with an identity (protocol/checkpoint_storage.h): the master's own directory (which
// workers on its host may share), and each worker's, which it names in its hello. A state's file
// is on the storages of StateInfo::storages: the one it was written to, and each one it was
// fetched to since. This removes a file from each storage that holds it: from the master's own
// directory itself, and on another storage through a worker of that storage (the master sends
// what waits here as DeleteFiles when one is connected; a worker that connects later lists its
// files in its hello, and those of the plan that no state needs are deleted then).
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

namespace hippo {
class SearchPlan;
}

namespace hippo::master {

class Storages {
 public:
  // The master's own checkpoint directory (made, and its identity, if they are not there);
  // std::runtime_error or std::filesystem::filesystem_error naming the problem.
  explicit Storages(std::string dir);

  const std::string& own() const { return own_; }
  const std::string& dir() const { return dir_; }
  // The storage a worker's hello names: "" (a worker that names none) is the master's own.
  std::string of_worker(const std::string& named) const { return named.empty() ? own_ : named; }

  // Removes `file` from each of `storages` once the plan's transaction has committed (at once
  // outside one): a rollback keeps the row, which needs the file.
  void remove_after_commit(SearchPlan& plan, const std::set<std::string>& storages,
                           const std::string& file);
  // Files that wait to be deleted on other storages, by storage.
  const std::map<std::string, std::vector<std::string>>& deletions() const { return deletions_; }
  // Takes those of one storage (to send them to a worker of it).
  std::vector<std::string> take_deletions(const std::string& storage);

 private:
  std::string dir_;
  std::string own_;
  std::map<std::string, std::vector<std::string>> deletions_;
};

}  // namespace hippo::master
