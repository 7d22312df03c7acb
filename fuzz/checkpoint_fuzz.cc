// libFuzzer target: the checkpoint reader (worker/engine/checkpoint.h) on arbitrary bytes. A
// CheckpointError is the documented answer to a bad checkpoint; anything else is a bug, and so is
// an accepted checkpoint that is not exactly the expected state's.
//
// A random file almost never passes the CRC-32 trailer, and a valid one must also agree field by
// field with the state the run expects. So the first byte of an input is a control byte:
//   bit 0  append the correct CRC of the rest (each input is also tried with the CRC as given, so
//          the check itself is fuzzed);
//   bit 1  expect what the header says (config hash, step, data position, RNG counter, optimizer,
//          sizes: so the body is reached) instead of kExpected, the tiny MLP of the corpus after 3
//          SGD steps (so every field check is reached);
//   bit 2  field-level mutation: the next two bytes pick a header field and an edge value for it
//          (kEdges, or the value it holds plus or minus one), written into the checkpoint that
//          follows, whose CRC is then recomputed: a forged checkpoint that only the field checks
//          can refuse.
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <string_view>

#include "kernels/kernels.h"
#include "worker/engine/checkpoint.h"

namespace {

using namespace hippo;

// mlp-sgd-step3.ckpt of the corpus.
const worker::CheckpointShape kExpected = {.config_hash = 0x5035878505f783d8ull,
                                           .step = 3,
                                           .data_position = 48,
                                           .rng_counter = 0,
                                           .optimizer = "sgd",
                                           .param_count = 1600,
                                           .opt_state_count = 1600};

// Header fields: offset and width in bytes (checkpoint.h's layout).
struct Field {
  size_t offset, width;
};
constexpr Field kFields[] = {{8, 4},  {12, 4}, {16, 8}, {24, 8},
                             {32, 8}, {40, 8}, {48, 8}, {56, 8}};  // version .. opt_state_count
constexpr int64_t kEdges[] = {0,
                              1,
                              -1,
                              2,
                              3,
                              48,
                              1600,
                              1 << 16,
                              std::numeric_limits<int32_t>::max(),
                              std::numeric_limits<uint32_t>::max(),
                              int64_t{1} << 32,
                              int64_t{1} << 62,
                              std::numeric_limits<int64_t>::min(),
                              std::numeric_limits<int64_t>::max(),
                              std::numeric_limits<int64_t>::max() / 4,
                              -48};

template <typename T>
T field(const std::string& bytes, size_t at) {
  T v;
  std::memcpy(&v, bytes.data() + at, sizeof v);
  return v;
}

worker::CheckpointShape from_header(const std::string& bytes) {
  static const char* const kOptimizers[] = {"", "sgd", "adam", "adamw"};
  worker::CheckpointShape s;
  if (bytes.size() < 64) return s;
  const uint32_t optimizer = field<uint32_t>(bytes, 12);
  s.optimizer = optimizer < 4 ? kOptimizers[optimizer] : "?";
  s.step = field<int64_t>(bytes, 16);
  s.data_position = field<int64_t>(bytes, 24);
  s.rng_counter = field<uint64_t>(bytes, 32);
  s.config_hash = field<uint64_t>(bytes, 40);
  s.param_count = field<int64_t>(bytes, 48);
  s.opt_state_count = field<int64_t>(bytes, 56);
  return s;
}

uint32_t crc_of(const char* data, size_t n) {
  return static_cast<uint32_t>(
      crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(data), static_cast<uInt>(n)));
}

void read(std::string_view bytes, const worker::CheckpointShape& expected) {
  static const std::shared_ptr<const kernels::Backend> backend = kernels::make_cpu_backend(1);
  try {
    worker::TrainState s = worker::read_checkpoint(bytes, "input", expected, backend);
    // What the reader accepts is exactly the expected state's file.
    if (static_cast<int64_t>(bytes.size()) != expected.file_bytes() || s.step != expected.step ||
        s.data_position != expected.data_position || s.rng_counter != expected.rng_counter ||
        s.optimizer != expected.optimizer || s.params.size() != expected.param_count ||
        s.opt_state.size() != expected.opt_state_count)
      __builtin_trap();
  } catch (const worker::CheckpointError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t control = data[0];
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if ((control & 4) && bytes.size() >= 2) {
    const Field f = kFields[static_cast<uint8_t>(bytes[0]) % std::size(kFields)];
    const uint8_t pick = static_cast<uint8_t>(bytes[1]);
    bytes.erase(0, 2);
    if (bytes.size() >= 68) {
      // An edge value, or the value the field holds plus or minus one.
      int64_t value = kEdges[pick % std::size(kEdges)];
      if (pick >= 128) {
        int64_t held = 0;
        std::memcpy(&held, bytes.data() + f.offset, f.width);
        // Unsigned arithmetic wraps where the field holds an edge value (INT64_MAX + 1).
        value =
            static_cast<int64_t>(static_cast<uint64_t>(held) + ((pick & 1) ? 1u : ~uint64_t{0}));
      }
      std::memcpy(bytes.data() + f.offset, &value, f.width);  // little-endian: the low bytes
      const uint32_t crc = crc_of(bytes.data(), bytes.size() - 4);
      std::memcpy(bytes.data() + bytes.size() - 4, &crc, 4);
    }
  }
  const worker::CheckpointShape expected = (control & 2) ? from_header(bytes) : kExpected;
  read(bytes, expected);
  if (control & 1) {
    const uint32_t crc = crc_of(bytes.data(), bytes.size());
    bytes.append(reinterpret_cast<const char*>(&crc), sizeof crc);
    read(bytes, (control & 2) ? from_header(bytes) : kExpected);
  }
  return 0;
}
