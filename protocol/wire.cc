#include "protocol/message.h"

#include <algorithm>

#include "stagetree/sequence_json.h"

namespace hippo::protocol {
namespace {

// Nesting deeper than this is refused before nlohmann recurses into it (a hostile frame of
// "[[[[..." must not exhaust the stack). Specs inside jobs are a handful of levels deep.
constexpr int kMaxDepth = 64;

std::string where(const json& m, const char* field) {
  std::string type = "message";
  if (m.is_object()) {
    auto it = m.find("type");
    if (it != m.end() && it->is_string()) type = it->get<std::string>();
  }
  return type + "." + field;
}

const json& get_field(const json& m, const char* field) {
  if (!m.is_object()) throw ProtocolError("message: expected a JSON object");
  auto it = m.find(field);
  if (it == m.end()) throw ProtocolError(where(m, field) + ": missing");
  return *it;
}

}  // namespace

json parse(std::string_view body) {
  if (static_cast<int64_t>(body.size()) > kMaxMessageBytes)
    throw ProtocolError("message: larger than " + std::to_string(kMaxMessageBytes) + " bytes");
  if (json_nesting_beyond(body, kMaxDepth) != std::string_view::npos)
    throw ProtocolError("message: nested deeper than " + std::to_string(kMaxDepth) + " levels");
  json m = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (m.is_discarded()) throw ProtocolError("message: not valid JSON");
  if (!m.is_object()) throw ProtocolError("message: expected a JSON object");
  auto v = m.find("v");
  if (v == m.end() || !v->is_number_integer())
    throw ProtocolError("message.v: missing protocol version");
  if (v->get<int64_t>() != kVersion)
    throw ProtocolError("message.v: protocol version " + v->dump() + " is not supported (this is " +
                        std::to_string(kVersion) + ")");
  auto type = m.find("type");
  if (type == m.end() || !type->is_string()) throw ProtocolError("message.type: missing");
  return m;
}

json make(std::string_view type) {
  return json{{"v", kVersion}, {"type", type}};
}

std::string serialize(const json& message) {
  return message.dump();
}

int64_t get_int(const json& m, const char* field, int64_t min, int64_t max) {
  const json& f = get_field(m, field);
  if (!f.is_number_integer()) throw ProtocolError(where(m, field) + ": expected an integer");
  if (f.is_number_unsigned() && f.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    throw ProtocolError(where(m, field) + ": out of range");
  int64_t v = f.get<int64_t>();
  if (v < min || v > max)
    throw ProtocolError(where(m, field) + ": " + std::to_string(v) + " is outside [" +
                        std::to_string(min) + ", " + std::to_string(max) + "]");
  return v;
}

double get_number(const json& m, const char* field) {
  const json& f = get_field(m, field);
  if (!f.is_number()) throw ProtocolError(where(m, field) + ": expected a number");
  return f.get<double>();
}

std::string get_string(const json& m, const char* field, size_t max_length) {
  const json& f = get_field(m, field);
  if (!f.is_string()) throw ProtocolError(where(m, field) + ": expected a string");
  std::string s = f.get<std::string>();
  if (s.size() > max_length) throw ProtocolError(where(m, field) + ": string too long");
  return s;
}

const json& get_object(const json& m, const char* field) {
  const json& f = get_field(m, field);
  if (!f.is_object()) throw ProtocolError(where(m, field) + ": expected an object");
  return f;
}

bool is_valid_file_name(std::string_view name) {
  if (name.empty() || name.size() > 200 || name.front() == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

std::string get_file_name(const json& m, const char* field) {
  std::string name = get_string(m, field, 200);
  if (!is_valid_file_name(name))
    throw ProtocolError(where(m, field) + ": \"" + name +
                        "\" is not a plain file name (letters, digits, '.', '_', '-')");
  return name;
}

json to_json(const RunSpec& r) {
  return json{{"model", r.model},
              {"data", r.data},
              {"train_samples", r.train_samples},
              {"eval_samples", r.eval_samples},
              {"seed", r.seed},
              {"fixed", r.fixed},
              {"pipeline",
               {{"stages", r.pipeline_stages},
                {"microbatches", r.microbatches},
                {"schedule", r.pipeline_schedule},
                {"chunks", r.pipeline_chunks}}}};
}

RunSpec run_spec_from_json(const json& j) {
  RunSpec r;
  r.model = get_object(j, "model");
  r.data = get_string(j, "data", 64);
  r.train_samples = get_int(j, "train_samples", 1);
  r.eval_samples = get_int(j, "eval_samples", 1);
  r.seed = static_cast<uint64_t>(get_int(j, "seed"));
  r.fixed = get_object(j, "fixed");
  if (j.contains("pipeline")) {
    json p = get_object(j, "pipeline");
    p["type"] = "job.run.pipeline";
    r.pipeline_stages = static_cast<int>(get_int(p, "stages", 1, 256));
    r.microbatches = static_cast<int>(get_int(p, "microbatches", 1, 4096));
    r.pipeline_schedule = get_string(p, "schedule", 32);
    r.pipeline_chunks = static_cast<int>(get_int(p, "chunks", 1, 64));
  }
  return r;
}

json to_json(const Job& job) {
  json m = make("job");
  m["job"] = job.id;
  m["run"] = to_json(job.run);
  m["hyperparameters"] = hippo::to_json(job.hyperparams);
  m["from"] = job.from;
  m["to"] = job.to;
  m["parent_state"] = job.parent_state;
  m["parent_file"] = job.parent_file;
  m["eval_steps"] = job.eval_steps;
  json snaps = json::array();
  for (const SnapshotOrder& s : job.snapshots)
    snaps.push_back({{"step", s.step}, {"state", s.state}, {"file", s.file}});
  m["snapshots"] = snaps;
  return m;
}

Job job_from_json(const json& m) {
  Job job;
  job.id = get_int(m, "job");
  {
    json run = get_object(m, "run");
    run["type"] = "job.run";
    job.run = run_spec_from_json(run);
  }
  try {
    job.hyperparams = hyperparams_from_json(get_object(m, "hyperparameters"));
  } catch (const std::invalid_argument& e) {
    throw ProtocolError(std::string("job.hyperparameters: ") + e.what());
  }
  job.from = get_int(m, "from");
  job.to = get_int(m, "to", job.from);
  job.parent_state = get_int(m, "parent_state", -1);
  if (job.parent_state < 0 && job.from != 0)
    throw ProtocolError("job.parent_state: a job that starts after step 0 needs a parent state");
  job.parent_file = get_string(m, "parent_file", 200);
  if (!job.parent_file.empty() && !is_valid_file_name(job.parent_file))
    throw ProtocolError("job.parent_file: \"" + job.parent_file + "\" is not a plain file name");
  const json& evals = get_field(m, "eval_steps");
  if (!evals.is_array()) throw ProtocolError("job.eval_steps: expected an array");
  for (const json& e : evals) {
    if (!e.is_number_integer()) throw ProtocolError("job.eval_steps: expected integers");
    int64_t step = e.get<int64_t>();
    if (step < job.from || step > job.to ||
        (!job.eval_steps.empty() && step <= job.eval_steps.back()))
      throw ProtocolError("job.eval_steps: steps must be increasing and inside [from, to]");
    job.eval_steps.push_back(step);
  }
  const json& snaps = get_field(m, "snapshots");
  if (!snaps.is_array()) throw ProtocolError("job.snapshots: expected an array");
  for (json s : snaps) {
    if (!s.is_object()) throw ProtocolError("job.snapshots: expected objects");
    s["type"] = "job.snapshots";
    SnapshotOrder order;
    order.step = get_int(s, "step", job.from + 1, job.to);
    order.state = get_int(s, "state");
    order.file = get_string(s, "file", 200);
    if (!order.file.empty() && !is_valid_file_name(order.file))
      throw ProtocolError("job.snapshots.file: \"" + order.file + "\" is not a plain file name");
    if (!job.snapshots.empty() && order.step <= job.snapshots.back().step)
      throw ProtocolError("job.snapshots: steps must be increasing");
    job.snapshots.push_back(order);
  }
  return job;
}

}  // namespace hippo::protocol
