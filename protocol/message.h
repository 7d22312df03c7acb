// The messages between master, workers and clients: one struct per type. Each declares its wire
// fields once, next to its members: kFields, a list of field descriptors (fields.h) that names
// each field on the wire, its bounds and its check, in the order a decoder reads them. Its encoder
// (to_json: {"v": 1, "type": kType, ...fields}) and its decoder (from_json) walk that list; the
// decoder checks every field and throws ProtocolError naming the first bad one ("metric.step:
// ..."), then runs the struct's check() (if it has one) for what spans fields. The decoders check
// what a message can be on its own (types, ranges, plain file names, bounded lists); what depends
// on the receiver's state (is this the worker's job?) is the receiver's check.
//
// Adding a field: the member, and its line in kFields (a sender that predates it: .defaulted()
// or .omitted()). Adding a type: the struct, its kFields, its line in AnyMessage and in
// message.cc's list of codecs, and a seed in fuzz/corpus/message/ (tests/protocol checks that every
// type has one).
//
// Worker -> master: Hello, Heartbeat, Metric, Snapshot, Done, Failed, Abandoned, FetchParent,
// FileBytes (a chunk the master asked for), Fetched.
// Master -> worker: Welcome, Job, SnapshotAt, Threads, Abandon, Prepare, EndTrainer, Reset,
// Refused, Shutdown, ReadFile, FileBytes (a chunk of the job's parent), DeleteFiles.
// Client -> master: Submit, Status, Cancel, Resume, Enqueue, ListWorkers, Drain; master ->
// client: Reply.
// AnyMessage names them all; decode() reads any of them (the message fuzzer's entry point).
//
// A worker's reports on a job (heartbeat with a job, metric, snapshot, done, failed, abandoned)
// carry the incarnation of the master that gave the job (its welcome's): a restarted master
// numbers its jobs anew, and drops a report of the master before it as stale. (The field has a
// default initializer, so that the worker's designated initializers may leave it to the sender.)
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "protocol/content_hash.h"
#include "protocol/fields.h"
#include "protocol/wire.h"
#include "stagetree/sequence.h"

namespace hippo::protocol {

// Lists of state ids a worker holds (hello, done, failed, abandoned) are at most this long.
inline constexpr size_t kMaxHeldStates = 4096;
// A worker's environment (Hello) is at most this long.
inline constexpr size_t kMaxEnvironmentBytes = 512;
// An incarnation (Welcome) is at most this long.
inline constexpr size_t kMaxIncarnation = 64;
// Checkpoint file names a worker lists (Hello) or is told to delete (DeleteFiles) in one message.
inline constexpr size_t kMaxListedFiles = 65536;
// A checkpoint moves between storages in chunks of at most this many bytes (FileBytes; base64 on
// the wire, well inside kMaxMessageBytes).
inline constexpr int64_t kChunkBytes = 1 << 20;
// A metric message names at most this many metrics, each name at most kMaxMetricName bytes.
inline constexpr size_t kMaxMetrics = 256;
inline constexpr size_t kMaxMetricName = 128;
// Lists of steps and snapshots in a job are bounded only by the message size; this bounds what a
// decoder reserves for them.
inline constexpr size_t kMaxJobSteps = size_t{1} << 21;
// A checkpoint file's name is at most this long (wire.h's is_valid_file_name).
inline constexpr size_t kMaxFileName = 200;

// The checks that the field lists below name: why a decoded string is refused, "" when it is not.
namespace checks {
std::string file_name(const std::string& s);           // a plain file name (wire.h)
std::string file_name_or_empty(const std::string& s);  // "" (no file) or a plain file name
std::string checkpoint_file(const std::string& s);     // a checkpoint's name (checkpoint_storage.h)
std::string storage_identity(const std::string& s);    // 32 lowercase hex digits
// "" (unknown) or a state's content hash: 64 lowercase hex digits (content_hash.h).
std::string content_hash_or_empty(const std::string& s);
std::string not_empty(const std::string& s);
bool checkpoint_or_temporary(const std::string& s);  // a checkpoint's name or its temporary file's
}  // namespace checks

// The fields with a wire form of their own (fields.h's Custom): writer and reader of each.
namespace codecs {
// Metric.metrics: {name: number}, a non-finite number as "nan", "inf" or "-inf" (JSON has none;
// nlohmann would write null). The reader also takes null as NaN (what older workers sent),
// refuses any other value ("metric.metrics.<name>: not a number"), and bounds the names
// (kMaxMetrics, kMaxMetricName).
void write_metrics(json& m, const char* name, const json& metrics);
json read_metrics(const json& m, const char* name);
// FileBytes.data: raw bytes as base64, at most kChunkBytes of them.
void write_base64(json& m, const char* name, const std::string& bytes);
std::string read_base64(const json& m, const char* name);
// Job.hyperparameters: stagetree's JSON form of sequences.
void write_hyperparams(json& m, const char* name, const Hyperparams& hyperparams);
Hyperparams read_hyperparams(const json& m, const char* name);
// Cancel.study: a name (a string of at most kMaxStudyName bytes, names.h; "#N" names id N) or an
// id (an integer).
void write_json(json& m, const char* name, const json& value);
json read_name_or_id(const json& m, const char* name);
// Reply.error: a string of at most 64 KiB; absent: "refused".
void write_string(json& m, const char* name, const std::string& text);
std::string read_error(const json& m, const char* name);
// Reply.fields: flat in the message (the request's own fields next to "ok"); the writer leaves
// "v", "type" and "ok" to the envelope, the reader takes every key but those.
void write_flat(json& m, const char* name, const json& fields);
json read_flat(const json& m, const char* name);
}  // namespace codecs

// ---------------------------------------------------------------------------------------------
// Worker -> master.

// The record of a worker's latest job, kept in its storage until a master has heard it: what it
// trained, wrote and measured. A worker whose master restarted or went silent (it said Reset, or
// nothing for long) finishes its job all the same, and says in its next hello how it ended, so
// that the next master adopts what is still needed instead of training it again, and counts the
// steps: `job` and `incarnation` name the job as its master numbered it (-1: a worker that
// predates the record), `trial`, `from`, `to` are the job's (Job::trial), `reported` the last step
// whose snapshot it announced, `reached` the step it got to, `done` whether it ran to its end
// (`to`, or where its model diverged: `diverged`, at `reached`), `snapshots` the states whose files
// it wrote (durable, hashed) and `metrics` the evaluations it measured.
struct DroppedSnapshot {
  int64_t step = 0, state = 0;
  std::string file;
  int64_t bytes = 0;
  std::string checksum;
  bool operator==(const DroppedSnapshot&) const = default;
  static constexpr auto kFields = std::tuple{
      fields::Int{"step", &DroppedSnapshot::step, 1}, fields::Int{"state", &DroppedSnapshot::state},
      fields::Text{"file", &DroppedSnapshot::file, kMaxFileName, checks::file_name},
      fields::Int{"bytes", &DroppedSnapshot::bytes},
      fields::Text{"checksum", &DroppedSnapshot::checksum, kContentHashLength, content_hash_error}};
};
struct DroppedMetric {
  int64_t step = 0;
  json metrics = json::object();
  bool operator==(const DroppedMetric&) const = default;
  static constexpr auto kFields =
      std::tuple{fields::Int{"step", &DroppedMetric::step},
                 fields::Custom{"metrics", &DroppedMetric::metrics, codecs::write_metrics,
                                codecs::read_metrics}};
};
// Snapshots and evaluations a record names, at most (a job's are bounded by the message anyway).
inline constexpr size_t kMaxRecordedReports = 4096;
struct DroppedJob {
  int64_t job = -1;
  int64_t trial = -1;
  int64_t from = 0, to = 0, reported = 0, reached = 0;
  std::string incarnation{};
  bool done = false, diverged = false;
  std::vector<DroppedSnapshot> snapshots{};
  std::vector<DroppedMetric> metrics{};
  double busy_s = 0;
  bool operator==(const DroppedJob&) const = default;
  static constexpr auto kFields = std::tuple{
      fields::Int{"job", &DroppedJob::job, -1}.omitted(),
      fields::Int{"trial", &DroppedJob::trial},
      fields::Int{"from", &DroppedJob::from},
      fields::Int{"to", &DroppedJob::to},
      fields::Int{"reported", &DroppedJob::reported},
      fields::Int{"reached", &DroppedJob::reached},
      fields::Text{"incarnation", &DroppedJob::incarnation, kMaxIncarnation},
      fields::Bool{"done", &DroppedJob::done}.omitted(),
      fields::Bool{"diverged", &DroppedJob::diverged}.omitted(),
      fields::NestedList{"snapshots", &DroppedJob::snapshots, kMaxRecordedReports}.omitted(),
      fields::NestedList{"metrics", &DroppedJob::metrics, kMaxRecordedReports}.omitted(),
      fields::Real{"busy_s", &DroppedJob::busy_s, 0, 1e9}.omitted()};
  // from <= reported <= reached <= to; snapshots and metrics inside [from, reached], increasing.
  void check() const;
  json to_json() const;  // the record as the worker keeps it in its storage
  static DroppedJob from_json(const json& m);
};

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
  // The record of its latest job, until a master heard it (at most one): DroppedJob.
  std::vector<DroppedJob> dropped{};
  // What the bits of the states it computes depend on (worker/environment.h): for built-in models
  // and for external trainers. Absent: "", unknown (a worker that predates them), which the
  // master treats as any.
  std::string environment{}, trainer_environment{};
  // The machine it runs on (its host name): the workers of one host may lend each other their
  // idle cores (Job::threads). Absent: "", it lends and borrows none.
  std::string host{};
  bool operator==(const Hello&) const = default;
  static constexpr auto kFields = std::tuple{
      fields::Text{"name", &Hello::name, 256},
      fields::Text{"device", &Hello::device, 64},
      fields::Int{"threads", &Hello::threads, 1, 4096},
      fields::Int{"devices", &Hello::devices, 1, 4096}.defaulted(),
      fields::Int{"pid", &Hello::pid},
      fields::IntList{"held", &Hello::held, kMaxHeldStates}.defaulted(),
      fields::Bool{"runs_trainers", &Hello::runs_trainers}.omitted(),
      fields::Text{"storage", &Hello::storage, 64, checks::storage_identity}.omitted(),
      fields::Names{"files", &Hello::files, kMaxListedFiles, checks::checkpoint_or_temporary,
                    "checkpoint file name"}
          .omitted(),
      fields::NestedList{"dropped", &Hello::dropped, 1}.omitted(),
      fields::Text{"environment", &Hello::environment, kMaxEnvironmentBytes}.omitted(),
      fields::Text{"trainer_environment", &Hello::trainer_environment, kMaxEnvironmentBytes}
          .omitted(),
      fields::Text{"host", &Hello::host, 256}.omitted()};
  json to_json() const;
  static Hello from_json(const json& m);
};

// Alive; while training, how far the running job got.
struct Heartbeat {
  static constexpr const char* kType = "heartbeat";
  int64_t job = -1;  // -1: idle (no job, step or incarnation on the wire)
  int64_t step = 0;
  std::string incarnation{};
  // Why the worker cannot work now, in its own words (a full or read-only checkpoint directory);
  // absent: it can. The master gives no work to a worker that says so.
  std::string fault{};
  bool operator==(const Heartbeat&) const = default;
  static bool training(const Heartbeat& h) { return h.job >= 0; }
  static constexpr auto kFields = std::tuple{
      fields::Int{"job", &Heartbeat::job}
          .omitted(),  // idle (-1): not there, nor step and incarnation
      fields::Int{"step", &Heartbeat::step}.when(training),
      fields::Text{"incarnation", &Heartbeat::incarnation, kMaxIncarnation}.when(training),
      fields::Text{"fault", &Heartbeat::fault, 4096}.omitted()};
  json to_json() const;
  static Heartbeat from_json(const json& m);
};

// The metrics of the state after `step` steps of the job's path.
struct Metric {
  static constexpr const char* kType = "metric";
  int64_t job = 0;
  int64_t step = 0;
  // {name: number}; built-in models: accuracy, loss. A diverging trial's may be NaN or +-inf.
  json metrics = json::object();
  std::string incarnation{};
  bool operator==(const Metric&) const = default;  // (NaN, as ever, equals nothing)
  static constexpr auto kFields = std::tuple{
      fields::Int{"job", &Metric::job}, fields::Int{"step", &Metric::step},
      fields::Custom{"metrics", &Metric::metrics, codecs::write_metrics, codecs::read_metrics},
      fields::Text{"incarnation", &Metric::incarnation, kMaxIncarnation}};
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
  // The content hash of its file, computed by its producer as the file was written
  // (content_hash.h); "" for a state kept in memory only. A file without one is refused (check()):
  // a hash left out would be a state that no reader can verify, and a worker that leaves it out
  // (an older one, or one that wants its forgery trained on) must not downgrade that.
  std::string checksum{};
  bool operator==(const Snapshot&) const = default;
  static constexpr auto kFields =
      std::tuple{fields::Int{"job", &Snapshot::job},
                 fields::Int{"step", &Snapshot::step, 1},
                 fields::Int{"state", &Snapshot::state},
                 fields::Text{"file", &Snapshot::file, kMaxFileName, checks::file_name_or_empty},
                 fields::Int{"bytes", &Snapshot::bytes},
                 fields::Text{"incarnation", &Snapshot::incarnation, kMaxIncarnation},
                 fields::Text{"checksum", &Snapshot::checksum, kContentHashLength,
                              checks::content_hash_or_empty}
                     .omitted()};
  void check() const;  // a file has its checksum
  json to_json() const;
  static Snapshot from_json(const json& m);
};

// Where a job's time on its worker went, in seconds: what `hippo run`'s summary, `hippo report`
// and the dashboard split each worker's time into (storage/time_split.h). Done::busy_s is the
// whole job; what no field names (messages, the master's orders between two steps, a trainer
// that reports nothing) is the rest. An external trainer's share is what it reports (the Python
// helper measures it; a trainer without it leaves all but `start` zero).
struct JobTimes {
  double start = 0;  // starting an external trainer's process (its imports) while the job waited
  double setup = 0;  // the engine or trainer's data and model, before the parent state
  double load = 0;   // the parent state: a fork in memory, a checkpoint read, or initialization
  double fetch = 0;  // the parent checkpoint's bytes from another storage, checked and kept
  double train = 0;  // training steps
  double eval = 0;   // evaluations
  double save = 0;   // snapshots: the state's copy for the writer, and waiting for durable files
  bool operator==(const JobTimes&) const = default;
  static constexpr auto kFields = std::tuple{fields::Real{"start", &JobTimes::start, 0, 1e9},
                                             fields::Real{"setup", &JobTimes::setup, 0, 1e9},
                                             fields::Real{"load", &JobTimes::load, 0, 1e9},
                                             fields::Real{"fetch", &JobTimes::fetch, 0, 1e9},
                                             fields::Real{"train", &JobTimes::train, 0, 1e9},
                                             fields::Real{"eval", &JobTimes::eval, 0, 1e9},
                                             fields::Real{"save", &JobTimes::save, 0, 1e9}};
  double total() const { return start + setup + load + fetch + train + eval + save; }
};
json to_json(const JobTimes& t);

// The job trained to its end `step`; or, with `diverged`, it stopped at `step` because its model
// diverged there (a non-finite loss at an evaluation: every later state would be too), and
// nothing after `step` was trained.
struct Done {
  static constexpr const char* kType = "done";
  int64_t job = 0, step = 0;
  double busy_s = 0;  // time the job took on the worker
  std::vector<int64_t> held;
  std::string incarnation{};
  bool diverged = false;
  JobTimes times{};  // absent (an older worker): all zero
  bool operator==(const Done&) const = default;
  static constexpr auto kFields =
      std::tuple{fields::Int{"job", &Done::job},
                 fields::Int{"step", &Done::step},
                 fields::Real{"busy_s", &Done::busy_s, 0, 1e9},
                 fields::IntList{"held", &Done::held, kMaxHeldStates}.defaulted(),
                 fields::Text{"incarnation", &Done::incarnation, kMaxIncarnation},
                 fields::Bool{"diverged", &Done::diverged}.omitted(),
                 fields::Nested{"times", &Done::times}.omitted()};
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
  int64_t step = 0;  // the step the job reached (its steps past the last snapshot are lost)
  bool operator==(const Failed&) const = default;
  static constexpr auto kFields = std::tuple{
      fields::Int{"job", &Failed::job, -1},
      fields::Text{"error", &Failed::error, 4096},
      fields::Bool{"retry", &Failed::retry}.omitted(),
      fields::Text{"lost_file", &Failed::lost_file, kMaxFileName, checks::file_name}.omitted(),
      fields::IntList{"held", &Failed::held, kMaxHeldStates}.defaulted(),
      fields::Text{"incarnation", &Failed::incarnation, kMaxIncarnation},
      fields::Int{"step", &Failed::step}.omitted()};
  json to_json() const;
  static Failed from_json(const json& m);
};

// The worker stopped the job at the master's Abandon.
struct Abandoned {
  static constexpr const char* kType = "abandoned";
  int64_t job = 0;
  std::vector<int64_t> held;
  std::string incarnation{};
  int64_t step = 0;  // the step it stopped at
  bool operator==(const Abandoned&) const = default;
  static constexpr auto kFields =
      std::tuple{fields::Int{"job", &Abandoned::job},
                 fields::IntList{"held", &Abandoned::held, kMaxHeldStates}.defaulted(),
                 fields::Text{"incarnation", &Abandoned::incarnation, kMaxIncarnation},
                 fields::Int{"step", &Abandoned::step}.omitted()};
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
  static constexpr auto kFields =
      std::tuple{fields::Int{"job", &FetchParent::job}, fields::Int{"offset", &FetchParent::offset},
                 fields::Text{"incarnation", &FetchParent::incarnation, kMaxIncarnation}};
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
  // data or error: the error, when there is one, is read first, and the data only without it.
  static bool has_bytes(const FileBytes& f) { return f.error.empty(); }
  static constexpr auto kFields = std::tuple{
      fields::Int{"read", &FileBytes::read}, fields::Int{"offset", &FileBytes::offset},
      fields::Int{"total", &FileBytes::total},  // >= offset + the bytes: check()
      fields::Text{"error", &FileBytes::error, 4096, checks::not_empty}.omitted(),
      fields::Custom{"data", &FileBytes::data, codecs::write_base64, codecs::read_base64}.when(
          has_bytes)};
  void check() const;  // the bytes end at or before total
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
  static constexpr auto kFields =
      std::tuple{fields::Int{"job", &Fetched::job}, fields::Int{"bytes", &Fetched::bytes},
                 fields::Real{"seconds", &Fetched::seconds, 0, 1e9},
                 fields::Text{"incarnation", &Fetched::incarnation, kMaxIncarnation}};
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
  static constexpr auto kFields =
      std::tuple{fields::Text{"incarnation", &Welcome::incarnation, kMaxIncarnation}.defaulted(),
                 fields::Int{"heartbeat_ms", &Welcome::heartbeat_ms, 10, 60000}};
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
  bool pipeline_vocab_parallel = false;  // absent: false
  bool operator==(const RunSpec&) const = default;
  static constexpr auto kFields = std::tuple{
      fields::Object{"model", &RunSpec::model},
      fields::Text{"data", &RunSpec::data, 64},
      fields::Int{"train_samples", &RunSpec::train_samples},  // >= 1 but external: check()
      fields::Int{"eval_samples", &RunSpec::eval_samples},
      fields::Object{"data_fields", &RunSpec::data_fields}.omitted(),
      fields::Int{"seed", &RunSpec::seed},
      fields::Object{"fixed", &RunSpec::fixed},
      fields::Group{
          "pipeline",
          std::tuple{fields::Int{"stages", &RunSpec::pipeline_stages, 1, 256},
                     fields::Int{"microbatches", &RunSpec::microbatches, 1, 4096},
                     fields::Text{"schedule", &RunSpec::pipeline_schedule, 32},
                     fields::Int{"chunks", &RunSpec::pipeline_chunks, 1, 64},
                     fields::Bool{"vocab_parallel", &RunSpec::pipeline_vocab_parallel}.omitted()}}
          .defaulted()};
  // An engine's data set has a size; an external model's own data set may leave it out (0).
  void check() const;
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
  static constexpr auto kFields = std::tuple{
      fields::Int{"step", &SnapshotOrder::step, 1},  // Job: inside (from, to], in its check()
      fields::Int{"state", &SnapshotOrder::state},
      fields::Text{"file", &SnapshotOrder::file, kMaxFileName, checks::file_name_or_empty}};
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
  // The content hash its producer reported for parent_file: whoever loads or fetches it compares
  // before using it (a mismatch is a lost copy). Absent or "": unknown (a state recorded before
  // content hashes), not compared.
  std::string parent_checksum{};
  // The master's id of the trial whose path it trains (its representative), for the worker to
  // name in a DroppedJob; absent: -1.
  int64_t trial = -1;
  // The threads its kernels run with: its worker's own and the idle cores of its host that the
  // master lends it (built-in models on a CPU only, whose bits do not depend on them; Threads
  // changes them between two steps). Absent: 0, the worker's own (--threads).
  int64_t threads = 0;
  bool operator==(const Job&) const = default;
  static bool fetches_parent(const Job& j) { return j.fetch_parent; }
  static constexpr auto kFields = std::tuple{
      fields::Int{"job", &Job::id},
      fields::Nested{"run", &Job::run},
      fields::Custom{"hyperparameters", &Job::hyperparams, codecs::write_hyperparams,
                     codecs::read_hyperparams},
      fields::Int{"from", &Job::from},
      fields::Int{"to", &Job::to},  // >= from: check()
      fields::Int{"parent_state", &Job::parent_state, -1},
      fields::Text{"parent_file", &Job::parent_file, kMaxFileName, checks::file_name_or_empty},
      fields::IntList{"eval_steps", &Job::eval_steps, kMaxJobSteps},
      fields::NestedList{"snapshots", &Job::snapshots, kMaxJobSteps},
      fields::Bool{"fetch_parent", &Job::fetch_parent}.omitted(),
      fields::Int{"parent_bytes", &Job::parent_bytes, 1}.when(fetches_parent),
      fields::Text{"parent_checksum", &Job::parent_checksum, kContentHashLength,
                   checks::content_hash_or_empty}
          .omitted(),
      fields::Int{"trial", &Job::trial, -1}.omitted(),
      fields::Int{"threads", &Job::threads, 0, 4096}.omitted()};
  // to >= from; a parent state unless from == 0; eval steps and snapshots increasing, inside
  // [from, to] and (from, to]; a parent file to fetch.
  void check() const;
  json to_json() const;
  static Job from_json(const json& m);
};

// The running job's threads from its next step on (Job::threads): its host's idle cores lent to
// it, or taken back for new work there.
struct Threads {
  static constexpr const char* kType = "threads";
  int64_t job = 0;
  int64_t threads = 1;
  bool operator==(const Threads&) const = default;
  static constexpr auto kFields = std::tuple{fields::Int{"job", &Threads::job},
                                             fields::Int{"threads", &Threads::threads, 1, 4096}};
  json to_json() const;
  static Threads from_json(const json& m);
};

// One more snapshot for the running job (a new trial splits its stage at `order.step`).
struct SnapshotAt {
  static constexpr const char* kType = "snapshot_at";
  int64_t job = 0;
  SnapshotOrder order;
  bool operator==(const SnapshotAt&) const = default;
  static constexpr auto kFields =
      std::tuple{fields::Int{"job", &SnapshotAt::job}, fields::Inline{&SnapshotAt::order}};
  void check() const;  // a file to write (a job's own snapshots may be in memory only)
  json to_json() const;
  static SnapshotAt from_json(const json& m);
};

// No running study needs the job any more: stop at the next step and answer Abandoned.
struct Abandon {
  static constexpr const char* kType = "abandon";
  int64_t job = 0;
  bool operator==(const Abandon&) const = default;
  static constexpr auto kFields = std::tuple{fields::Int{"job", &Abandon::job}};
  json to_json() const;
  static Abandon from_json(const json& m);
};

// An idle worker that runs trainers and keeps none may start the long-lived trainer of `run` now,
// so that its start (a PyTorch import) is over before the run's first job for it comes.
struct Prepare {
  static constexpr const char* kType = "prepare";
  RunSpec run;
  bool operator==(const Prepare&) const = default;
  static constexpr auto kFields = std::tuple{fields::Nested{"run", &Prepare::run}};
  json to_json() const;
  static Prepare from_json(const json& m);
};

// No running study has a long-lived trainer any more (the study of the worker's kept one ended):
// an idle worker ends its kept trainer now, not --trainer-idle seconds later (on a GPU it holds
// memory for nothing).
struct EndTrainer {
  static constexpr const char* kType = "end_trainer";
  bool operator==(const EndTrainer&) const = default;
  static constexpr std::tuple<> kFields{};
  json to_json() const;
  static EndTrainer from_json(const json& m);
};

// The master does not know this peer (it restarted): say hello again.
struct Reset {
  static constexpr const char* kType = "reset";
  bool operator==(const Reset&) const = default;
  static constexpr std::tuple<> kFields{};
  json to_json() const;
  static Reset from_json(const json& m);
};

// The master refused the worker's hello, and says why (another key owns its storage or its name,
// it is not a worker): the worker logs it and says hello again only after a growing pause.
struct Refused {
  static constexpr const char* kType = "refused";
  std::string error;
  bool operator==(const Refused&) const = default;
  static constexpr auto kFields = std::tuple{fields::Text{"error", &Refused::error, 4096}};
  json to_json() const;
  static Refused from_json(const json& m);
};

// Exit.
struct Shutdown {
  static constexpr const char* kType = "shutdown";
  bool operator==(const Shutdown&) const = default;
  static constexpr std::tuple<> kFields{};
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
  static constexpr auto kFields =
      std::tuple{fields::Int{"read", &ReadFile::read},
                 fields::Text{"file", &ReadFile::file, kMaxFileName, checks::checkpoint_file},
                 fields::Int{"offset", &ReadFile::offset},
                 fields::Int{"length", &ReadFile::length, 1, kChunkBytes}};
  json to_json() const;
  static ReadFile from_json(const json& m);
};

// Delete these checkpoint files in the worker's directory: no state of the master's needs them.
struct DeleteFiles {
  static constexpr const char* kType = "delete_files";
  // checkpoint file names or their temporary files' (checkpoint_storage.h), at most kMaxListedFiles
  std::vector<std::string> files;
  bool operator==(const DeleteFiles&) const = default;
  static constexpr auto kFields =
      std::tuple{fields::Names{"files", &DeleteFiles::files, kMaxListedFiles,
                               checks::checkpoint_or_temporary, "checkpoint file name"}};
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
  static constexpr auto kFields = std::tuple{fields::Object{"spec", &Submit::spec},
                                             fields::Text{"policy", &Submit::policy, 32}};
  json to_json() const;
  static Submit from_json(const json& m);
};

// The summary of a study, and whether it still runs.
struct Status {
  static constexpr const char* kType = "status";
  int64_t study = 0;
  bool operator==(const Status&) const = default;
  static constexpr auto kFields = std::tuple{fields::Int{"study", &Status::study}};
  json to_json() const;
  static Status from_json(const json& m);
};

struct Cancel {
  static constexpr const char* kType = "cancel";
  json study;  // a name (string) or an id (number or all-digit string)
  bool operator==(const Cancel&) const = default;
  static constexpr auto kFields = std::tuple{
      fields::Custom{"study", &Cancel::study, codecs::write_json, codecs::read_name_or_id}};
  json to_json() const;
  static Cancel from_json(const json& m);
};

// Go on with an interrupted study where it stopped (its owner's or an admin's request).
struct Resume {
  static constexpr const char* kType = "resume";
  json study;  // a name (string) or an id (number or all-digit string)
  bool operator==(const Resume&) const = default;
  static constexpr auto kFields = std::tuple{
      fields::Custom{"study", &Resume::study, codecs::write_json, codecs::read_name_or_id}};
  json to_json() const;
  static Resume from_json(const json& m);
};

// Evaluate a configuration next in a running study (`hippo enqueue`; its owner's or an admin's
// request): the master checks the params against the study's space.
struct Enqueue {
  static constexpr const char* kType = "enqueue";
  json study;  // a name (string) or an id (number or all-digit string)
  json params;
  bool operator==(const Enqueue&) const = default;
  static constexpr auto kFields = std::tuple{
      fields::Custom{"study", &Enqueue::study, codecs::write_json, codecs::read_name_or_id},
      fields::Object{"params", &Enqueue::params}};
  json to_json() const;
  static Enqueue from_json(const json& m);
};

// The connected workers and what each one trains.
struct ListWorkers {
  static constexpr const char* kType = "workers";
  bool operator==(const ListWorkers&) const = default;
  static constexpr std::tuple<> kFields{};
  json to_json() const;
  static ListWorkers from_json(const json& m);
};

// Drain a worker: it gets no more work, finishes its job (if any), and is told to exit.
struct Drain {
  static constexpr const char* kType = "drain";
  std::string worker;  // its name
  bool operator==(const Drain&) const = default;
  static constexpr auto kFields =
      std::tuple{fields::Text{"worker", &Drain::worker, 256, checks::not_empty}};
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
  static bool accepted(const Reply& r) { return r.ok; }
  static bool refused(const Reply& r) { return !r.ok; }
  static constexpr auto kFields = std::tuple{
      fields::Bool{"ok", &Reply::ok}.defaulted(),
      fields::Custom{"error", &Reply::error, codecs::write_string, codecs::read_error}.when(
          refused),
      fields::Custom{"fields", &Reply::fields, codecs::write_flat, codecs::read_flat}.when(
          accepted)};
  json to_json() const;
  static Reply from_json(const json& m);
};

using AnyMessage =
    std::variant<Hello, Heartbeat, Metric, Snapshot, Done, Failed, Abandoned, FetchParent,
                 FileBytes, Fetched, Welcome, Job, SnapshotAt, Threads, Abandon, Prepare,
                 EndTrainer, Reset, Refused, Shutdown, ReadFile, DeleteFiles, Submit, Status,
                 Cancel, Resume, Enqueue, ListWorkers, Drain, Reply>;

// Decodes a parsed message (wire.h's parse) of any type; ProtocolError for an unknown type or a
// bad field.
AnyMessage decode(const json& m);

// A message's type name, for logs.
const char* type_of(const AnyMessage& message);

}  // namespace hippo::protocol
