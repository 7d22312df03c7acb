#include "protocol/wire.h"

#include <algorithm>

#include "stagetree/sequence_json.h"

namespace hippo::protocol {
namespace {

// Nesting deeper than this is refused before nlohmann recurses into it (a hostile frame of
// "[[[[..." must not exhaust the stack). Specs inside jobs are a handful of levels deep.
constexpr int kMaxDepth = 64;

const json& get_field(const json& m, const char* field) {
  if (!m.is_object()) throw ProtocolError("message: expected a JSON object");
  auto it = m.find(field);
  if (it == m.end()) throw ProtocolError(field_path(m, field) + ": missing");
  return *it;
}

}  // namespace

std::string field_path(const json& m, const char* field) {
  std::string type = "message";
  if (m.is_object()) {
    auto it = m.find("type");
    if (it != m.end() && it->is_string()) type = it->get<std::string>();
  }
  return type + "." + field;
}

void refuse(const json& m, const char* field, const std::string& why) {
  throw ProtocolError(field_path(m, field) + ": " + why);
}

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

json envelope(const char* type) {
  return json{{"v", kVersion}, {"type", type}};
}

std::string serialize(const json& message) {
  return message.dump();
}

int64_t get_int(const json& m, const char* field, int64_t min, int64_t max) {
  const json& f = get_field(m, field);
  if (!f.is_number_integer()) throw ProtocolError(field_path(m, field) + ": expected an integer");
  if (f.is_number_unsigned() && f.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    throw ProtocolError(field_path(m, field) + ": out of range");
  int64_t v = f.get<int64_t>();
  if (v < min || v > max)
    throw ProtocolError(field_path(m, field) + ": " + std::to_string(v) + " is outside [" +
                        std::to_string(min) + ", " + std::to_string(max) + "]");
  return v;
}

double get_number(const json& m, const char* field) {
  const json& f = get_field(m, field);
  if (!f.is_number()) throw ProtocolError(field_path(m, field) + ": expected a number");
  return f.get<double>();
}

std::string get_string(const json& m, const char* field, size_t max_length) {
  const json& f = get_field(m, field);
  if (!f.is_string()) throw ProtocolError(field_path(m, field) + ": expected a string");
  std::string s = f.get<std::string>();
  if (s.size() > max_length) throw ProtocolError(field_path(m, field) + ": string too long");
  return s;
}

const json& get_object(const json& m, const char* field) {
  const json& f = get_field(m, field);
  if (!f.is_object()) throw ProtocolError(field_path(m, field) + ": expected an object");
  return f;
}

const json& get_array(const json& m, const char* field) {
  const json& f = get_field(m, field);
  if (!f.is_array()) throw ProtocolError(field_path(m, field) + ": expected an array");
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
    throw ProtocolError(field_path(m, field) + ": \"" + name +
                        "\" is not a plain file name (letters, digits, '.', '_', '-')");
  return name;
}

bool get_bool(const json& m, const char* field, bool absent) {
  if (!m.is_object() || !m.contains(field)) return absent;
  const json& f = m[field];
  if (!f.is_boolean()) throw ProtocolError(field_path(m, field) + ": expected a boolean");
  return f.get<bool>();
}

std::vector<int64_t> get_int_list(const json& m, const char* field, size_t max_items, int64_t min,
                                  int64_t max) {
  const json& f = get_field(m, field);
  if (!f.is_array()) throw ProtocolError(field_path(m, field) + ": expected an array");
  if (f.size() > max_items)
    throw ProtocolError(field_path(m, field) + ": more than " + std::to_string(max_items) +
                        " items");
  std::vector<int64_t> out;
  out.reserve(f.size());
  for (const json& e : f) {
    if (!e.is_number_integer() ||
        (e.is_number_unsigned() && e.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)))
      throw ProtocolError(field_path(m, field) + ": expected integers");
    int64_t v = e.get<int64_t>();
    if (v < min || v > max)
      throw ProtocolError(field_path(m, field) + ": " + std::to_string(v) + " is outside [" +
                          std::to_string(min) + ", " + std::to_string(max) + "]");
    out.push_back(v);
  }
  return out;
}

}  // namespace hippo::protocol
