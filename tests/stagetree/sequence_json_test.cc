#include "stagetree/sequence_json.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>

#include "tests/stagetree/random_schedules.h"

namespace hippo {
namespace {

using nlohmann::json;

TEST(SequenceJson, ReadableFormat) {
  json j = to_json(warmup_linear(0.1, 10, step_decay(0.1, 100, 0.5)));
  EXPECT_EQ(j, json::parse(R"({"segments": [
      {"kind": "linear", "start": 0, "end": 10, "v0": 0.0, "v1": 0.1},
      {"kind": "exponential", "start": 10, "v0": 0.1, "gamma": 0.5, "period": 100}]})"));
  EXPECT_EQ(to_json(Sequence::text("adam")), json::parse(R"({"text": "adam"})"));
  EXPECT_EQ(to_json(Hyperparams{{"lr", Sequence::constant(0.5)}}),
            json::parse(R"({"lr": {"segments": [{"kind": "constant", "start": 0, "v0": 0.5}]}})"));
}

TEST(SequenceJson, RandomSequencesRoundTripThroughText) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 300; ++i) {
    Hyperparams hp;
    for (const char* name : {"lr", "momentum", "optimizer"})
      hp[name] = testing::random_sequence(rng);
    EXPECT_EQ(hyperparams_from_json(json::parse(to_json(hp).dump())), hp) << i;
  }
}

TEST(SequenceJson, DoublesRoundTripBitForBit) {
  std::mt19937_64 rng(3);
  std::vector<double> values = {-0.0, 0.0, 5e-324, 1.7976931348623157e308, 0.1 * 0.3, 1.0 / 3};
  while (values.size() < 2000) {
    double v = std::bit_cast<double>(rng());
    if (std::isfinite(v)) values.push_back(v);
  }
  for (double v : values) {
    Sequence seq = Sequence::constant(v);
    Sequence back = sequence_from_json(json::parse(to_json(seq).dump()));
    EXPECT_EQ(std::bit_cast<uint64_t>(back.value_at(0)), std::bit_cast<uint64_t>(v)) << v;
  }
}

TEST(SequenceJson, RefusesMalformedInputWithAMessage) {
  // Each input and a part of the message that must name the problem.
  const std::vector<std::pair<std::string, std::string>> corpus = {
      {R"(null)", "expected an object"},
      {R"([1, 2])", "expected an object"},
      {R"({})", "missing field \"segments\""},
      {R"({"text": 3})", "sequence.text: expected a string"},
      {R"({"text": "adam", "segments": []})", "unknown field \"segments\""},
      {R"({"segments": []})", "non-empty array"},
      {R"({"segments": {"kind": "constant"}})", "non-empty array"},
      {R"({"segments": [1]})", "segments[0]: expected an object"},
      {R"({"segments": [{"start": 0, "v0": 1}]})", "missing field \"kind\""},
      {R"({"segments": [{"kind": 3, "start": 0, "v0": 1}]})", "segments[0].kind"},
      {R"({"segments": [{"kind": "sine", "start": 0, "v0": 1}]})", "got \"sine\""},
      {R"({"segments": [{"kind": "constant", "v0": 1}]})", "missing field \"start\""},
      {R"({"segments": [{"kind": "constant", "start": 0}]})", "missing field \"v0\""},
      {R"({"segments": [{"kind": "constant", "start": 0, "v0": "1"}]})", "v0: expected a finite"},
      {R"({"segments": [{"kind": "constant", "start": 0.5, "v0": 1}]})",
       "start: expected a 64-bit"},
      {R"({"segments": [{"kind": "constant", "start": 0, "end": 18446744073709551615, "v0": 1}]})",
       "end: expected a 64-bit"},
      {R"({"segments": [{"kind": "constant", "start": 0, "v0": 1, "gamma": 2}]})",
       "unknown field \"gamma\""},
      {R"({"segments": [{"kind": "cosine", "start": 0, "end": 9, "v0": 1}]})",
       "missing field \"v1\""},
      {R"({"segments": [{"kind": "exponential", "start": 0, "v0": 1, "gamma": 0.5}]})",
       "missing field \"period\""},
      {R"({"segments": [{"kind": "exponential", "start": 0, "v0": 1, "gamma": 0, "period": 1}]})",
       "gamma must be finite and positive"},
      {R"({"segments": [{"kind": "constant", "start": 0, "end": 5, "v0": 1}]})", "never end"},
      {R"({"segments": [{"kind": "constant", "start": 0, "end": 5, "v0": 1},
                        {"kind": "constant", "start": 4, "v0": 1}]})",
       "expected 5"},
      {R"({"segments": [{"kind": "linear", "start": 0, "v0": 1, "v1": 2}]})", "finite end"},
      {R"({"segments": [{"kind": "constant", "start": 0, "end": -3, "v0": 1}]})",
       "end must be greater"},
  };
  for (const auto& [text, part] : corpus) {
    try {
      sequence_from_json(json::parse(text));
      ADD_FAILURE() << "accepted " << text;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << text << " gave: " << e.what();
    }
  }
}

TEST(SequenceJson, RefusesNonFiniteNumbersBuiltInMemory) {
  json j = to_json(Sequence::constant(1));
  j["segments"][0]["v0"] = NAN;
  EXPECT_THROW(sequence_from_json(j), std::invalid_argument);
  j["segments"][0]["v0"] = INFINITY;
  EXPECT_THROW(sequence_from_json(j), std::invalid_argument);
}

TEST(SequenceJson, HyperparamsErrorsNameTheHyperparameter) {
  try {
    hyperparams_from_json(json::parse(R"({"lr": {"text": 1}})"));
    ADD_FAILURE() << "accepted a bad hyper-parameter";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("hyperparams.lr: sequence.text"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(hyperparams_from_json(json::parse("[]")), std::invalid_argument);
  EXPECT_THROW(hyperparams_from_json(json::parse(R"({"": {"text": "a"}})")), std::invalid_argument);
}

}  // namespace
}  // namespace hippo
