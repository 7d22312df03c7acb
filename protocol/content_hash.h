// The content hash of a state's checkpoint file (a state is what its
// producer wrote): BLAKE2b of 32 bytes (libsodium's crypto_generichash) over the file's bytes,
// written as 64 lowercase hex digits. The producer computes it as it writes the file (the
// engine's writer; for an external trainer, the worker once the trainer says the file is
// written), the master records it with the state, and whoever loads, fetches or copies the file
// compares. The CRC-32 inside the file only finds accidents: anyone who can write the file can
// also make its CRC valid, never a file that matches this hash.
//
// This is the only hashing of states: every producer and checker goes through ContentHash.
#pragma once

#include <sodium.h>

#include <array>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace hippo::protocol {

inline constexpr size_t kContentHashBytes = 32;                      // BLAKE2b-256
inline constexpr size_t kContentHashLength = 2 * kContentHashBytes;  // its hex digits

// A hash computed piece by piece, in the order the file has its bytes.
class ContentHash {
 public:
  ContentHash() {
    if (sodium_init() < 0) throw std::runtime_error("libsodium cannot be initialized");
    crypto_generichash_init(&state_, nullptr, 0, kContentHashBytes);
  }
  void update(std::string_view bytes) {
    crypto_generichash_update(&state_, reinterpret_cast<const unsigned char*>(bytes.data()),
                              bytes.size());
  }
  // The hash of everything given, as 64 lowercase hex digits (call once).
  std::string hex() {
    std::array<unsigned char, kContentHashBytes> out{};
    crypto_generichash_final(&state_, out.data(), out.size());
    std::string text(kContentHashLength + 1, '\0');
    sodium_bin2hex(text.data(), text.size(), out.data(), out.size());
    text.pop_back();
    return text;
  }

 private:
  crypto_generichash_state state_;
};

// The hash of these bytes, whole.
inline std::string content_hash(std::string_view bytes) {
  ContentHash h;
  h.update(bytes);
  return h.hex();
}

// Why `text` is not a content hash, or "" when it is one (64 lowercase hex digits). A message's
// field takes "" too: a state whose hash is unknown (a plan row written before hashes).
inline std::string content_hash_error(const std::string& text) {
  if (text.size() != kContentHashLength)
    return "a content hash has " + std::to_string(kContentHashLength) + " hex digits, not " +
           std::to_string(text.size());
  for (char c : text)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return "a content hash is lowercase hex digits";
  return "";
}

}  // namespace hippo::protocol
