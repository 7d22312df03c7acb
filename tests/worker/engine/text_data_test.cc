// The fortunes corpus of text_data.h: vocabulary, the train/eval split, windows.
#include "worker/engine/text_data.h"

#include <gtest/gtest.h>

#include <string>

namespace hippo::worker {
namespace {

std::string decode(const std::vector<int32_t>& tokens, size_t begin, size_t end) {
  std::string text;
  for (size_t i = begin; i < end; ++i) text += token_char(tokens[i]);
  return text;
}

TEST(TextDataTest, VocabularyIsNewlineAndPrintableAscii) {
  EXPECT_EQ(text_token('\n'), 0);
  EXPECT_EQ(text_token(' '), 1);
  EXPECT_EQ(text_token('~'), kTextVocab - 1);
  EXPECT_EQ(text_token('\t'), text_token(' '));
  EXPECT_EQ(text_token('\b'), -1);
  EXPECT_EQ(text_token(0xc3), -1);
  for (int32_t t = 0; t < kTextVocab; ++t) EXPECT_EQ(text_token(token_char(t)), t);
}

TEST(TextDataTest, CorpusSplitsEveryTenthFortuneIntoEvaluation) {
  auto corpus = load_fortunes(kFortunesDir);
  EXPECT_EQ(std::ssize(corpus->train), kFortunesTrainTokens);
  EXPECT_EQ(std::ssize(corpus->eval), kFortunesEvalTokens);
  for (const auto* split : {&corpus->train, &corpus->eval})
    for (int32_t t : *split) ASSERT_TRUE(t >= 0 && t < kTextVocab) << t;
  // The first fortune of `computers` (its backspaces dropped) opens the training split, each
  // fortune followed by a "%" line; its tenth opens the evaluation split.
  EXPECT_EQ(decode(corpus->train, 0, 37), "!07/11 PDP a ni deppart m'I  !pleH\n%\n");
  EXPECT_EQ(decode(corpus->eval, 0, 44), "A complex system that works is invariably fo");
  EXPECT_EQ(load_fortunes(kFortunesDir).get(), corpus.get());  // read once per process
  EXPECT_THROW(load_fortunes("/nonexistent"), std::runtime_error);
}

TEST(TextDataTest, WindowsOverlapByOneTokenAndTargetsAreTheNextTokens) {
  std::vector<int32_t> tokens(23);
  for (int i = 0; i < 23; ++i) tokens[i] = i;
  const int context = 5;
  EXPECT_EQ(text_samples(23, context), 4);  // windows start at 0, 5, 10, 15; 20 + 5 + 1 > 23
  const int32_t samples[2] = {3, 0};
  std::vector<int32_t> inputs(10), targets(10);
  fill_windows(tokens, context, samples, 2, inputs.data(), targets.data());
  EXPECT_EQ(inputs, (std::vector<int32_t>{15, 16, 17, 18, 19, 0, 1, 2, 3, 4}));
  EXPECT_EQ(targets, (std::vector<int32_t>{16, 17, 18, 19, 20, 1, 2, 3, 4, 5}));
  const int32_t outside[1] = {4};
  EXPECT_THROW(fill_windows(tokens, context, outside, 1, inputs.data(), targets.data()),
               std::invalid_argument);
}

}  // namespace
}  // namespace hippo::worker
