// Random tokens: the names that nobody may guess or plant in advance (a master's incarnation, a
// worker's routing identity, a storage's identity, a checkpoint's temporary name, the
// dashboard's ETag prefix). One source for all of them: the kernel's, through getrandom(2), which
// is what libsodium's randombytes_buf reads on Linux too.
//
// Header-only and needing nothing but libc: the training engine (hippo_engine, which links no
// part of protocol/, nor libsodium) and the dashboard use it as the master and workers do.
#pragma once

#include <sys/random.h>

#include <cerrno>
#include <cstddef>
#include <string>
#include <system_error>

namespace hippo::protocol {

// n random bytes. Throws std::system_error when the kernel's source fails (it does not on a
// booted system: getrandom only waits, at boot, until the source is seeded).
inline std::string random_bytes(size_t n) {
  std::string out(n, '\0');
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::getrandom(out.data() + done, n - done, 0);
    if (got < 0) {
      if (errno == EINTR) continue;  // a signal during a large request
      throw std::system_error(errno, std::generic_category(), "getrandom");
    }
    done += static_cast<size_t>(got);
  }
  return out;
}

// `digits` random lowercase hex digits (4 random bits each).
inline std::string random_hex(size_t digits) {
  static constexpr char kHex[] = "0123456789abcdef";
  const std::string bytes = random_bytes((digits + 1) / 2);
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  out.resize(digits);
  return out;
}

}  // namespace hippo::protocol
