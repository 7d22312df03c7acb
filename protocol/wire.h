// The messages between master, workers and clients: one JSON object per ZeroMQ message,
// {"v": 1, "type": "...", ...}. Every message that arrives is decoded by a function here that
// checks the version, the type and every field, and throws ProtocolError naming the problem; the
// receiver logs it and drops the message. Nothing here touches a socket.
//
// On the master's ROUTER socket every message is three frames: [peer identity, "", body]. Workers
// (DEALER) and clients (REQ) both send the empty delimiter frame, so the master reads them alike.
//
// Worker -> master: hello, heartbeat, metric, snapshot, done, failed.
// Master -> worker: welcome, job, snapshot_at, shutdown.
// Client -> master: submit, status, shutdown; master -> client: reply.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stagetree/sequence.h"

namespace hippo::protocol {

using nlohmann::json;

inline constexpr int kVersion = 1;
// Frames larger than this are refused by the sockets themselves (ZMQ_MAXMSGSIZE).
inline constexpr int64_t kMaxMessageBytes = 16 << 20;

struct ProtocolError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Parses a message body: a JSON object with "v" == kVersion and a string "type". Throws
// ProtocolError for anything else (not JSON, too deep, wrong version, no type).
json parse(std::string_view body);
// A new message of the given type with the version set.
json make(std::string_view type);
std::string serialize(const json& message);

// Field readers that throw ProtocolError("<type>.<field>: ...") when a field is missing, of the
// wrong type, or out of range.
int64_t get_int(const json& m, const char* field, int64_t min = 0, int64_t max = INT64_MAX);
double get_number(const json& m, const char* field);
std::string get_string(const json& m, const char* field, size_t max_length = 4096);
const json& get_object(const json& m, const char* field);
// A checkpoint file name: a plain name ([A-Za-z0-9._-], no leading dot), never a path.
std::string get_file_name(const json& m, const char* field);
bool is_valid_file_name(std::string_view name);

// What a worker must know to build an engine: the fields of a root key.
struct RunSpec {
  json model;  // {"type": "mlp", ...} as in the study spec
  std::string data;
  int64_t train_samples = 0;
  int64_t eval_samples = 0;
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
  int64_t id = 0;
  RunSpec run;
  Hyperparams hyperparams;
  int64_t from = 0;
  int64_t to = 0;
  int64_t parent_state = -1;             // -1: fresh initialization (from must be 0)
  std::string parent_file;               // checkpoint of parent_state, if one was written
  std::vector<int64_t> eval_steps;       // sorted, unique, each in [from, to]
  std::vector<SnapshotOrder> snapshots;  // sorted by step, each step in (from, to]
  bool operator==(const Job&) const = default;
};
json to_json(const Job& job);  // includes "type": "job"
Job job_from_json(const json& m);

}  // namespace hippo::protocol
