// Forged checkpoints, for the tests that attack them: files that every field check and the CRC-32
// pass, which only the content hash can tell from the producer's (worker/engine/checkpoint.h's
// layout: a 64-byte header with the parameter count at byte 48, the parameters from byte 64, and
// the CRC-32 of everything before it in the last 4 bytes). Its users link zlib.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

#include "tests/e2e/e2e_helper.h"

namespace hippo::e2e {

// Writes `bytes` over `file` in place with their CRC-32 recomputed; false when it could not.
inline bool rewrite_with_valid_crc(const std::string& file, std::string bytes) {
  if (bytes.size() < 4) return false;
  const uint32_t crc = static_cast<uint32_t>(
      crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data()), bytes.size() - 4));
  std::memcpy(bytes.data() + bytes.size() - 4, &crc, 4);
  std::fstream out(file, std::ios::in | std::ios::out | std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return out.good();
}

// Zeroes a checkpoint's parameters, keeping its header valid; false when it is no checkpoint.
inline bool zero_parameters(const std::string& file) {
  std::string bytes = read_file(file);
  if (bytes.size() < 68) return false;
  uint64_t params = 0;
  std::memcpy(&params, bytes.data() + 48, 8);
  if (64 + 4 * params + 4 > bytes.size()) return false;
  std::memset(bytes.data() + 64, 0, 4 * params);
  return rewrite_with_valid_crc(file, std::move(bytes));
}

}  // namespace hippo::e2e
