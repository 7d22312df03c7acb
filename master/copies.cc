#include "master/copies.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "master/checkpoint_files.h"
#include "protocol/checkpoint_storage.h"
#include "protocol/content_hash.h"
#include "protocol/log.h"
#include "protocol/random_token.h"

namespace hippo::master {
namespace {

// Why a chunk of a file cannot be used ("" when it can): its reader's error, or a file of another
// size than the one expected.
std::string chunk_error(const protocol::FileBytes& chunk, int64_t bytes) {
  if (!chunk.error.empty() || chunk.total == bytes) return chunk.error;
  return "it has " + std::to_string(chunk.total) + " bytes, not " + std::to_string(bytes);
}

// Writes `bytes` to dir/file durably: a temporary file (the naming rule's), fsynced, renamed,
// and the directory fsynced. Throws std::runtime_error naming the file.
void keep_file(const std::string& dir, const std::string& file, const std::string& bytes) {
  const std::string path = dir + "/" + file;
  // The naming rule's temporary name: a sweep at start removes it if a crash leaves it.
  const std::string tmp_path = path + ".tmp." + protocol::random_hex(16);
  auto fail = [&](const std::string& what) {
    const std::string error = what + " " + tmp_path + ": " + std::strerror(errno);
    ::unlink(tmp_path.c_str());
    throw std::runtime_error(error);
  };
  const int fd = ::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) fail("cannot create");
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      fail("cannot write");
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    fail("cannot sync");
  }
  ::close(fd);
  if (::rename(tmp_path.c_str(), path.c_str()) != 0) fail("cannot rename");
  if (const int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); d >= 0) {
    ::fsync(d);
    ::close(d);
  }
}

}  // namespace

Copies::Copies(const StateRegistry& states, Storages& storages, WorkerPool& pool)
    : states_(states), storages_(storages), pool_(pool) {}

Edit Copies::lose(int64_t state, const std::string& storage, const std::string& why) const {
  Edit e;
  std::set<std::string> left = states_.info(state).storages;
  if (!left.erase(storage)) return e;
  if (left.empty())
    e.add(edit::DropState{state, why});
  else
    e.add(edit::SetStorages{state, std::move(left), why, storage});
  return e;
}

Edit Copies::forget(int64_t state, const std::string& why) const {
  Edit e;
  e.add(edit::DropState{state, why});
  return e;
}

Edit Copies::serve(RunningJob& job, int64_t offset,
                   std::optional<std::pair<std::string, std::string>> lost) const {
  Edit e;
  const protocol::Job& order = job.order;
  const int64_t state = order.parent_state;
  const protocol::ReadFile read{
      .read = order.id,
      .file = order.parent_file,
      .offset = offset,
      .length = std::min(protocol::kChunkBytes, order.parent_bytes - offset)};
  job.fetch_source.clear();
  job.fetch_offset = offset;
  if (states_.has(state) && states_.info(state).file == order.parent_file) {
    std::set<std::string> left = states_.info(state).storages;
    // Each copy found bad goes, alone; the state goes with the last.
    auto lose_copy = [&](const std::string& storage, const std::string& why) {
      if (!left.erase(storage)) return;
      if (left.empty())
        e.add(edit::DropState{state, why});
      else
        e.add(edit::SetStorages{state, left, why, storage});
    };
    if (lost) lose_copy(lost->first, lost->second);
    if (left.count(storages_.own())) {
      protocol::FileBytes bytes = protocol::read_file_bytes(storages_.dir(), read);
      bytes.error = chunk_error(bytes, order.parent_bytes);
      if (bytes.error.empty()) {
        e.sends.emplace_back(job.worker, bytes.to_json());
        return e;
      }
      lose_copy(storages_.own(), bytes.error);
    }
    if (!left.empty()) {
      // A worker of a storage that holds it reads it; an idle one first.
      const ConnectedWorker* holder = nullptr;
      for (const auto& [peer, x] : pool_.workers())
        if (peer != job.worker && left.count(storage_of(x)) && (!holder || x.job < 0)) holder = &x;
      if (holder) {
        job.fetch_source = holder->peer;
        e.sends.emplace_back(holder->peer, read.to_json());
        return e;
      }
      e.add(edit::DropState{state, "no connected worker holds a copy"});
    }
  }
  e.sends.emplace_back(
      job.worker, protocol::FileBytes{.read = order.id,
                                      .offset = offset,
                                      .error = "no copy of " + order.parent_file + " can be read"}
                      .to_json());
  return e;
}

Edit Copies::on_file_bytes(const ConnectedWorker& from, const protocol::FileBytes& m) {
  if (auto h = handovers_.find(from.peer); h != handovers_.end() && h->second.read == m.read)
    return on_handover_bytes(from, m, h->second);
  auto it = pool_.jobs().find(m.read);
  // An answer that comes after its job ended, or after the job's worker asked again (and another
  // holder was asked), is late: dropped. Only the worker asked can answer.
  if (it == pool_.jobs().end() || it->second.fetch_source != from.peer) return {};
  RunningJob& job = it->second;
  job.fetch_source.clear();
  const std::string error = chunk_error(m, job.order.parent_bytes);
  if (error.empty()) {
    Edit e;
    e.sends.emplace_back(job.worker, m.to_json());
    return e;
  }
  // That storage's copy is lost; another one, if there is one, is read instead.
  return serve(job, m.offset,
               std::make_pair(storage_of(from), "worker " + from.hello.name + ": " + error));
}

Edit Copies::on_fetched(const ConnectedWorker& w, const RunningJob& job,
                        const protocol::Fetched& m) const {
  Edit e;
  e.add(edit::Count{job.studies, 0, 0, m.bytes, m.seconds});
  const int64_t state = job.order.parent_state;
  if (!states_.has(state) || states_.info(state).file != job.order.parent_file) return e;
  // A copy counts once verified: its worker kept it only after its bytes matched the state's
  // content hash (the job's parent_checksum), and said it kept the parent's byte count
  // (Master::on_fetched refuses another), on a storage bound to its key (storages.h).
  std::set<std::string> storages = states_.info(state).storages;
  if (storages.insert(storage_of(w)).second) e.add(edit::SetStorages{state, std::move(storages)});
  return e;
}

Edit Copies::holder_lost(const std::string& peer) {
  Edit e;
  for (auto& [id, job] : pool_.jobs())
    if (job.fetch_source == peer) {
      Edit served = serve(job, job.fetch_offset);
      for (EditOp& op : served.ops) e.ops.push_back(std::move(op));
      for (auto& send : served.sends) e.sends.push_back(std::move(send));
    }
  return e;
}

Edit Copies::deletions() {
  Edit e;
  for (auto it = storages_.deletions().begin(); it != storages_.deletions().end();) {
    const std::string storage = (it++)->first;  // taking them erases the entry
    for (const auto& [peer, w] : pool_.workers()) {
      if (storage_of(w) != storage) continue;
      std::vector<std::string> files = storages_.take_deletions(storage);
      for (size_t at = 0; at < files.size(); at += protocol::kMaxListedFiles) {
        const size_t end = std::min(files.size(), at + protocol::kMaxListedFiles);
        e.sends.emplace_back(
            peer, protocol::DeleteFiles{{files.begin() + at, files.begin() + end}}.to_json());
      }
      break;
    }
  }
  return e;
}

Edit Copies::on_hello(const ConnectedWorker& w, const std::vector<std::string>& files,
                      const std::set<std::string>& incarnations, const std::string& current) {
  Edit e;
  const std::string storage = storage_of(w);
  if (storage == storages_.own()) return e;
  std::set<std::string> kept;
  for (const auto& [id, info] : states_.all())
    if (info.storages.count(storage)) kept.insert(info.file);
  protocol::DeleteFiles unneeded{storages_.take_deletions(storage)};
  for (const std::string& file : files) {
    const std::optional<std::string> incarnation = protocol::incarnation_of(file);
    if (incarnation != current && incarnations.count(*incarnation) && !kept.count(file))
      unneeded.files.push_back(file);
  }
  if (!unneeded.files.empty()) e.sends.emplace_back(w.peer, unneeded.to_json());
  return e;
}

// ---------------------------------------------------------------------------------------------
// Handing over a draining worker's only copies.

Edit Copies::start_handover(const ConnectedWorker& w) {
  const std::string storage = storage_of(w);
  if (storage == storages_.own()) return {};
  for (const auto& [peer, x] : pool_.workers())
    if (peer != w.peer && storage_of(x) == storage) return {};  // another worker shares its disk
  Handover h;
  for (const auto& [id, info] : states_.all())
    if (!info.file.empty() && info.storages == std::set<std::string>{storage})
      h.states.push_back(id);
  if (h.states.empty()) return {};
  spdlog::info("worker {} drains: handing over {} state(s) that only its storage holds",
               w.hello.name, h.states.size());
  Handover& kept = handovers_[w.peer] = std::move(h);
  return next_chunk(w.peer, kept);
}

void Copies::drop_handover(const std::string& peer) {
  handovers_.erase(peer);
}

Edit Copies::next_chunk(const std::string& peer, Handover& h) {
  // Skip the states that went (or gained another copy) since the handover began.
  while (!h.states.empty()) {
    const int64_t state = h.states.front();
    if (states_.has(state) && states_.info(state).storages.size() == 1 &&
        !states_.info(state).storages.count(storages_.own()))
      break;
    h.states.erase(h.states.begin());
    h.bytes.clear();
  }
  if (h.states.empty()) {
    handovers_.erase(peer);  // done: the worker may exit
    return {};
  }
  const StateInfo& info = states_.info(h.states.front());
  if (h.bytes.empty()) h.read = next_read_++;
  h.total = info.bytes;
  Edit e;
  e.sends.emplace_back(
      peer,
      protocol::ReadFile{.read = h.read,
                         .file = info.file,
                         .offset = static_cast<int64_t>(h.bytes.size()),
                         .length = std::min(protocol::kChunkBytes,
                                            info.bytes - static_cast<int64_t>(h.bytes.size()))}
          .to_json());
  return e;
}

Edit Copies::on_handover_bytes(const ConnectedWorker& from, const protocol::FileBytes& m,
                               Handover& h) {
  const int64_t state = h.states.front();
  Edit e;
  if (!states_.has(state)) {  // went meanwhile
    h.bytes.clear();
    return next_chunk(from.peer, h);
  }
  const StateInfo& info = states_.info(state);
  std::string error = chunk_error(m, info.bytes);
  if (error.empty() && m.offset != static_cast<int64_t>(h.bytes.size()))
    error = "a chunk at " + std::to_string(m.offset) + ", not at " + std::to_string(h.bytes.size());
  if (error.empty()) {
    h.bytes += m.data;
    if (static_cast<int64_t>(h.bytes.size()) < info.bytes) return next_chunk(from.peer, h);
    // Kept only if it is what its producer wrote: else that copy is lost, as an unreadable one.
    if (!info.checksum.empty() && protocol::content_hash(h.bytes) != info.checksum)
      error = "its content hash is not the one its producer reported (replaced or corrupted)";
  }
  if (error.empty()) {
    try {
      keep_file(storages_.dir(), info.file, h.bytes);
      std::set<std::string> storages = info.storages;
      storages.insert(storages_.own());
      e.add(edit::SetStorages{state, std::move(storages)});
      e.add(edit::AddEvent{
          std::nullopt,
          "checkpoint_handed_over",
          {{"file", info.file}, {"worker", from.hello.name}, {"bytes", info.bytes}}});
    } catch (const std::exception& x) {
      // The master's own directory cannot take it: the copy stays on the worker's storage only.
      spdlog::warn("cannot keep {} from draining worker {}: {}", info.file, from.hello.name,
                   x.what());
    }
  } else {
    // The worker cannot read its own copy, or it is not the state: it is lost there (a replay
    // rebuilds the state when it was the last).
    spdlog::warn("handover of {} from worker {} (storage {}, {}): {}", info.file, from.hello.name,
                 storage_of(from), from.identity.describe(), error);
    Edit lost = lose(state, storage_of(from), "worker " + from.hello.name + ": " + error);
    e.ops = std::move(lost.ops);
  }
  h.states.erase(h.states.begin());
  h.bytes.clear();
  Edit more = next_chunk(from.peer, h);
  for (auto& send : more.sends) e.sends.push_back(std::move(send));
  return e;
}

}  // namespace hippo::master
