// libFuzzer target: the checkpoint reader (worker/engine/checkpoint.h) on arbitrary bytes. A
// CheckpointError is the documented answer to a bad checkpoint; anything else is a bug.
//
// A random file almost never passes the CRC-32 trailer, which would leave everything after it
// (the optimizer code, the config hash, the body) unexplored. So the first byte of an input is a
// control byte: bit 0 set means "append the correct CRC of the rest", bit 1 set means "expect the
// config hash that the header holds" (otherwise a fixed one). Each input is tried with the CRC as
// given too, so the check itself is fuzzed.
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "kernels/kernels.h"
#include "worker/engine/checkpoint.h"

namespace {

using namespace hippo;

void read(std::string_view bytes, uint64_t hash) {
  static const std::shared_ptr<const kernels::Backend> backend = kernels::make_cpu_backend(1);
  try {
    worker::TrainState s = worker::read_checkpoint(bytes, "input", hash, backend);
    // What the reader accepts, the writer wrote: the same bytes back.
    if (s.params.size() * 4 + s.opt_state.size() * 4 + 68 != static_cast<int64_t>(bytes.size()))
      __builtin_trap();
  } catch (const worker::CheckpointError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t control = data[0];
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  uint64_t hash = 0x1234abcd5678ef90;
  if ((control & 2) && bytes.size() >= 48) std::memcpy(&hash, bytes.data() + 40, sizeof hash);
  read(bytes, hash);
  if (control & 1) {
    uint32_t crc = static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0),
                                               reinterpret_cast<const Bytef*>(bytes.data()),
                                               static_cast<uInt>(bytes.size())));
    bytes.append(reinterpret_cast<const char*>(&crc), sizeof crc);
    read(bytes, hash);
  }
  return 0;
}
