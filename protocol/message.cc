#include "protocol/message.h"

#include <sodium.h>

#include <map>
#include <stdexcept>

#include "protocol/checkpoint_storage.h"
#include "stagetree/sequence_json.h"

namespace hippo::protocol {
namespace {

// A decoder reads fields of a nested object with the readers of wire.h, which name the field by
// the object's "type": a copy of the object that says where it is nested.
json nested(const json& object, const char* where) {
  json copy = object;
  copy["type"] = where;
  return copy;
}

std::vector<int64_t> held_states(const json& m) {
  return get_int_list(m, "held", kMaxHeldStates);
}

std::string incarnation_field(const json& m) {
  return get_string(m, "incarnation", kMaxIncarnation);
}

// A list of at most kMaxListedFiles checkpoint file names.
std::vector<std::string> checkpoint_files(const json& m, const char* field) {
  const json& list = get_array(m, field);
  if (list.size() > kMaxListedFiles)
    throw ProtocolError(m["type"].get<std::string>() + "." + field + ": more than " +
                        std::to_string(kMaxListedFiles) + " names");
  std::vector<std::string> out;
  for (const json& name : list) {
    if (!name.is_string() || !incarnation_of(name.get<std::string>()))
      throw ProtocolError(m["type"].get<std::string>() + "." + field +
                          ": not a checkpoint file name: " + name.dump().substr(0, 100));
    out.push_back(name.get<std::string>());
  }
  return out;
}

std::string to_base64(const std::string& bytes) {
  std::string out(sodium_base64_ENCODED_LEN(bytes.size(), sodium_base64_VARIANT_ORIGINAL), '\0');
  sodium_bin2base64(out.data(), out.size(), reinterpret_cast<const unsigned char*>(bytes.data()),
                    bytes.size(), sodium_base64_VARIANT_ORIGINAL);
  out.pop_back();  // the terminating NUL
  return out;
}

// Base64 of at most kChunkBytes bytes; ProtocolError naming the field otherwise.
std::string from_base64(const json& m, const char* field) {
  const std::string text = get_string(m, field, kChunkBytes / 3 * 4 + 8);
  std::string out(text.size() / 4 * 3, '\0');
  size_t length = 0;
  if (sodium_base642bin(reinterpret_cast<unsigned char*>(out.data()), out.size(), text.data(),
                        text.size(), nullptr, &length, nullptr,
                        sodium_base64_VARIANT_ORIGINAL) != 0 ||
      length > static_cast<size_t>(kChunkBytes))
    throw ProtocolError(m["type"].get<std::string>() + "." + field + ": not base64 of at most " +
                        std::to_string(kChunkBytes) + " bytes");
  out.resize(length);
  return out;
}

// Lists of steps and snapshots in a job are bounded only by the message size; this bounds what
// a decoder reserves for them.
constexpr size_t kMaxJobSteps = size_t{1} << 21;

}  // namespace

// --- Worker -> master -------------------------------------------------------------------------

json Hello::to_json() const {
  json m = envelope(kType);
  m["name"] = name;
  m["device"] = device;
  m["threads"] = threads;
  m["devices"] = devices;
  m["pid"] = pid;
  m["held"] = held;
  if (runs_trainers) m["runs_trainers"] = true;
  if (!storage.empty()) m["storage"] = storage;
  if (!files.empty()) m["files"] = files;
  return m;
}

Hello Hello::from_json(const json& m) {
  Hello h;
  h.name = get_string(m, "name", 256);
  h.device = get_string(m, "device", 64);
  h.threads = get_int(m, "threads", 1, 4096);
  h.devices = m.contains("devices") ? get_int(m, "devices", 1, 4096) : 1;
  h.pid = get_int(m, "pid");
  if (m.contains("held")) h.held = held_states(m);
  h.runs_trainers = get_bool(m, "runs_trainers", false);
  if (m.contains("storage")) {
    h.storage = get_string(m, "storage", 64);
    if (!is_valid_storage_identity(h.storage))
      throw ProtocolError("hello.storage: not a storage identity (32 hex digits)");
  }
  if (m.contains("files")) h.files = checkpoint_files(m, "files");
  return h;
}

json Heartbeat::to_json() const {
  json m = envelope(kType);
  if (job >= 0) {
    m["job"] = job;
    m["step"] = step;
    m["incarnation"] = incarnation;
  }
  return m;
}

Heartbeat Heartbeat::from_json(const json& m) {
  Heartbeat h;
  if (m.contains("job")) {
    h.job = get_int(m, "job");
    h.step = get_int(m, "step");
    h.incarnation = incarnation_field(m);
  }
  return h;
}

json Metric::to_json() const {
  json m = envelope(kType);
  m["job"] = job;
  m["step"] = step;
  m["metrics"] = metrics;
  m["incarnation"] = incarnation;
  return m;
}

Metric Metric::from_json(const json& m) {
  Metric out;
  out.job = get_int(m, "job");
  out.step = get_int(m, "step");
  out.metrics = get_object(m, "metrics");
  for (const auto& [name, value] : out.metrics.items())
    if (!value.is_number()) throw ProtocolError("metric.metrics." + name + ": not a number");
  out.incarnation = incarnation_field(m);
  return out;
}

json Snapshot::to_json() const {
  json m = envelope(kType);
  m["job"] = job;
  m["step"] = step;
  m["state"] = state;
  m["file"] = file;
  m["bytes"] = bytes;
  m["incarnation"] = incarnation;
  return m;
}

Snapshot Snapshot::from_json(const json& m) {
  Snapshot s;
  s.job = get_int(m, "job");
  s.step = get_int(m, "step", 1);
  s.state = get_int(m, "state");
  s.file = get_string(m, "file", 200);
  if (!s.file.empty() && !is_valid_file_name(s.file))
    throw ProtocolError("snapshot.file: \"" + s.file + "\" is not a plain file name");
  s.bytes = get_int(m, "bytes");
  s.incarnation = incarnation_field(m);
  return s;
}

json Done::to_json() const {
  json m = envelope(kType);
  m["job"] = job;
  m["incarnation"] = incarnation;
  m["step"] = step;
  m["busy_s"] = busy_s;
  m["held"] = held;
  return m;
}

Done Done::from_json(const json& m) {
  Done d;
  d.job = get_int(m, "job");
  d.step = get_int(m, "step");
  d.busy_s = get_number(m, "busy_s");
  if (!(d.busy_s >= 0 && d.busy_s < 1e9)) throw ProtocolError("done.busy_s: out of range");
  if (m.contains("held")) d.held = held_states(m);
  d.incarnation = incarnation_field(m);
  return d;
}

json Failed::to_json() const {
  json m = envelope(kType);
  m["job"] = job;
  m["incarnation"] = incarnation;
  m["error"] = error;
  if (retry) m["retry"] = true;
  if (!lost_file.empty()) m["lost_file"] = lost_file;
  m["held"] = held;
  return m;
}

Failed Failed::from_json(const json& m) {
  Failed f;
  f.job = get_int(m, "job", -1);
  f.error = get_string(m, "error", 4096);
  f.retry = get_bool(m, "retry", false);
  if (m.contains("lost_file")) f.lost_file = get_file_name(m, "lost_file");
  if (m.contains("held")) f.held = held_states(m);
  f.incarnation = incarnation_field(m);
  return f;
}

json Abandoned::to_json() const {
  json m = envelope(kType);
  m["job"] = job;
  m["incarnation"] = incarnation;
  m["held"] = held;
  return m;
}

Abandoned Abandoned::from_json(const json& m) {
  Abandoned a;
  a.job = get_int(m, "job");
  if (m.contains("held")) a.held = held_states(m);
  a.incarnation = incarnation_field(m);
  return a;
}

json FetchParent::to_json() const {
  json m = envelope(kType);
  m["job"] = job;
  m["offset"] = offset;
  m["incarnation"] = incarnation;
  return m;
}

FetchParent FetchParent::from_json(const json& m) {
  FetchParent f;
  f.job = get_int(m, "job");
  f.offset = get_int(m, "offset");
  f.incarnation = incarnation_field(m);
  return f;
}

json FileBytes::to_json() const {
  json m = envelope(kType);
  m["read"] = read;
  m["offset"] = offset;
  m["total"] = total;
  if (error.empty())
    m["data"] = to_base64(data);
  else
    m["error"] = error;
  return m;
}

FileBytes FileBytes::from_json(const json& m) {
  FileBytes f;
  f.read = get_int(m, "read");
  f.offset = get_int(m, "offset");
  f.total = get_int(m, "total");
  if (m.contains("error")) {
    f.error = get_string(m, "error", 4096);
    if (f.error.empty()) throw ProtocolError("file_bytes.error: empty");
    return f;
  }
  f.data = from_base64(m, "data");
  if (f.offset + static_cast<int64_t>(f.data.size()) > f.total)
    throw ProtocolError("file_bytes.total: the bytes end past it");
  return f;
}

json Fetched::to_json() const {
  json m = envelope(kType);
  m["job"] = job;
  m["bytes"] = bytes;
  m["seconds"] = seconds;
  m["incarnation"] = incarnation;
  return m;
}

Fetched Fetched::from_json(const json& m) {
  Fetched f;
  f.job = get_int(m, "job");
  f.bytes = get_int(m, "bytes");
  f.seconds = get_number(m, "seconds");
  if (!(f.seconds >= 0 && f.seconds < 1e9)) throw ProtocolError("fetched.seconds: out of range");
  f.incarnation = incarnation_field(m);
  return f;
}

// --- Master -> worker -------------------------------------------------------------------------

json Welcome::to_json() const {
  json m = envelope(kType);
  m["incarnation"] = incarnation;
  m["heartbeat_ms"] = heartbeat_ms;
  return m;
}

Welcome Welcome::from_json(const json& m) {
  Welcome w;
  if (m.contains("incarnation")) w.incarnation = incarnation_field(m);
  w.heartbeat_ms = get_int(m, "heartbeat_ms", 10, 60000);
  return w;
}

json to_json(const RunSpec& r) {
  json j{{"model", r.model},
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
  if (!r.data_fields.empty()) j["data_fields"] = r.data_fields;
  return j;
}

RunSpec run_spec_from_json(const json& j) {
  RunSpec r;
  r.model = get_object(j, "model");
  r.data = get_string(j, "data", 64);
  // An external model's own data set may leave its sizes out (0); the engine's never does.
  auto type = r.model.find("type");
  const int64_t least = type != r.model.end() && *type == "external" ? 0 : 1;
  r.train_samples = get_int(j, "train_samples", least);
  r.eval_samples = get_int(j, "eval_samples", least);
  if (j.contains("data_fields")) r.data_fields = get_object(j, "data_fields");
  r.seed = static_cast<uint64_t>(get_int(j, "seed"));
  r.fixed = get_object(j, "fixed");
  if (j.contains("pipeline")) {
    json p = nested(get_object(j, "pipeline"), "job.run.pipeline");
    r.pipeline_stages = static_cast<int>(get_int(p, "stages", 1, 256));
    r.microbatches = static_cast<int>(get_int(p, "microbatches", 1, 4096));
    r.pipeline_schedule = get_string(p, "schedule", 32);
    r.pipeline_chunks = static_cast<int>(get_int(p, "chunks", 1, 64));
  }
  return r;
}

json Job::to_json() const {
  json m = envelope(kType);
  m["job"] = id;
  m["run"] = protocol::to_json(run);
  m["hyperparameters"] = hippo::to_json(hyperparams);
  m["from"] = from;
  m["to"] = to;
  m["parent_state"] = parent_state;
  m["parent_file"] = parent_file;
  m["eval_steps"] = eval_steps;
  json snaps = json::array();
  for (const SnapshotOrder& s : snapshots)
    snaps.push_back({{"step", s.step}, {"state", s.state}, {"file", s.file}});
  m["snapshots"] = snaps;
  if (fetch_parent) {
    m["fetch_parent"] = true;
    m["parent_bytes"] = parent_bytes;
  }
  return m;
}

Job Job::from_json(const json& m) {
  Job job;
  job.id = get_int(m, "job");
  job.run = run_spec_from_json(nested(get_object(m, "run"), "job.run"));
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
  job.eval_steps = get_int_list(m, "eval_steps", kMaxJobSteps, job.from, job.to);
  for (size_t i = 1; i < job.eval_steps.size(); ++i)
    if (job.eval_steps[i] <= job.eval_steps[i - 1])
      throw ProtocolError("job.eval_steps: steps must be increasing and inside [from, to]");
  const json& snaps = get_array(m, "snapshots");
  if (snaps.size() > kMaxJobSteps) throw ProtocolError("job.snapshots: too many");
  for (const json& s : snaps) {
    if (!s.is_object()) throw ProtocolError("job.snapshots: expected objects");
    json order_json = nested(s, "job.snapshots");
    SnapshotOrder order;
    order.step = get_int(order_json, "step", job.from + 1, job.to);
    order.state = get_int(order_json, "state");
    order.file = get_string(order_json, "file", 200);
    if (!order.file.empty() && !is_valid_file_name(order.file))
      throw ProtocolError("job.snapshots.file: \"" + order.file + "\" is not a plain file name");
    if (!job.snapshots.empty() && order.step <= job.snapshots.back().step)
      throw ProtocolError("job.snapshots: steps must be increasing");
    job.snapshots.push_back(order);
  }
  job.fetch_parent = get_bool(m, "fetch_parent", false);
  if (job.fetch_parent) {
    if (job.parent_file.empty())
      throw ProtocolError("job.fetch_parent: the job has no parent checkpoint to fetch");
    job.parent_bytes = get_int(m, "parent_bytes", 1);
  }
  return job;
}

json SnapshotAt::to_json() const {
  json m = envelope(kType);
  m["job"] = job;
  m["step"] = order.step;
  m["state"] = order.state;
  m["file"] = order.file;
  return m;
}

SnapshotAt SnapshotAt::from_json(const json& m) {
  SnapshotAt s;
  s.job = get_int(m, "job");
  s.order.step = get_int(m, "step", 1);
  s.order.state = get_int(m, "state");
  s.order.file = get_file_name(m, "file");
  return s;
}

json Abandon::to_json() const {
  json m = envelope(kType);
  m["job"] = job;
  return m;
}

Abandon Abandon::from_json(const json& m) {
  return Abandon{.job = get_int(m, "job")};
}

json Reset::to_json() const {
  return envelope(kType);
}

Reset Reset::from_json(const json&) {
  return {};
}

json Shutdown::to_json() const {
  return envelope(kType);
}

Shutdown Shutdown::from_json(const json&) {
  return {};
}

json ReadFile::to_json() const {
  json m = envelope(kType);
  m["read"] = read;
  m["file"] = file;
  m["offset"] = offset;
  m["length"] = length;
  return m;
}

ReadFile ReadFile::from_json(const json& m) {
  ReadFile r;
  r.read = get_int(m, "read");
  r.file = get_file_name(m, "file");
  if (!is_checkpoint_file_name(r.file))
    throw ProtocolError("read_file.file: \"" + r.file + "\" is not a checkpoint file name");
  r.offset = get_int(m, "offset");
  r.length = get_int(m, "length", 1, kChunkBytes);
  return r;
}

json DeleteFiles::to_json() const {
  json m = envelope(kType);
  m["files"] = files;
  return m;
}

DeleteFiles DeleteFiles::from_json(const json& m) {
  return {checkpoint_files(m, "files")};
}

// --- Client -> master -------------------------------------------------------------------------

json Submit::to_json() const {
  json m = envelope(kType);
  m["spec"] = spec;
  m["policy"] = policy;
  return m;
}

Submit Submit::from_json(const json& m) {
  Submit s;
  s.spec = get_object(m, "spec");
  s.policy = get_string(m, "policy", 32);
  return s;
}

json Status::to_json() const {
  json m = envelope(kType);
  m["study"] = study;
  return m;
}

Status Status::from_json(const json& m) {
  return Status{.study = get_int(m, "study")};
}

json Cancel::to_json() const {
  json m = envelope(kType);
  m["study"] = study;
  return m;
}

Cancel Cancel::from_json(const json& m) {
  Cancel c;
  if (!m.contains("study")) throw ProtocolError("cancel.study: missing");
  c.study = m["study"];
  if (c.study.is_string())
    get_string(m, "study", 256);  // bounded
  else if (!c.study.is_number_integer())
    throw ProtocolError("cancel.study: expected a name or an id");
  return c;
}

json Drain::to_json() const {
  json m = envelope(kType);
  m["worker"] = worker;
  return m;
}

Drain Drain::from_json(const json& m) {
  Drain d;
  d.worker = get_string(m, "worker", 256);
  if (d.worker.empty()) throw ProtocolError("drain.worker: empty");
  return d;
}

json ListWorkers::to_json() const {
  return envelope(kType);
}

ListWorkers ListWorkers::from_json(const json&) {
  return {};
}

json Reply::to_json() const {
  json m = ok ? fields : json::object();
  m.update(envelope(kType));
  m["ok"] = ok;
  if (!ok) m["error"] = error;
  return m;
}

Reply Reply::from_json(const json& m) {
  Reply r;
  r.ok = get_bool(m, "ok", false);
  if (!r.ok) {
    r.error = m.contains("error") ? get_string(m, "error", 1 << 16) : "refused";
    return r;
  }
  r.fields = m;
  r.fields.erase("v");
  r.fields.erase("type");
  r.fields.erase("ok");
  return r;
}

// --- Any --------------------------------------------------------------------------------------

namespace {

template <typename M>
void add_decoder(std::map<std::string, AnyMessage (*)(const json&)>& table) {
  table[M::kType] = [](const json& m) -> AnyMessage { return M::from_json(m); };
}

template <typename... M>
std::map<std::string, AnyMessage (*)(const json&)> decoders(std::variant<M...>*) {
  std::map<std::string, AnyMessage (*)(const json&)> table;
  (add_decoder<M>(table), ...);
  return table;
}

}  // namespace

AnyMessage decode(const json& m) {
  static const auto table = decoders(static_cast<AnyMessage*>(nullptr));
  const std::string type = get_string(m, "type", 64);
  auto it = table.find(type);
  if (it == table.end()) throw ProtocolError("message.type: unknown type \"" + type + "\"");
  return it->second(m);
}

const char* type_of(const AnyMessage& message) {
  return std::visit([](const auto& m) { return std::decay_t<decltype(m)>::kType; }, message);
}

}  // namespace hippo::protocol
