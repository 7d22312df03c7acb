// libFuzzer target: the message decoders (protocol/message.h) on arbitrary frames. It parses the
// frame and decodes it as whatever type it names (every type of AnyMessage), and checks that
// encoding the decoded message decodes to the same message, and writes no key that the type's
// field list (fields.h) does not declare. A ProtocolError is the documented answer to a bad
// message; anything else (another exception, a crash, a sanitizer report) is a bug.
//
// An input whose first byte is 0x01 is an edit: bytes 1 and 2 pick one of the declared fields of
// the type that the rest (a frame) names, and an edge value to put there (or, past the last
// value, none: the field removed). Byte mutations of JSON seldom keep a message valid; the edits
// take each field of each type, from the corpus's valid messages, to its bounds.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "protocol/message.h"

namespace {

using namespace hippo::protocol;

// The declared field names of every type, by its name on the wire.
template <typename... M>
std::map<std::string, std::vector<std::string>> declared_names(std::variant<M...>*) {
  return {{M::kType, fields::names<M>()}...};
}

const std::map<std::string, std::vector<std::string>>& names_by_type() {
  static const auto names = declared_names(static_cast<AnyMessage*>(nullptr));
  return names;
}

// Values at and past the bounds of every kind of field.
const std::vector<json>& edge_values() {
  static const std::vector<json> values = {nullptr,
                                           true,
                                           false,
                                           0,
                                           -1,
                                           1,
                                           2,
                                           INT64_MAX,
                                           INT64_MIN,
                                           UINT64_MAX,
                                           0.5,
                                           -0.0,
                                           1e308,
                                           1e9,
                                           kChunkBytes,
                                           kChunkBytes + 1,
                                           "",
                                           "nan",
                                           "inf",
                                           "-inf",
                                           "x",
                                           std::string(257, 'n'),
                                           std::string(kChunkBytes / 3 * 4 + 12, 'A'),
                                           "state-0123456789abcdef-1.ckpt",
                                           "state-0123456789abcdef-1.ckpt.tmp.0123456789abcdef",
                                           "../x",
                                           std::string(32, 'a'),
                                           json::array(),
                                           json::array({3, 2}),
                                           json::array({"x"}),
                                           json::array({json::object()}),
                                           json::object(),
                                           json{{"type", "external"}},
                                           json{{"a", nullptr}},
                                           json{{"a", "nan"}}};
  return values;
}

// Equal; a message that may hold metrics (a metric, a hello's record of a job: NaN equals
// nothing) by its bytes on the wire.
template <typename M>
bool same(const M& a, const M& b) {
  if constexpr (std::is_same_v<M, Metric> || std::is_same_v<M, Hello>)
    return serialize(a.to_json()) == serialize(b.to_json());
  return a == b;
}

void decode_and_round_trip(const json& m) {
  AnyMessage message = decode(m);
  std::visit(
      [](const auto& decoded) {
        using M = std::decay_t<decltype(decoded)>;
        const json wire = decoded.to_json();
        if (!same(M::from_json(parse(serialize(wire))), decoded)) __builtin_trap();
        if constexpr (!std::is_same_v<M, Reply>) {  // a reply's fields are the request's
          const std::vector<std::string>& declared = names_by_type().at(M::kType);
          for (const auto& [key, value] : wire.items())
            if (key != "v" && key != "type" &&
                std::find(declared.begin(), declared.end(), key) == declared.end())
              __builtin_trap();
        }
      },
      message);
}

// The edit of an input that starts with 0x01 (see above).
json edited(std::string_view input) {
  const uint8_t field = static_cast<uint8_t>(input[1]), value = static_cast<uint8_t>(input[2]);
  json m = parse(input.substr(3));
  auto it = names_by_type().find(m["type"].get<std::string>());
  if (it == names_by_type().end() || it->second.empty()) return m;
  const std::string& name = it->second[field % it->second.size()];
  const std::vector<json>& values = edge_values();
  if (value % (values.size() + 1) == values.size())
    m.erase(name);
  else
    m[name] = values[value % (values.size() + 1)];
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  try {
    if (size >= 3 && data[0] == 0x01)
      decode_and_round_trip(edited(input));
    else
      decode_and_round_trip(parse(input));
  } catch (const ProtocolError&) {
  }
  return 0;
}
