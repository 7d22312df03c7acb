#include "master/storages.h"

#include "master/checkpoint_files.h"
#include "protocol/checkpoint_storage.h"
#include "storage/plan.h"

namespace hippo::master {

namespace {

std::string created(const std::string& dir) {
  protocol::make_checkpoint_directory(dir);
  return dir;
}

}  // namespace

Storages::Storages(std::string dir) : dir_(created(dir)), own_(protocol::storage_identity(dir_)) {}

void Storages::remove_after_commit(SearchPlan& plan, const std::set<std::string>& storages,
                                   const std::string& file) {
  if (file.empty()) return;
  for (const std::string& storage : storages) {
    if (storage == own_)
      master::remove_after_commit(plan, dir_, file);
    else
      plan.after_commit([this, storage, file] { deletions_[storage].push_back(file); });
  }
}

std::vector<std::string> Storages::take_deletions(const std::string& storage) {
  auto it = deletions_.find(storage);
  if (it == deletions_.end()) return {};
  std::vector<std::string> files = std::move(it->second);
  deletions_.erase(it);
  return files;
}

}  // namespace hippo::master
