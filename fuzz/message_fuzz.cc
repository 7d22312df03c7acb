// libFuzzer target: the message decoders (protocol/message.h) on arbitrary frames. It parses the
// frame and decodes it as whatever type it names (every type of AnyMessage), and checks that
// encoding the decoded message decodes to the same message. A ProtocolError is the documented
// answer to a bad message; anything else (another exception, a crash, a sanitizer report) is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <variant>

#include "protocol/message.h"

namespace {

using namespace hippo::protocol;

void decode_and_round_trip(const json& m) {
  AnyMessage message = decode(m);
  std::visit(
      [](const auto& decoded) {
        using M = std::decay_t<decltype(decoded)>;
        if (!(M::from_json(parse(serialize(decoded.to_json()))) == decoded)) __builtin_trap();
      },
      message);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    decode_and_round_trip(parse(std::string_view(reinterpret_cast<const char*>(data), size)));
  } catch (const ProtocolError&) {
  }
  return 0;
}
