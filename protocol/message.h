// The messages between master, workers and clients: one struct per type, each with its encoder
// (to_json: {"v": 1, "type": kType, ...fields}) and its decoder (from_json), which checks every
// field and throws ProtocolError naming the first bad one ("metric.step: ..."). The decoders
// check what a message can be on its own (types, ranges, plain file names, bounded lists); what
// depends on the receiver's state (is this the worker's job?) is the receiver's check.
//
// Worker -> master: Hello, Heartbeat, Metric, Snapshot, Done, Failed, Abandoned, FetchParent,
// FileBytes (a chunk the master asked for), Fetched.
// Master -> worker: Welcome, Job, SnapshotAt, Abandon, Reset, Shutdown, ReadFile, FileBytes (a
// chunk of the job's parent), DeleteFiles.
// Client -> master: Submit, Status, Cancel, ListWorkers, Drain; master -> client: Reply.
// AnyMessage names them all; decode() reads any of them (the message fuzzer's entry point).
//
// A worker's reports on a job (heartbeat with a job, metric, snapshot, done, failed, abandoned)
// carry the incarnation of the master that gave the job (its welcome's): a restarted master
// numbers its jobs anew, and drops a report of the master before it as stale. (The field has a
// default initializer, so that the worker's designated initializers may leave it to the sender.)
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "protocol/wire.h"
#include "stagetree/sequence.h"

namespace hippo::protocol {

// Lists of state ids a worker holds (hello, done, failed, abandoned) are at most this long.
inline constexpr size_t kMaxHeldStates = 4096;
// An incarnation (Welcome) is at most this long.
inline constexpr size_t kMaxIncarnation = 64;
// Checkpoint file names a worker lists (Hello) or is told to delete (DeleteFiles) in one message.
inline constexpr size_t kMaxListedFiles = 65536;
// A checkpoint moves between storages in chunks of at most this many bytes (FileBytes; base64 on
// the wire, well inside kMaxMessageBytes).
inline constexpr int64_t kChunkBytes = 1 << 20;

// ---------------------------------------------------------------------------------------------
// Worker -> master.

// A worker introduces itself (at start, and again when the master says reset).
struct Hello {
  static constexpr const char* kType = "hello";
  std::string name, device;
  int64_t threads = 1;
  int64_t devices = 1;  // pipeline stages it can run at once (--devices); absent on the wire: 1
  int64_t pid = 0;
  std::vector<int64_t> held;  // state ids in its memory
  // Its operator allowed it to run external trainers (--allow-exec trainer); absent: false.
  bool runs_trainers = false;
  // The identity of its checkpoint directory's storage (checkpoint_storage.h); absent: "", the
  // master's own directory (a worker that predates storages shares it).
  std::string storage{};
  // The checkpoint files (and temporary files of them) in its directory, at most kMaxListedFiles:
  // the master deletes those of its plan that no state needs any more.
  std::vector<std::string> files{};
  bool operator==(const Hello&) const = default;
  json to_json() const;
  static Hello from_json(const json& m);
};

// Alive; while training, how far the running job got.
struct Heartbeat {
  static constexpr const char* kType = "heartbeat";
  int64_t job = -1;  // -1: idle (no job, step or incarnation on the wire)
  int64_t step = 0;
  std::string incarnation{};
  bool operator==(const Heartbeat&) const = default;
  json to_json() const;
  static Heartbeat from_json(const json& m);
};

// The metrics of the state after `step` steps of the job's path.
struct Metric {
  static constexpr const char* kType = "metric";
  int64_t job = 0;
  int64_t step = 0;
  json metrics = json::object();  // {name: number}; built-in models: accuracy, loss
  std::string incarnation{};
  bool operator==(const Metric&) const = default;
  json to_json() const;
  static Metric from_json(const json& m);
};

// A snapshot the master ordered exists (its file, if it has one, is written and durable).
struct Snapshot {
  static constexpr const char* kType = "snapshot";
  int64_t job = 0, step = 0, state = 0;
  std::string file;  // "" for a state kept in memory only
  int64_t bytes = 0;
  std::string incarnation{};
  bool operator==(const Snapshot&) const = default;
  json to_json() const;
  static Snapshot from_json(const json& m);
};

// The job trained to its end.
struct Done {
  static constexpr const char* kType = "done";
  int64_t job = 0, step = 0;
  double busy_s = 0;  // time the job took on the worker
  std::vector<int64_t> held;
  std::string incarnation{};
  bool operator==(const Done&) const = default;
  json to_json() const;
  static Done from_json(const json& m);
};

// The job failed. retry: on storage (a checkpoint could not be written) or in an external
// trainer's process (it died), another attempt may succeed; lost_file: the parent checkpoint
// could not be read (missing or corrupt).
struct Failed {
  static constexpr const char* kType = "failed";
  int64_t job = 0;  // -1: a job message that did not decode far enough to name its id
  std::string error;
  bool retry = false;
  std::string lost_file;  // "" when none
  std::vector<int64_t> held;
  std::string incarnation{};
  bool operator==(const Failed&) const = default;
  json to_json() const;
  static Failed from_json(const json& m);
};

// The worker stopped the job at the master's Abandon.
struct Abandoned {
  static constexpr const char* kType = "abandoned";
  int64_t job = 0;
  std::vector<int64_t> held;
  std::string incarnation{};
  bool operator==(const Abandoned&) const = default;
  json to_json() const;
  static Abandoned from_json(const json& m);
};

// A job whose parent checkpoint is on another storage (Job::fetch_parent) asks for its bytes from
// `offset` on; the master answers with FileBytes (read: the job), read from a storage that holds
// the file. Asked again, the same offset gets the same bytes.
struct FetchParent {
  static constexpr const char* kType = "fetch_parent";
  int64_t job = 0;
  int64_t offset = 0;
  std::string incarnation{};
  bool operator==(const FetchParent&) const = default;
  json to_json() const;
  static FetchParent from_json(const json& m);
};

// Bytes [offset, offset + data.size()) of a file of `total` bytes, or why they cannot be read.
// Worker -> master: the answer to ReadFile `read`; master -> worker: a chunk of job `read`'s
// parent checkpoint.
struct FileBytes {
  static constexpr const char* kType = "file_bytes";
  int64_t read = 0;
  int64_t offset = 0;
  int64_t total = 0;
  std::string data{};   // raw bytes (base64 on the wire), at most kChunkBytes
  std::string error{};  // "" when the bytes were read
  bool operator==(const FileBytes&) const = default;
  json to_json() const;
  static FileBytes from_json(const json& m);
};

// A job's parent checkpoint was fetched whole, checked, and written to the worker's own storage.
struct Fetched {
  static constexpr const char* kType = "fetched";
  int64_t job = 0;
  int64_t bytes = 0;
  double seconds = 0;  // from the first request to the file written
  std::string incarnation{};
  bool operator==(const Fetched&) const = default;
  json to_json() const;
  static Fetched from_json(const json& m);
};

// ---------------------------------------------------------------------------------------------
// Master -> worker.

struct Welcome {
  static constexpr const char* kType = "welcome";
  std::string incarnation;  // random per start of a master ("" from an older master)
  int64_t heartbeat_ms = 1000;
  bool operator==(const Welcome&) const = default;
  json to_json() const;
  static Welcome from_json(const json& m);
};

// What a worker must know to build an engine: the fields of a root key.
struct RunSpec {
  json model;  // {"type": "mlp", ...} as in the study spec
  std::string data;
  int64_t train_samples = 0;  // 0: not given (an external model's own data set)
  int64_t eval_samples = 0;
  json data_fields = json::object();  // an external model's other data fields (absent: none)
  uint64_t seed = 0;
  json fixed;  // the study's fixed settings
  // The spec's "pipeline": micro-batches per optimizer step, and the pipeline stages (1: none),
  // schedule and chunks per stage that run them. Optional on the wire (absent: 1, 1, 1f1b, 1).
  int microbatches = 1;
  int pipeline_stages = 1;
  std::string pipeline_schedule = "1f1b";
  int pipeline_chunks = 1;
  bool operator==(const RunSpec&) const = default;
};
json to_json(const RunSpec& r);
RunSpec run_spec_from_json(const json& j);

// A snapshot the worker is asked to take: the state after `step` steps, kept in memory under
// `state` and written to the checkpoint directory as `file` when `file` is not empty.
struct SnapshotOrder {
  int64_t step = 0;
  int64_t state = 0;
  std::string file;
  bool operator==(const SnapshotOrder&) const = default;
};

// One unit of work: train the representative's sequences from step `from` (the state `parent`,
// or a fresh model when from == 0 and parent < 0) to step `to`, evaluate after the listed steps,
// snapshot where asked. from == to with one evaluation is an evaluation-only job.
struct Job {
  static constexpr const char* kType = "job";
  int64_t id = 0;
  RunSpec run;
  Hyperparams hyperparams;
  int64_t from = 0;
  int64_t to = 0;
  int64_t parent_state = -1;             // -1: fresh initialization (from must be 0)
  std::string parent_file;               // checkpoint of parent_state, if one was written
  std::vector<int64_t> eval_steps;       // sorted, unique, each in [from, to]
  std::vector<SnapshotOrder> snapshots;  // sorted by step, each step in (from, to]
  // The parent checkpoint is on another storage: get its parent_bytes bytes with FetchParent,
  // and keep them as parent_file in this worker's own directory. Absent: false, 0.
  bool fetch_parent = false;
  int64_t parent_bytes = 0;
  bool operator==(const Job&) const = default;
  json to_json() const;
  static Job from_json(const json& m);
};

// One more snapshot for the running job (a new trial splits its stage at `order.step`).
struct SnapshotAt {
  static constexpr const char* kType = "snapshot_at";
  int64_t job = 0;
  SnapshotOrder order;
  bool operator==(const SnapshotAt&) const = default;
  json to_json() const;
  static SnapshotAt from_json(const json& m);
};

// No running study needs the job any more: stop at the next step and answer Abandoned.
struct Abandon {
  static constexpr const char* kType = "abandon";
  int64_t job = 0;
  bool operator==(const Abandon&) const = default;
  json to_json() const;
  static Abandon from_json(const json& m);
};

// The master does not know this peer (it restarted): say hello again.
struct Reset {
  static constexpr const char* kType = "reset";
  bool operator==(const Reset&) const = default;
  json to_json() const;
  static Reset from_json(const json& m);
};

// Exit.
struct Shutdown {
  static constexpr const char* kType = "shutdown";
  bool operator==(const Shutdown&) const = default;
  json to_json() const;
  static Shutdown from_json(const json& m);
};

// Read bytes [offset, offset + length) of a checkpoint file in the worker's directory, for
// another worker; answered by FileBytes with the same `read`.
struct ReadFile {
  static constexpr const char* kType = "read_file";
  int64_t read = 0;
  std::string file;
  int64_t offset = 0;
  int64_t length = 0;  // at most kChunkBytes
  bool operator==(const ReadFile&) const = default;
  json to_json() const;
  static ReadFile from_json(const json& m);
};

// Delete these checkpoint files in the worker's directory: no state of the master's needs them.
struct DeleteFiles {
  static constexpr const char* kType = "delete_files";
  // checkpoint file names or their temporary files' (checkpoint_storage.h), at most kMaxListedFiles
  std::vector<std::string> files;
  bool operator==(const DeleteFiles&) const = default;
  json to_json() const;
  static DeleteFiles from_json(const json& m);
};

// ---------------------------------------------------------------------------------------------
// Client -> master, and the master's reply.

struct Submit {
  static constexpr const char* kType = "submit";
  json spec;           // the study spec, checked by the master (searchers/spec.h)
  std::string policy;  // "shared" or "trial-based"
  bool operator==(const Submit&) const = default;
  json to_json() const;
  static Submit from_json(const json& m);
};

// The summary of a study, and whether it still runs.
struct Status {
  static constexpr const char* kType = "status";
  int64_t study = 0;
  bool operator==(const Status&) const = default;
  json to_json() const;
  static Status from_json(const json& m);
};

struct Cancel {
  static constexpr const char* kType = "cancel";
  json study;  // a name (string) or an id (number or all-digit string)
  bool operator==(const Cancel&) const = default;
  json to_json() const;
  static Cancel from_json(const json& m);
};

// The connected workers and what each one trains.
struct ListWorkers {
  static constexpr const char* kType = "workers";
  bool operator==(const ListWorkers&) const = default;
  json to_json() const;
  static ListWorkers from_json(const json& m);
};

// Drain a worker: it gets no more work, finishes its job (if any), and is told to exit.
struct Drain {
  static constexpr const char* kType = "drain";
  std::string worker;  // its name
  bool operator==(const Drain&) const = default;
  json to_json() const;
  static Drain from_json(const json& m);
};

// The answer to every client request: ok with the request's own fields (submit: study, name;
// status: summary, running; cancel: summary; workers: workers; drain: worker, busy), or the error
// that refused it.
struct Reply {
  static constexpr const char* kType = "reply";
  bool ok = false;
  std::string error;             // when !ok
  json fields = json::object();  // when ok
  bool operator==(const Reply&) const = default;
  json to_json() const;
  static Reply from_json(const json& m);
};

using AnyMessage =
    std::variant<Hello, Heartbeat, Metric, Snapshot, Done, Failed, Abandoned, FetchParent,
                 FileBytes, Fetched, Welcome, Job, SnapshotAt, Abandon, Reset, Shutdown, ReadFile,
                 DeleteFiles, Submit, Status, Cancel, ListWorkers, Drain, Reply>;

// Decodes a parsed message (wire.h's parse) of any type; ProtocolError for an unknown type or a
// bad field.
AnyMessage decode(const json& m);

// A message's type name, for logs.
const char* type_of(const AnyMessage& message);

}  // namespace hippo::protocol
