#include "protocol/message.h"

#include <sodium.h>

#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>

#include "protocol/checkpoint_storage.h"
#include "protocol/content_hash.h"
#include "protocol/names.h"
#include "stagetree/sequence_json.h"

namespace hippo::protocol {

// Every message's encoder and decoder are the ones of its field list (fields.h).
#define HIPPO_MESSAGE_CODEC(M)    \
  json M::to_json() const {       \
    json m = envelope(kType);     \
    fields::write(*this, m);      \
    return m;                     \
  }                               \
  M M::from_json(const json& m) { \
    return fields::read<M>(m);    \
  }

HIPPO_MESSAGE_CODEC(Hello)
HIPPO_MESSAGE_CODEC(Heartbeat)
HIPPO_MESSAGE_CODEC(Metric)
HIPPO_MESSAGE_CODEC(Snapshot)
HIPPO_MESSAGE_CODEC(Done)
HIPPO_MESSAGE_CODEC(Failed)
HIPPO_MESSAGE_CODEC(Abandoned)
HIPPO_MESSAGE_CODEC(FetchParent)
HIPPO_MESSAGE_CODEC(FileBytes)
HIPPO_MESSAGE_CODEC(Fetched)
HIPPO_MESSAGE_CODEC(Welcome)
HIPPO_MESSAGE_CODEC(Job)
HIPPO_MESSAGE_CODEC(SnapshotAt)
HIPPO_MESSAGE_CODEC(Threads)
HIPPO_MESSAGE_CODEC(Abandon)
HIPPO_MESSAGE_CODEC(Prepare)
HIPPO_MESSAGE_CODEC(EndTrainer)
HIPPO_MESSAGE_CODEC(Reset)
HIPPO_MESSAGE_CODEC(Refused)
HIPPO_MESSAGE_CODEC(Shutdown)
HIPPO_MESSAGE_CODEC(ReadFile)
HIPPO_MESSAGE_CODEC(DeleteFiles)
HIPPO_MESSAGE_CODEC(Submit)
HIPPO_MESSAGE_CODEC(Status)
HIPPO_MESSAGE_CODEC(Cancel)
HIPPO_MESSAGE_CODEC(Resume)
HIPPO_MESSAGE_CODEC(Enqueue)
HIPPO_MESSAGE_CODEC(ListWorkers)
HIPPO_MESSAGE_CODEC(Drain)
HIPPO_MESSAGE_CODEC(Reply)

#undef HIPPO_MESSAGE_CODEC

json to_json(const RunSpec& r) {
  json j = json::object();
  fields::write(r, j);
  return j;
}

json to_json(const JobTimes& t) {
  json j = json::object();
  fields::write(t, j);
  return j;
}

RunSpec run_spec_from_json(const json& j) {
  return fields::read<RunSpec>(j);
}

// --- Checks that span fields ------------------------------------------------------------------

namespace {

[[noreturn]] void outside(const std::string& field, int64_t v, int64_t min, int64_t max) {
  throw ProtocolError(field + ": " + std::to_string(v) + " is outside [" + std::to_string(min) +
                      ", " + std::to_string(max) + "]");
}

}  // namespace

void RunSpec::check() const {
  auto type = model.find("type");
  const int64_t least = type != model.end() && *type == "external" ? 0 : 1;
  if (train_samples < least) outside("job.run.train_samples", train_samples, least, INT64_MAX);
  if (eval_samples < least) outside("job.run.eval_samples", eval_samples, least, INT64_MAX);
}

void Job::check() const {
  if (to < from) outside("job.to", to, from, INT64_MAX);
  if (parent_state < 0 && from != 0)
    throw ProtocolError("job.parent_state: a job that starts after step 0 needs a parent state");
  for (size_t i = 0; i < eval_steps.size(); ++i) {
    if (eval_steps[i] < from || eval_steps[i] > to)
      outside("job.eval_steps", eval_steps[i], from, to);
    if (i > 0 && eval_steps[i] <= eval_steps[i - 1])
      throw ProtocolError("job.eval_steps: steps must be increasing and inside [from, to]");
  }
  for (size_t i = 0; i < snapshots.size(); ++i) {
    const int64_t step = snapshots[i].step;
    if (step <= from || step > to)  // (from + 1 would overflow at INT64_MAX)
      throw ProtocolError("job.snapshots.step: " + std::to_string(step) + " is outside (" +
                          std::to_string(from) + ", " + std::to_string(to) + "]");
    if (i > 0 && step <= snapshots[i - 1].step)
      throw ProtocolError("job.snapshots: steps must be increasing");
  }
  if (fetch_parent && parent_file.empty())
    throw ProtocolError("job.fetch_parent: the job has no parent checkpoint to fetch");
}

void DroppedJob::check() const {
  if (!(from <= reported && reported <= reached && reached <= to))
    throw ProtocolError("hello.dropped: from <= reported <= reached <= to does not hold");
  for (size_t i = 0; i < snapshots.size(); ++i)
    if (snapshots[i].step <= from || snapshots[i].step > reached ||
        (i > 0 && snapshots[i].step <= snapshots[i - 1].step))
      throw ProtocolError(
          "hello.dropped.snapshots.step: steps must increase inside (from, reached]");
  for (size_t i = 0; i < metrics.size(); ++i)
    if (metrics[i].step < from || metrics[i].step > reached ||
        (i > 0 && metrics[i].step <= metrics[i - 1].step))
      throw ProtocolError("hello.dropped.metrics.step: steps must increase inside [from, reached]");
  if (diverged && !done) throw ProtocolError("hello.dropped.diverged: only a job that ended");
}

json DroppedJob::to_json() const {
  json m = json::object();
  fields::write(*this, m);
  return m;
}

DroppedJob DroppedJob::from_json(const json& m) {
  return fields::read<DroppedJob>(m);
}

void Snapshot::check() const {
  if (!file.empty() && checksum.empty())
    throw ProtocolError("snapshot.checksum: missing: a snapshot with a file (" + file +
                        ") carries its content hash");
}

void SnapshotAt::check() const {
  if (order.file.empty()) throw ProtocolError("snapshot_at.file: " + checks::file_name(order.file));
}

void FileBytes::check() const {
  // offset and total are >= 0: neither side overflows.
  if (error.empty() && (offset > total || static_cast<int64_t>(data.size()) > total - offset))
    throw ProtocolError("file_bytes.total: the bytes end past it");
}

// --- Checks of one field ----------------------------------------------------------------------

namespace checks {

std::string file_name(const std::string& s) {
  if (is_valid_file_name(s)) return "";
  return "\"" + s + "\" is not a plain file name (letters, digits, '.', '_', '-')";
}

std::string file_name_or_empty(const std::string& s) {
  return s.empty() ? "" : file_name(s);
}

std::string checkpoint_file(const std::string& s) {
  if (!is_valid_file_name(s)) return file_name(s);
  return is_checkpoint_file_name(s) ? "" : "\"" + s + "\" is not a checkpoint file name";
}

std::string storage_identity(const std::string& s) {
  return is_valid_storage_identity(s) ? "" : "not a storage identity (32 hex digits)";
}

std::string content_hash_or_empty(const std::string& s) {
  return s.empty() ? "" : content_hash_error(s);
}

std::string not_empty(const std::string& s) {
  return s.empty() ? "empty" : "";
}

bool checkpoint_or_temporary(const std::string& s) {
  return incarnation_of(s).has_value();
}

}  // namespace checks

// --- Fields with a wire form of their own -----------------------------------------------------

namespace codecs {

void write_metrics(json& m, const char* name, const json& metrics) {
  json out = metrics;
  if (out.is_object()) {
    for (json& value : out) {
      if (!value.is_number_float()) continue;
      const double v = value.get<double>();
      if (std::isnan(v))
        value = "nan";
      else if (std::isinf(v))
        value = v > 0 ? "inf" : "-inf";
    }
  }
  m[name] = std::move(out);
}

json read_metrics(const json& m, const char* name) {
  const json& metrics = get_object(m, name);
  if (metrics.size() > kMaxMetrics)
    refuse(m, name, "more than " + std::to_string(kMaxMetrics) + " names");
  json out = json::object();
  for (const auto& [key, value] : metrics.items()) {
    if (key.size() > kMaxMetricName)
      refuse(m, name, "a name longer than " + std::to_string(kMaxMetricName) + " bytes");
    constexpr double kInf = std::numeric_limits<double>::infinity();
    if (value.is_number())
      out[key] = value;
    else if (value.is_null() || value == "nan")
      out[key] = std::numeric_limits<double>::quiet_NaN();
    else if (value == "inf")
      out[key] = kInf;
    else if (value == "-inf")
      out[key] = -kInf;
    else
      throw ProtocolError(field_path(m, name) + "." + key + ": not a number");
  }
  return out;
}

void write_base64(json& m, const char* name, const std::string& bytes) {
  std::string out(sodium_base64_ENCODED_LEN(bytes.size(), sodium_base64_VARIANT_ORIGINAL), '\0');
  sodium_bin2base64(out.data(), out.size(), reinterpret_cast<const unsigned char*>(bytes.data()),
                    bytes.size(), sodium_base64_VARIANT_ORIGINAL);
  out.pop_back();  // the terminating NUL
  m[name] = std::move(out);
}

std::string read_base64(const json& m, const char* name) {
  const std::string text = get_string(m, name, kChunkBytes / 3 * 4 + 8);
  std::string out(text.size() / 4 * 3, '\0');
  size_t length = 0;
  if (sodium_base642bin(reinterpret_cast<unsigned char*>(out.data()), out.size(), text.data(),
                        text.size(), nullptr, &length, nullptr,
                        sodium_base64_VARIANT_ORIGINAL) != 0 ||
      length > static_cast<size_t>(kChunkBytes))
    refuse(m, name, "not base64 of at most " + std::to_string(kChunkBytes) + " bytes");
  out.resize(length);
  return out;
}

void write_hyperparams(json& m, const char* name, const Hyperparams& hyperparams) {
  m[name] = hippo::to_json(hyperparams);
}

Hyperparams read_hyperparams(const json& m, const char* name) {
  const json& object = get_object(m, name);
  try {
    return hyperparams_from_json(object);
  } catch (const std::invalid_argument& e) {
    refuse(m, name, e.what());
  }
}

void write_json(json& m, const char* name, const json& value) {
  m[name] = value;
}

json read_name_or_id(const json& m, const char* name) {
  if (!m.contains(name)) refuse(m, name, "missing");
  const json& value = m[name];
  if (value.is_string())
    get_string(m, name, kMaxStudyName);  // every name submit accepts, no longer
  else if (!value.is_number_integer())
    refuse(m, name, "expected a name or an id");
  return value;
}

void write_string(json& m, const char* name, const std::string& text) {
  m[name] = text;
}

std::string read_error(const json& m, const char* name) {
  return m.contains(name) ? get_string(m, name, 1 << 16) : "refused";
}

void write_flat(json& m, const char* /*name*/, const json& fields) {
  if (!fields.is_object()) return;
  for (const auto& [key, value] : fields.items())
    if (!m.contains(key)) m[key] = value;  // "v", "type" and "ok" are the envelope's
}

json read_flat(const json& m, const char* /*name*/) {
  json fields = m;
  fields.erase("v");
  fields.erase("type");
  fields.erase("ok");
  return fields;
}

}  // namespace codecs

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
