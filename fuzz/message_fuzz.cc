// libFuzzer target: the message decoder (protocol/message.h) on arbitrary frames. It parses the
// frame, decodes a job completely (and checks that encoding the decoded job decodes to the same
// job), and reads every other field with each field reader, as receivers do. A ProtocolError is
// the documented answer to a bad message; anything else (another exception, a crash, a sanitizer
// report) is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "protocol/message.h"

namespace {

using namespace hippo::protocol;

template <typename Read>
void read_or_refuse(Read read) {
  try {
    read();
  } catch (const ProtocolError&) {
  }
}

void decode(const json& m) {
  if (m["type"] == "job") {
    Job job = job_from_json(m);
    if (!(job_from_json(to_json(job)) == job)) __builtin_trap();
  }
  for (const auto& item : m.items()) {
    const char* field = item.key().c_str();
    const json& value = item.value();
    read_or_refuse([&] { get_int(m, field, -1, 1000); });
    read_or_refuse([&] { get_number(m, field); });
    read_or_refuse([&] { get_string(m, field, 64); });
    read_or_refuse([&] { get_file_name(m, field); });
    read_or_refuse([&] { get_object(m, field); });
    read_or_refuse([&] { run_spec_from_json(value); });
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    decode(parse(std::string_view(reinterpret_cast<const char*>(data), size)));
  } catch (const ProtocolError&) {
  }
  return 0;
}
