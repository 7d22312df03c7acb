// FNV-1a, 64 bits: a hash that is stable across runs, machines and versions of the standard
// library, for names that must not change (a spec's root key, an engine's identity, the synthetic
// curves of `hippo simulate`). Not for security.
#pragma once

#include <cstdint>
#include <string_view>

namespace hippo {

inline uint64_t fnv1a(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

}  // namespace hippo
