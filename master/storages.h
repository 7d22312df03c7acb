// Where checkpoint files live when workers do not share one disk. Every checkpoint directory is a
// storage with an identity (protocol/checkpoint_storage.h): the master's own directory (which
// workers on its host may share), and each worker's, which it names in its hello. A state's file
// is on the storages of StateInfo::storages: the one it was written to, and each one it was
// fetched to since. This removes a file from each storage that holds it: from the master's own
// directory itself, and on another storage through a worker of that storage (the master sends
// what waits here as DeleteFiles when one is connected; a worker that connects later lists its
// files in its hello, and those of the plan that no state needs are deleted then).
//
// A storage's identity is a claim of the worker that names it, so it is bound to a key: the key
// of the first worker that names a storage owns it (the plan's storage_owners, so that a restart
// keeps it), and a worker of another key that names it is refused at its hello. Otherwise an
// admitted key that learned (or guessed) another worker's storage id would be asked for that
// storage's files, and its forgery relayed to the workers that fetch them. Refused rather than
// taken as a storage of its own: the directory may really be shared (one NFS export), and then
// its hello's files would be taken for another storage's and deleted, and copies counted twice;
// workers that share a directory share a key. Where no keys are used, the binding is to the
// identity the connection proved all the same: without --auth that is the operator's local key
// (every local worker has it, and may share any storage of that user), with --insecure every
// peer is anonymous (one identity, "": no binding, as that flag gives every role anyway). The
// master's own storage belongs to no key: the master reads its files itself (a worker that
// wrongly names it only makes its own snapshots missing there, a lost copy and a replay).
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "protocol/trust.h"

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

  // The owners the plan recorded (at the master's start).
  void restore_owners(SearchPlan& plan);
  // A worker of `identity` names `storage` (as of_worker says) in its hello: true when nobody
  // owns it yet (the hello's edit admits it: edit::AdmitStorage); protocol::ProtocolError naming
  // the storage and its owner when another key owns it.
  bool unowned(const std::string& storage, const protocol::PeerIdentity& identity) const;
  // The first key to name a storage becomes its owner: written to the plan (in the transaction
  // that is open), then kept.
  void admit(SearchPlan& plan, const std::string& storage, const protocol::PeerIdentity& identity);
  // The key that owns `storage`, if any.
  const protocol::PeerIdentity* owner(const std::string& storage) const;

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
  std::map<std::string, protocol::PeerIdentity> owners_;  // by storage: key and name only
};

}  // namespace hippo::master
