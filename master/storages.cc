#include "master/storages.h"

#include "master/checkpoint_files.h"
#include "protocol/checkpoint_storage.h"
#include "protocol/clock.h"
#include "protocol/wire.h"
#include "storage/plan.h"

namespace hippo::master {

namespace {

std::string created(const std::string& dir) {
  protocol::make_checkpoint_directory(dir);
  return dir;
}

}  // namespace

Storages::Storages(std::string dir) : dir_(created(dir)), own_(protocol::storage_identity(dir_)) {}

void Storages::restore_owners(SearchPlan& plan) {
  for (const StorageOwnerRow& row : plan.storage_owners())
    owners_[row.storage] = protocol::PeerIdentity{.key = row.key, .name = row.key_name};
}

const protocol::PeerIdentity* Storages::owner(const std::string& storage) const {
  auto it = owners_.find(storage);
  return it == owners_.end() ? nullptr : &it->second;
}

bool Storages::unowned(const std::string& storage, const protocol::PeerIdentity& identity) const {
  if (storage == own_) return false;  // read by the master itself (above)
  if (const protocol::PeerIdentity* known = owner(storage)) {
    if (known->key == identity.key) return false;
    throw protocol::ProtocolError("hello.storage: storage " + storage + " belongs to the key " +
                                  known->describe() + ", not to " + identity.describe() +
                                  " (a storage is bound to the key that first named it)");
  }
  return true;
}

void Storages::admit(SearchPlan& plan, const std::string& storage,
                     const protocol::PeerIdentity& identity) {
  plan.set_storage_owner({.storage = storage,
                          .key = identity.key,
                          .key_name = identity.name,
                          .since = unix_seconds()});
  owners_[storage] = protocol::PeerIdentity{.key = identity.key, .name = identity.name};
}

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
