// The `fortunes` text corpus (Debian's `fortunes` package) as character-level tokens, and the
// windows of it that the gpt model trains on.
//
// Corpus. The files kFortunesFiles of /usr/share/games/fortunes, read in that order. A line that
// is exactly "%" separates two fortunes; the non-empty fortunes are numbered in file order from
// 0, and fortune i goes to the evaluation split if i % 10 == 9, else to the training split. Each
// split is its fortunes' text, each fortune followed by the line "%" (so the model learns where a
// fortune ends), with a tab read as one space and every other byte outside the vocabulary (the
// few backspaces, bells and UTF-8 bytes) dropped.
//
// Vocabulary (kTextVocab = 96 tokens): '\n' is token 0, the printable ASCII bytes ' ' (32) to '~'
// (126) are tokens 1 to 95 (byte - 31).
//
// Subwords. With a tokenizer (bpe.h: "bpe32k", the data spec's "tokenizer"), each split is the
// same text, the characters of its tokens above, encoded by that tokenizer instead.
//
// Samples. Sample i of a split of context T is the window tokens[i T, i T + T + 1): inputs are its
// first T tokens, targets the last T (each position predicts the next token). Consecutive windows
// share one token, so every token but the first is a target exactly once; a split of n tokens has
// (n - 1) / T samples. The training order of samples is SampleOrder's (data.h), exactly as for
// Fashion-MNIST, so the position is counted in samples.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hippo::worker {

inline constexpr int kTextVocab = 96;
inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";
inline constexpr std::array<const char*, 7> kFortunesFiles = {
    "computers", "fortunes", "humorists", "literature", "science", "wisdom", "work"};
// The split sizes of Debian's fortunes 1:1.99.1 (searchers/spec.cc derives the sample counts a
// spec may ask for from them; the loader refuses a corpus of other sizes).
inline constexpr int64_t kFortunesTrainTokens = 588288;
inline constexpr int64_t kFortunesEvalTokens = 68654;
// The same splits in bpe32k's tokens.
inline constexpr int64_t kFortunesBpe32kTrainTokens = 158863;
inline constexpr int64_t kFortunesBpe32kEvalTokens = 18425;

// The token of a byte, or -1 for a byte outside the vocabulary ('\t' is a space's token).
int32_t text_token(unsigned char byte);
// The character of a token in [0, kTextVocab).
char token_char(int32_t token);

struct TextCorpus {
  std::vector<int32_t> train, eval;  // tokens, each in [0, vocab)
  int vocab = kTextVocab;
};

// The corpus from `dir` (normally kFortunesDir) in the tokens of `tokenizer` (empty: characters),
// read once per process and shared; throws std::runtime_error naming the file when one is missing
// or unreadable, or the sizes differ from kFortunes*Tokens (another version of the package), and
// std::invalid_argument for an unknown tokenizer.
std::shared_ptr<const TextCorpus> load_fortunes(const std::string& dir,
                                                const std::string& tokenizer = "");

// Samples of context `context` in a split of `tokens` tokens: (tokens - 1) / context.
inline int64_t text_samples(int64_t tokens, int context) {
  return (tokens - 1) / context;
}

// Fills inputs[batch, context] and targets[batch, context] with the windows samples[batch] of
// `tokens` (each sample index in [0, text_samples(tokens.size(), context))).
void fill_windows(const std::vector<int32_t>& tokens, int context, const int32_t* samples,
                  int batch, int32_t* inputs, int32_t* targets);

}  // namespace hippo::worker
