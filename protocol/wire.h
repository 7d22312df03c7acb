// The wire form of every message: one JSON object per ZeroMQ message, {"v": 1, "type": "...",
// ...}, and the field readers that message.h's decoders are made of. parse() checks the size,
// the nesting depth, the version and the type; the readers check each field and throw
// ProtocolError naming it ("<type>.<field>: ..."); the receiver logs the error and drops the
// message. Nothing here touches a socket.
//
// On the master's ROUTER socket every message is three frames: [peer identity, "", body]. Workers
// (DEALER) and clients (REQ) both send the empty delimiter frame, so the master reads them alike.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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
std::string serialize(const json& message);

// Field readers that throw ProtocolError("<type>.<field>: ...") when a field is missing, of the
// wrong type, or out of range.
int64_t get_int(const json& m, const char* field, int64_t min = 0, int64_t max = INT64_MAX);
double get_number(const json& m, const char* field);
std::string get_string(const json& m, const char* field, size_t max_length = 4096);
const json& get_object(const json& m, const char* field);
const json& get_array(const json& m, const char* field);
// A checkpoint file name: a plain name ([A-Za-z0-9._-], no leading dot), never a path.
std::string get_file_name(const json& m, const char* field);
bool is_valid_file_name(std::string_view name);

// A boolean that may be absent (then `absent`).
bool get_bool(const json& m, const char* field, bool absent);
// An array of at most max_items integers, each in [min, max].
std::vector<int64_t> get_int_list(const json& m, const char* field, size_t max_items,
                                  int64_t min = 0, int64_t max = INT64_MAX);
// "<type>.<field>", the type being m's "type" ("message" when it has none): how errors name a
// field. ProtocolError("<type>.<field>: <why>").
std::string field_path(const json& m, const char* field);
[[noreturn]] void refuse(const json& m, const char* field, const std::string& why);

// A message of the given type with the version set: the start of every encoder.
json envelope(const char* type);

}  // namespace hippo::protocol
