#include "worker/engine/bpe.h"

#include <zlib.h>

#include <charconv>
#include <stdexcept>

// The gzip of bpe32k.merges.gz, compiled in by CMake (embed.cmake).
extern const unsigned char kBpe32kMergesGz[];
extern const size_t kBpe32kMergesGzSize;

namespace hippo::worker {
namespace {

bool is_space(unsigned char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

// 0 letter, 1 digit, 2 other visible bytes (whitespace is apart).
int byte_class(unsigned char c) {
  if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c >= 0x80) return 0;
  if (c >= '0' && c <= '9') return 1;
  return 2;
}

std::string gunzip(const unsigned char* data, size_t size) {
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) throw std::runtime_error("bpe: inflateInit2");
  z.next_in = const_cast<unsigned char*>(data);
  z.avail_in = static_cast<uInt>(size);
  std::string out;
  char chunk[1 << 16];
  int rc = Z_OK;
  while (rc == Z_OK) {
    z.next_out = reinterpret_cast<unsigned char*>(chunk);
    z.avail_out = sizeof chunk;
    rc = inflate(&z, Z_NO_FLUSH);
    out.append(chunk, sizeof chunk - z.avail_out);
  }
  inflateEnd(&z);
  if (rc != Z_STREAM_END) throw std::runtime_error("bpe: the compiled-in merges are corrupt");
  return out;
}

uint64_t pair_key(int32_t left, int32_t right) {
  return uint64_t{static_cast<uint32_t>(left)} << 32 | static_cast<uint32_t>(right);
}

}  // namespace

std::vector<std::string_view> bpe_pieces(std::string_view text) {
  std::vector<std::string_view> pieces;
  const size_t n = text.size();
  auto at = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  size_t i = 0;
  while (i < n) {
    size_t j = i;
    if (at(i) == ' ' && i + 1 < n && !is_space(at(i + 1))) ++j;  // the space joins the word
    if (!is_space(at(j))) {
      const int cls = byte_class(at(j));
      while (j < n && !is_space(at(j)) && byte_class(at(j)) == cls) ++j;
    } else {
      while (j < n && is_space(at(j)) && !(at(j) == ' ' && j + 1 < n && !is_space(at(j + 1)))) ++j;
    }
    pieces.push_back(text.substr(i, j - i));
    i = j;
  }
  return pieces;
}

Bpe::Bpe(std::string_view merges) {
  for (int b = 0; b < 256; ++b) bytes_.emplace_back(1, static_cast<char>(b));
  size_t line = 0;
  while (!merges.empty()) {
    ++line;
    const size_t end = merges.find('\n');
    const std::string_view text = merges.substr(0, end);
    merges.remove_prefix(end == std::string_view::npos ? merges.size() : end + 1);
    const int32_t token = vocab();
    int32_t left = -1, right = -1;
    const char* p = text.data();
    const char* last = text.data() + text.size();
    auto [mid, e1] = std::from_chars(p, last, left);
    bool ok = e1 == std::errc() && mid < last && *mid == ' ';
    if (ok) {
      auto [stop, e2] = std::from_chars(mid + 1, last, right);
      ok = e2 == std::errc() && stop == last;
    }
    if (!ok || left < 0 || right < 0 || left >= token || right >= token ||
        merged_.contains(pair_key(left, right)))
      throw std::invalid_argument("bpe merges line " + std::to_string(line) + ": expected two " +
                                  "tokens below " + std::to_string(token) +
                                  " not merged before, got \"" + std::string(text) + "\"");
    merged_.emplace(pair_key(left, right), token);
    parts_.emplace_back(left, right);
    bytes_.push_back(bytes_[left] + bytes_[right]);
  }
}

void Bpe::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  std::vector<int32_t> symbols(piece.begin(), piece.end());
  for (int32_t& s : symbols) s = static_cast<unsigned char>(s);
  while (symbols.size() > 1) {
    // The pair of the lowest merge (the earliest: merged tokens grow with the merge number).
    int32_t best = -1;
    for (size_t k = 0; k + 1 < symbols.size(); ++k)
      if (const auto it = merged_.find(pair_key(symbols[k], symbols[k + 1]));
          it != merged_.end() && (best < 0 || it->second < best))
        best = it->second;
    if (best < 0) break;
    const auto [left, right] = parts_[best - 256];
    size_t w = 0;
    for (size_t k = 0; k < symbols.size(); ++k) {
      if (k + 1 < symbols.size() && symbols[k] == left && symbols[k + 1] == right) {
        symbols[w++] = best;
        ++k;
      } else {
        symbols[w++] = symbols[k];
      }
    }
    symbols.resize(w);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
}

std::vector<int32_t> Bpe::encode(std::string_view text) const {
  std::vector<int32_t> tokens;
  // Texts repeat their words: each distinct piece is encoded once.
  std::unordered_map<std::string_view, std::vector<int32_t>> seen;
  for (std::string_view piece : bpe_pieces(text)) {
    auto [it, fresh] = seen.try_emplace(piece);
    if (fresh) encode_piece(piece, it->second);
    tokens.insert(tokens.end(), it->second.begin(), it->second.end());
  }
  return tokens;
}

std::string Bpe::decode(std::span<const int32_t> tokens) const {
  std::string text;
  for (int32_t t : tokens) {
    if (t < 0 || t >= vocab())
      throw std::invalid_argument("bpe: token " + std::to_string(t) + " is outside [0, " +
                                  std::to_string(vocab()) + ")");
    text += bytes_[t];
  }
  return text;
}

const Bpe& tokenizer(const std::string& name) {
  if (name != "bpe32k")
    throw std::invalid_argument("unknown tokenizer \"" + name + "\" (known: bpe32k)");
  static const Bpe bpe(gunzip(kBpe32kMergesGz, kBpe32kMergesGzSize));
  return bpe;
}

}  // namespace hippo::worker
