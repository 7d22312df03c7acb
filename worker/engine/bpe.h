// Byte-level byte-pair encoding: the gpt's subword tokenizer.
//
// Tokens 0-255 are the bytes; merge i (a pair of earlier tokens) makes token 256 + i, whose bytes
// are its pair's. Any byte string encodes, and decode(encode(s)) == s.
//
// Encoding cuts the text into pieces (bpe_pieces; no token crosses two) and, in each piece,
// joins the adjacent pair of the lowest merge number until no pair of it is a merge: the result
// of applying the merges in order, as training did.
//
// The shipped tokenizer `bpe32k` (32,768 tokens) is scripts/train-bpe's output on Debian's
// fortunes files outside the `fortunes` data set and the `wamerican` word list:
// bpe32k.merges.gz in this folder, compiled into the engine (no file is read at run time).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace hippo::worker {

// The pieces of `text`, in order, covering it: an optional space and a run of letters (A-Z, a-z,
// any byte >= 128), of digits, or of other non-whitespace bytes; else a run of whitespace (a
// space before a non-whitespace byte starts the next piece instead). scripts/train-bpe's rule.
std::vector<std::string_view> bpe_pieces(std::string_view text);

class Bpe {
 public:
  // From the merges' text, one "left right" line per merge (decimal tokens, each less than the
  // merge's own token); throws std::invalid_argument naming the line that is not.
  explicit Bpe(std::string_view merges);

  int vocab() const { return static_cast<int>(bytes_.size()); }
  std::vector<int32_t> encode(std::string_view text) const;
  // Throws std::invalid_argument for a token outside [0, vocab()).
  std::string decode(std::span<const int32_t> tokens) const;
  const std::string& bytes(int32_t token) const { return bytes_[token]; }

 private:
  // The tokens of one piece.
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

  std::vector<std::string> bytes_;                  // per token
  std::unordered_map<uint64_t, int32_t> merged_;    // (left << 32 | right) -> the merge's token
  std::vector<std::pair<int32_t, int32_t>> parts_;  // per merge: (left, right)
};

// The tokenizer named `name` ("bpe32k"), built once per process; throws std::invalid_argument
// for another name.
const Bpe& tokenizer(const std::string& name);

}  // namespace hippo::worker
