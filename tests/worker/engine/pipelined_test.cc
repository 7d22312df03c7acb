// The pipelined gpt (pipelined_engine.h): for every schedule, with 2 and 4 stages on CPU threads,
// the same trial trained pipelined and unpipelined over the same micro-batches has the same
// parameters and optimizer state, bit for bit, after several optimizer steps; and the cut.
#include <gtest/gtest.h>

#include "tests/worker/engine/recipe.h"
#include "worker/engine/engine.h"
#include "worker/engine/pipelined_engine.h"
#include "worker/engine/stage_balance.h"

namespace hippo::worker {
namespace {

using testing::kPipelineSteps;
using testing::PipelineRun;
using testing::train_pipeline_recipe;

RunConfig config(int stages, const std::string& schedule, int chunks, bool tied = true) {
  return testing::pipeline_config(stages, schedule, chunks, tied);
}

PipelineRun train(const RunConfig& c) {
  return train_pipeline_recipe(c);
}

TEST(PipelinedTest, EverySchedulePipelinedEqualsUnpipelinedBitForBit) {
  for (bool tied : {true, false}) {
    const PipelineRun alone = train(config(1, "1f1b", 1, tied));
    ASSERT_EQ(alone.state.step, kPipelineSteps);
    struct Shape {
      int stages;
      const char* schedule;
      int chunks;
    };
    for (const Shape& p :
         {Shape{2, "gpipe", 1}, Shape{4, "gpipe", 1}, Shape{2, "1f1b", 1}, Shape{4, "1f1b", 1},
          Shape{2, "interleaved", 2}, Shape{4, "interleaved", 2}, Shape{2, "bpipe", 1},
          Shape{4, "bpipe", 1}}) {
      SCOPED_TRACE(std::string(p.schedule) + " stages " + std::to_string(p.stages) + " chunks " +
                   std::to_string(p.chunks) + (tied ? " tied" : " untied"));
      const PipelineRun piped = train(config(p.stages, p.schedule, p.chunks, tied));
      EXPECT_TRUE(piped.state == alone.state);
      EXPECT_EQ(piped.metrics.loss, alone.metrics.loss);
      EXPECT_EQ(piped.metrics.accuracy, alone.metrics.accuracy);
      EXPECT_EQ(piped.hash, alone.hash);  // the pipeline does not change results: not hashed
    }
  }
}

// The gpt over bpe32k's subwords (a vocabulary of 32,768): pipelined equals unpipelined, and the
// tokenizer is part of the config hash.
TEST(PipelinedTest, Bpe32kGptPipelinedEqualsUnpipelined) {
  RunConfig c = config(1, "1f1b", 1);
  c.model["layers"] = 2;
  c.model["vocab"] = 32768;
  c.tokenizer = "bpe32k";
  const PipelineRun alone = train(c);
  EXPECT_GT(alone.metrics.loss, 9.0);  // about ln 32768 = 10.4 after 3 steps
  EXPECT_LT(alone.metrics.loss, 11.0);
  c.pipeline_stages = 2;
  const PipelineRun piped = train(c);
  EXPECT_TRUE(piped.state == alone.state);
  EXPECT_EQ(piped.metrics.loss, alone.metrics.loss);
  c.tokenizer.clear();
  EXPECT_NE(Engine(c, 1).config_hash(), alone.hash);
  c.tokenizer = "bpe64k";
  EXPECT_THROW(Engine(c, 1), std::invalid_argument);
}

// Vocabulary parallelism (the embedding and output layer of bpe32k's 32,768 tokens cut into 8
// blocks over the stages): the unpipelined parameters and optimizer state, bit for bit, for 2
// and 3 stages (3, 3 and 2 blocks), tied and untied, and interleaved.
TEST(PipelinedTest, VocabParallelEqualsUnpipelinedBitForBit) {
  for (bool tied : {true, false}) {
    RunConfig c = config(1, "1f1b", 1, tied);
    c.model["layers"] = 4;
    c.model["vocab"] = 32768;
    c.tokenizer = "bpe32k";
    const PipelineRun alone = train(c);
    c.pipeline_vocab_parallel = true;
    struct Shape {
      int stages;
      const char* schedule;
      int chunks;
    };
    for (const Shape& p :
         tied ? std::vector<Shape>{{2, "1f1b", 1}, {3, "1f1b", 1}, {2, "interleaved", 2}}
              : std::vector<Shape>{{2, "1f1b", 1}}) {
      SCOPED_TRACE(std::string(p.schedule) + " stages " + std::to_string(p.stages) +
                   (tied ? " tied" : " untied"));
      c.pipeline_stages = p.stages;
      c.pipeline_schedule = p.schedule;
      c.pipeline_chunks = p.chunks;
      if (p.chunks > 1) c.microbatches = 4;
      const PipelineRun piped = train(c);
      EXPECT_TRUE(piped.state == alone.state);
      EXPECT_EQ(piped.metrics.loss, alone.metrics.loss);
      EXPECT_EQ(piped.hash, alone.hash);
    }
  }
}

// Each stage holds its own parameters and optimizer state, read from the TrainState at the first
// step of a train() call and written back when it returns: a run split over calls, and a fork
// trained on the same engine after the original moved on, equal the unpipelined run bit for bit
// (tied and untied: the last stage's copy of wte; the vocabulary-parallel stages' rows are read
// the same way, at the first step of every run above).
TEST(PipelinedTest, StagesStateSplitsAndAssemblesAcrossCallsAndForks) {
  const Hyperparams hp = {{"lr", multistep(3e-3, {2}, 0.5)}};
  const nlohmann::json adamw = {{"optimizer", "adamw"}, {"batch_size", 16}, {"weight_decay", 0.1}};
  const nlohmann::json sgd = {{"optimizer", "sgd"},
                              {"batch_size", 16},
                              {"momentum", 0.9},
                              {"nesterov", true},
                              {"weight_decay", 1e-4}};
  const std::pair<RunConfig, nlohmann::json> runs[] = {{config(2, "1f1b", 1, true), adamw},
                                                       {config(3, "bpipe", 1, false), sgd},
                                                       {config(2, "interleaved", 2, true), sgd}};
  for (const auto& [c, fixed] : runs) {
    SCOPED_TRACE(c.model.dump() + " " + c.pipeline_schedule + " " + fixed.dump());
    RunConfig alone_config = c;
    alone_config.pipeline_stages = 1;
    alone_config.pipeline_schedule = "1f1b";
    alone_config.pipeline_chunks = 1;
    Engine alone_engine(alone_config, 1);
    TrainState alone = alone_engine.initial_state();
    alone_engine.train(alone, kPipelineSteps, hp, fixed, {});
    Engine engine(c, 1);
    TrainState s = engine.initial_state();
    engine.train(s, 1, hp, fixed, {});
    TrainState fork = s;
    engine.train(s, kPipelineSteps, hp, fixed, {});
    EXPECT_TRUE(s == alone);
    engine.train(fork, 2, hp, fixed, {});
    engine.train(fork, kPipelineSteps, hp, fixed, {});
    EXPECT_TRUE(fork == alone);
    EXPECT_EQ(engine.evaluate(fork).loss, alone_engine.evaluate(alone).loss);
  }
}

// Between the steps of a train() call the stages hold the state and the TrainState's buffers are
// empty (no second copy); after_step reads it through StepDone::state(), assembled then: an
// evaluation, a checkpoint's bytes and a fork at a step are the unpipelined run's at that step,
// bit for bit, at steps read and steps not read in between, and the fork, trained on after the
// run went on, ends where the run does. A reader of the bare TrainState is refused (no stale
// bytes). A callback that throws, or stops the run, leaves the state whole at its step.
TEST(PipelinedTest, ReadersBetweenStepsSeeTheCurrentState) {
  const Hyperparams hp = {{"lr", multistep(3e-3, {2}, 0.5)}};
  const nlohmann::json fixed = {{"optimizer", "adamw"}, {"batch_size", 16}, {"weight_decay", 0.1}};
  constexpr int64_t kSteps = 5;
  for (const RunConfig& c : {config(2, "1f1b", 1, true), config(3, "bpipe", 1, false)}) {
    SCOPED_TRACE(c.model.dump() + " " + c.pipeline_schedule);
    RunConfig alone_config = c;
    alone_config.pipeline_stages = 1;
    alone_config.pipeline_schedule = "1f1b";
    Engine alone_engine(alone_config, 1);
    // The unpipelined state after each step, its checkpoint's bytes and its loss.
    std::vector<TrainState> states;
    std::vector<std::vector<char>> files;
    std::vector<double> losses;
    TrainState alone = alone_engine.initial_state();
    alone_engine.train(alone, kSteps, hp, fixed, [&](const StepDone& done) {
      states.push_back(done.state());
      files.push_back(encode_checkpoint(done.state(), alone_engine.config_hash()));
      losses.push_back(alone_engine.evaluate(done.state()).loss);
      return true;
    });
    ASSERT_EQ(states.size(), size_t{kSteps});

    Engine engine(c, 1);
    TrainState s = engine.initial_state(), fork;
    std::vector<int64_t> read;
    engine.train(s, kSteps, hp, fixed, [&](const StepDone& done) {
      EXPECT_TRUE(s.params.empty() && s.opt_state.empty()) << done.step();
      EXPECT_THROW(engine.evaluate(s), std::invalid_argument);
      if (done.step() == 1 || done.step() == 4) return true;  // not read: nothing assembled
      const size_t at = static_cast<size_t>(done.step() - 1);
      read.push_back(done.step());
      EXPECT_EQ(engine.evaluate(done.state()).loss, losses[at]);
      EXPECT_TRUE(encode_checkpoint(done.state(), engine.config_hash()) == files[at]);
      if (done.step() == 2) fork = done.state();
      return true;
    });
    EXPECT_EQ(read, (std::vector<int64_t>{2, 3, 5}));
    EXPECT_TRUE(s == alone);
    ASSERT_EQ(fork.step, 2);
    EXPECT_TRUE(fork == states[1]);
    engine.train(fork, kSteps, hp, fixed, {});
    EXPECT_TRUE(fork == alone);

    // A callback's exception at step 2, and a stop at step 3: the state of that step, whole; the
    // first goes on to the run's end.
    TrainState failed = engine.initial_state();
    EXPECT_THROW(engine.train(failed, kSteps, hp, fixed,
                              [](const StepDone& done) {
                                if (done.step() == 2) throw std::runtime_error("a reader failed");
                                return true;
                              }),
                 std::runtime_error);
    EXPECT_TRUE(failed == states[1]);
    engine.train(failed, kSteps, hp, fixed, {});
    EXPECT_TRUE(failed == alone);
    TrainState stopped = engine.initial_state();
    engine.train(stopped, kSteps, hp, fixed, [](const StepDone& done) { return done.step() < 3; });
    EXPECT_TRUE(stopped == states[2]);
  }
}

// Each stage counts the bytes its own buffers hold: at least the activations stage_balance.h
// counts from the shapes (its peak of stashes and loans is a moment the stage holds them; the
// stage also keeps spares and scratch), on 4 stages of 1f1b and of BPipe (which lends stage 0's
// stashes to stage 3).
TEST(PipelinedTest, EachStageMeasuresItsOwnBuffers) {
  for (const char* schedule : {"1f1b", "bpipe"}) {
    SCOPED_TRACE(schedule);
    const RunConfig c = config(4, schedule, 1);
    Engine engine(c, 1);
    TrainState s = engine.initial_state();
    engine.train(s, 1, {}, {{"lr", 0.01}, {"optimizer", "sgd"}, {"batch_size", 16}}, {});
    const std::vector<int64_t> measured = engine.stage_peak_bytes();
    const auto counted = stage_balance(Gpt(GptShape::parse(c.model)),
                                       {4, 4, *pipeline::parse_schedule(schedule), 1, false}, 4, 1);
    ASSERT_EQ(measured.size(), 4u);
    for (int q = 0; q < 4; ++q) {
      EXPECT_GE(measured[q], int64_t{sizeof(float)} * counted[q].memory.activations) << q;
      EXPECT_GT(counted[q].memory.activations, 0) << q;
    }
  }
  EXPECT_TRUE(Engine(config(1, "1f1b", 1), 1).stage_peak_bytes().empty());
}

// Micro-batches change the sums: another state and another config hash (so that a checkpoint
// of one is refused by the other), while the loss stays close.
TEST(PipelinedTest, MicrobatchesBelongToTheConfig) {
  RunConfig one = config(1, "1f1b", 1);
  one.microbatches = 1;
  const PipelineRun a = train(one), b = train(config(1, "1f1b", 1));
  EXPECT_FALSE(a.state == b.state);
  EXPECT_NE(a.hash, b.hash);
  EXPECT_NEAR(a.metrics.loss, b.metrics.loss, 1e-3);
}

TEST(PipelinedTest, RefusesPipelinesThatDoNotFit) {
  // The error of building an engine for c and training one step; a refused step leaves the
  // state as it was.
  auto error = [](const RunConfig& c) {
    try {
      Engine engine(c, 1);
      TrainState s = engine.initial_state();
      const TrainState before = s;
      try {
        engine.train(s, 1, {}, {{"optimizer", "sgd"}, {"lr", 0.1}, {"batch_size", 6}}, {});
      } catch (const std::invalid_argument& e) {
        return s == before ? std::string(e.what()) : std::string("state changed");
      }
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  RunConfig c = config(4, "interleaved", 4);  // 16 positions, 8 blocks
  EXPECT_EQ(error(c).rfind("pipeline: 16 pipeline positions (stages x chunks) for a model of 8", 0),
            0u)
      << error(c);
  c = config(3, "interleaved", 2);  // 4 micro-batches are not a multiple of 3 stages
  EXPECT_EQ(error(c).rfind("pipeline.microbatches:", 0), 0u) << error(c);
  c = config(2, "zigzag", 1);
  EXPECT_EQ(error(c).rfind("pipeline.schedule: unknown schedule \"zigzag\"", 0), 0u) << error(c);
  c = testing::small_config("mlp");
  c.pipeline_stages = 2;
  EXPECT_EQ(error(c),
            "pipeline.stages: only a gpt model can be cut into pipeline stages, "
            "model.type is mlp");
  c = config(2, "1f1b", 1);  // 96 characters: one vocabulary block for two stages
  c.pipeline_vocab_parallel = true;
  EXPECT_EQ(error(c),
            "pipeline.vocab_parallel: a vocabulary of 96 tokens is 1 blocks of 4096, fewer than "
            "the 2 stages");
  c = config(2, "1f1b", 1);  // batch 6 in 4 micro-batches
  EXPECT_EQ(error(c), "setting batch_size: 6 at step 0 is not a multiple of 4 micro-batches");
}

// A device group (what a worker's --devices passes through) places the stages; on CPU threads
// the result is the same, bit for bit, whatever the group offers.
TEST(PipelinedTest, CpuGroupRunsTheStagesOnCpuThreads) {
  const PipelineRun alone = train(config(1, "1f1b", 1));
  RunConfig c = config(2, "1f1b", 1);
  c.pipeline_devices = "cpu:4";
  const PipelineRun piped = train(c);
  EXPECT_TRUE(piped.state == alone.state);
  EXPECT_EQ(piped.metrics.loss, alone.metrics.loss);

  const Gpt model(GptShape::parse(c.model));
  const PipelinedGpt on_threads(model, {4, 4, pipeline::Schedule::kOneFOneB, 1},
                                kernels::make_cpu_backend(4), DeviceGroup::parse("cpu:4"), 1);
  EXPECT_EQ(on_threads.stage_devices(), (std::vector<std::string>{"cpu", "cpu", "cpu", "cpu"}));
}

// GPUs that are not there fail when the engine is made, naming the device; a group whose first
// device does not hold the state is refused; a malformed group is refused by name.
TEST(PipelinedTest, GpuGroupsAreCheckedWhenTheEngineIsMade) {
  auto error = [](const RunConfig& c, const std::string& device = "cpu") {
    try {
      Engine engine(c, 1, device);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const int gpus = kernels::cuda_device_count();
  RunConfig c = config(2, "1f1b", 1);
  c.pipeline_devices = "cuda:" + std::to_string(gpus) + "-" + std::to_string(gpus + 1);
  EXPECT_NE(error(c).find("cuda:" + std::to_string(gpus) + " requested"), std::string::npos)
      << error(c);
  c.pipeline_devices = "cuda:1-0";
  EXPECT_EQ(error(c), "devices \"cuda:1-0\": expected cuda:A or cuda:A-B with A <= B");
  c.pipeline_devices = "";  // the engine's device: one past the last GPU
  EXPECT_NE(error(c, "cuda:" + std::to_string(gpus)).find("requested"), std::string::npos);

  const Gpt model(GptShape::parse(c.model));
  try {
    PipelinedGpt(model, {2, 4, pipeline::Schedule::kOneFOneB, 1}, kernels::make_cpu_backend(1),
                 DeviceGroup::parse("cuda:0-1"), 1);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "pipeline: the state is on cpu, not on the first device of the stages (cuda:0)");
  }
}

TEST(PipelinedTest, CutBalancesComputeWithEmbeddingAndHeadAtTheEnds) {
  nlohmann::json spec = {{"type", "gpt"}, {"layers", 4},   {"heads", 2},
                         {"dim", 64},     {"context", 32}, {"vocab", 96}};
  Gpt model(GptShape::parse(spec));
  // Blocks: embedding, 4 transformer blocks, head; the ends are cheap, so 2 stages get 2
  // transformer blocks each, 4 stages one each.
  EXPECT_EQ(cut_blocks(model, 1), (std::vector<size_t>{0, 6}));
  EXPECT_EQ(cut_blocks(model, 2), (std::vector<size_t>{0, 3, 6}));
  EXPECT_EQ(cut_blocks(model, 4), (std::vector<size_t>{0, 2, 3, 4, 6}));
  EXPECT_EQ(cut_blocks(model, 6), (std::vector<size_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_THROW(cut_blocks(model, 7), std::invalid_argument);
  // A vocabulary so large that the output layer costs more than a block gets a stage alone.
  spec["vocab"] = 4096;
  spec["layers"] = 2;
  EXPECT_EQ(cut_blocks(Gpt(GptShape::parse(spec)), 2), (std::vector<size_t>{0, 3, 4}));
  // With vocabulary parallelism the output layer is every stage's: only the transformer blocks
  // are cut, one at least per position.
  EXPECT_EQ(cut_blocks(Gpt(GptShape::parse(spec)), 2, true), (std::vector<size_t>{0, 2, 4}));
  EXPECT_EQ(cut_blocks(model, 4, true), (std::vector<size_t>{0, 2, 3, 4, 6}));
  EXPECT_THROW(cut_blocks(model, 5, true), std::invalid_argument);
}

}  // namespace
}  // namespace hippo::worker
