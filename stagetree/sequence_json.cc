#include "stagetree/sequence_json.h"

#include <cmath>
#include <stdexcept>

namespace hippo {

namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::invalid_argument(path + ": " + what);
}

// A short rendering of a bad value for an error message (never the whole of a large input).
std::string shown(const json& j) {
  std::string s = j.dump();
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

void check_keys(const json& obj, const std::string& path, std::initializer_list<const char*> keys) {
  for (const auto& [key, value] : obj.items()) {
    bool known = false;
    for (const char* k : keys) known = known || key == k;
    if (!known) fail(path, "unknown field \"" + key + "\"");
  }
}

const json& field(const json& obj, const std::string& path, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end()) fail(path, std::string("missing field \"") + key + "\"");
  return *it;
}

double get_number(const json& obj, const std::string& path, const char* key) {
  const json& v = field(obj, path, key);
  if (!v.is_number() || !std::isfinite(v.get<double>()))
    fail(path + "." + key, "expected a finite number, got " + shown(v));
  return v.get<double>();
}

int64_t get_integer(const json& obj, const std::string& path, const char* key) {
  const json& v = field(obj, path, key);
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(kForever)))
    fail(path + "." + key, "expected a 64-bit integer, got " + shown(v));
  return v.get<int64_t>();
}

Segment segment_from_json(const json& j, const std::string& path) {
  if (!j.is_object()) fail(path, "expected an object, got " + shown(j));
  const json& kind = field(j, path, "kind");
  Segment s;
  if (kind == "constant") {
    s.kind = SegmentKind::kConstant;
    check_keys(j, path, {"kind", "start", "end", "v0"});
  } else if (kind == "linear" || kind == "cosine" || kind == "linear-decay" ||
             kind == "cosine-decay" || kind == "1-sqrt-decay") {
    s.kind = kind == "linear"         ? SegmentKind::kLinear
             : kind == "cosine"       ? SegmentKind::kCosine
             : kind == "linear-decay" ? SegmentKind::kLinearDecay
             : kind == "cosine-decay" ? SegmentKind::kCosineDecay
                                      : SegmentKind::kSqrtDecay;
    check_keys(j, path, {"kind", "start", "end", "v0", "v1"});
    s.v1 = get_number(j, path, "v1");
  } else if (kind == "exponential") {
    s.kind = SegmentKind::kExponential;
    check_keys(j, path, {"kind", "start", "end", "v0", "gamma", "period"});
    s.gamma = get_number(j, path, "gamma");
    s.period = get_integer(j, path, "period");
  } else {
    fail(path + ".kind",
         "expected constant, linear, cosine, exponential, linear-decay, cosine-decay or "
         "1-sqrt-decay, got " +
             shown(kind));
  }
  s.start = get_integer(j, path, "start");
  s.end = j.contains("end") ? get_integer(j, path, "end") : kForever;
  s.v0 = get_number(j, path, "v0");
  return s;
}

}  // namespace

json to_json(const Sequence& seq) {
  if (seq.is_text()) return {{"text", seq.text_value()}};
  json segs = json::array();
  for (const Segment& s : seq.segments()) {
    json j = {{"kind", segment_kind_name(s.kind)}, {"start", s.start}};
    if (s.end != kForever) j["end"] = s.end;
    j["v0"] = s.v0;
    if (interpolates(s.kind)) j["v1"] = s.v1;
    if (s.kind == SegmentKind::kExponential) {
      j["gamma"] = s.gamma;
      j["period"] = s.period;
    }
    segs.push_back(std::move(j));
  }
  return {{"segments", std::move(segs)}};
}

Sequence sequence_from_json(const json& j) {
  const std::string path = "sequence";
  if (!j.is_object()) fail(path, "expected an object, got " + shown(j));
  if (j.contains("text")) {
    check_keys(j, path, {"text"});
    if (!j["text"].is_string()) fail(path + ".text", "expected a string, got " + shown(j["text"]));
    return Sequence::text(j["text"].get<std::string>());
  }
  check_keys(j, path, {"segments"});
  const json& segs = field(j, path, "segments");
  if (!segs.is_array() || segs.empty())
    fail(path + ".segments", "expected a non-empty array, got " + shown(segs));
  std::vector<Segment> out;
  for (size_t i = 0; i < segs.size(); ++i)
    out.push_back(segment_from_json(segs[i], path + ".segments[" + std::to_string(i) + "]"));
  try {
    return Sequence::from_segments(std::move(out));
  } catch (const std::invalid_argument& e) {
    fail(path, e.what());
  }
}

json to_json(const Hyperparams& hyperparams) {
  json j = json::object();
  for (const auto& [name, seq] : hyperparams) j[name] = to_json(seq);
  return j;
}

Hyperparams hyperparams_from_json(const json& j) {
  if (!j.is_object()) fail("hyperparams", "expected an object, got " + shown(j));
  Hyperparams out;
  for (const auto& [name, value] : j.items()) {
    if (name.empty()) fail("hyperparams", "empty hyper-parameter name");
    try {
      out.emplace(name, sequence_from_json(value));
    } catch (const std::invalid_argument& e) {
      fail("hyperparams." + name, e.what());
    }
  }
  return out;
}

size_t json_nesting_beyond(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::string_view::npos;
}

}  // namespace hippo
