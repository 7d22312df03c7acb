// The byte-pair encoding of bpe.h: pieces, the merges' order, round trips on the fortunes text and
// on arbitrary bytes, the shipped bpe32k.
#include "worker/engine/bpe.h"

#include <gtest/gtest.h>

#include <random>

#include "worker/engine/text_data.h"

namespace hippo::worker {
namespace {

std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view p : bpe_pieces(text)) out.emplace_back(p);
  return out;
}

TEST(BpeTest, PiecesAreWordsWithTheirSpaceDigitsPunctuationAndWhitespace) {
  EXPECT_EQ(pieces("Hello, world!  42\n\tfoo\xc3\xa9 "),
            (std::vector<std::string>{"Hello", ",", " world", "!", " ", " 42", "\n\t",
                                      "foo\xc3\xa9", " "}));
  EXPECT_EQ(pieces(""), std::vector<std::string>{});
  EXPECT_EQ(pieces("   x"), (std::vector<std::string>{"  ", " x"}));
}

TEST(BpeTest, EncodingAppliesTheMergesInTheirOrder) {
  const Bpe abc("97 98\n256 99\n");  // ab, then abc
  EXPECT_EQ(abc.vocab(), 258);
  EXPECT_EQ(abc.encode("abcab"), (std::vector<int32_t>{257, 256}));
  const Bpe bc_first("98 99\n97 98\n");  // bc comes before ab: "abc" is a + bc
  EXPECT_EQ(bc_first.encode("abc"), (std::vector<int32_t>{97, 256}));
  EXPECT_EQ(bc_first.encode("ab bc"), (std::vector<int32_t>{257, 32, 256}));  // " bc": one piece
  EXPECT_EQ(bc_first.decode(std::vector<int32_t>{257, 32, 256}), "ab bc");
  EXPECT_THROW(bc_first.decode(std::vector<int32_t>{258}), std::invalid_argument);
}

TEST(BpeTest, MalformedMergesAreRefusedByLine) {
  for (const char* bad : {"97 98\n97 98\n", "97 256\n", "97\n", "97 98 99\n", "-1 3\n", "a b\n"}) {
    try {
      Bpe b(bad);
      ADD_FAILURE() << bad;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("bpe merges line"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(tokenizer("bpe64k"), std::invalid_argument);
}

TEST(BpeTest, Bpe32kRoundTripsArbitraryBytes) {
  const Bpe& bpe = tokenizer("bpe32k");
  EXPECT_EQ(bpe.vocab(), 32768);
  std::mt19937 gen(7);
  for (int n : {0, 1, 2, 17, 1000}) {
    std::string bytes(n, '\0');
    for (char& b : bytes) b = static_cast<char>(gen() % 256);
    EXPECT_EQ(bpe.decode(bpe.encode(bytes)), bytes) << n;
  }
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  EXPECT_EQ(bpe.decode(bpe.encode(all + all)), all + all);
  EXPECT_EQ(bpe.encode(" the").size(), 1u);  // a frequent word is one token
}

TEST(BpeTest, Bpe32kRoundTripsTheFortunesText) {
  const Bpe& bpe = tokenizer("bpe32k");
  auto characters = load_fortunes(kFortunesDir);
  auto subwords = load_fortunes(kFortunesDir, "bpe32k");
  EXPECT_EQ(subwords->vocab, 32768);
  EXPECT_EQ(std::ssize(subwords->train), kFortunesBpe32kTrainTokens);
  EXPECT_EQ(std::ssize(subwords->eval), kFortunesBpe32kEvalTokens);
  for (auto [chars, tokens] : {std::pair{&characters->train, &subwords->train},
                               std::pair{&characters->eval, &subwords->eval}}) {
    std::string text;
    for (int32_t t : *chars) text += token_char(t);
    EXPECT_EQ(bpe.decode(*tokens), text);
    EXPECT_LT(tokens->size() * 3, chars->size());  // more than 3 characters a token
  }
  EXPECT_EQ(load_fortunes(kFortunesDir, "bpe32k").get(), subwords.get());  // once per process
}

}  // namespace
}  // namespace hippo::worker
