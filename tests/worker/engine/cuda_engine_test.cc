// Exactness of the engine on a GPU: on cuda:0, training 0 -> N in one
// call equals any split at k through a fork (a device-to-device copy) or a checkpoint, bit for
// bit, in fp32 and bf16, for the mlp, cnn and gpt models; forked children equal their trials
// trained alone; and the GPU trains the same model as the CPU (fp32: parameters within 1e-3 after
// a dozen steps). The pipelined gpt on GPUs equals the unpipelined gpt on the same GPU, bit for
// bit, also what is read between its steps. The cnn also on cuda:0:im2col (hippo's own fp32
// convolutions; bf16 stays on cuDNN there). Skipped without a CUDA device (the two-GPU pipeline
// without two).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "tests/cuda_devices.h"
#include "tests/worker/engine/recipe.h"

namespace hippo::worker {
namespace {

using testing::recipe_fixed;
using testing::recipe_hp;
using testing::small_config;

constexpr int64_t kSteps = 12;
const char* const kDevice = "cuda:0";

struct Case {
  std::string model, optimizer, precision;
  std::string device = kDevice;  // cuda:0:im2col: hippo's own fp32 convolutions
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.model << " " << c.optimizer << " " << c.precision << " on " << c.device;
}

class CudaExactnessTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { HIPPO_NEED_CUDA_DEVICES(1); }
  nlohmann::json fixed() const {
    nlohmann::json f = recipe_fixed(GetParam().optimizer);
    f["precision"] = GetParam().precision;
    return f;
  }
};

TrainState train_alone(Engine& engine, const Hyperparams& hp, const nlohmann::json& fixed,
                       int64_t to) {
  TrainState s = engine.initial_state();
  engine.train(s, to, hp, fixed, {});
  return s;
}

TEST_P(CudaExactnessTest, SplitRunsEqualOneRun) {
  Engine engine(small_config(GetParam().model), 1, GetParam().device);
  const Hyperparams hp = recipe_hp(0.05);
  const TrainState whole = train_alone(engine, hp, fixed(), kSteps);
  const Metrics whole_metrics = engine.evaluate(whole);
  EXPECT_GT(whole_metrics.loss, 0);
  EXPECT_TRUE(whole == train_alone(engine, hp, fixed(), kSteps)) << "two runs differ";

  for (int64_t k : {1, 5, 7, 11}) {
    SCOPED_TRACE("split at " + std::to_string(k));
    const TrainState head = train_alone(engine, hp, fixed(), k);
    TrainState fork = head;  // device to device
    engine.train(fork, kSteps, hp, fixed(), {});
    EXPECT_TRUE(fork == whole);

    const std::string path = (std::filesystem::temp_directory_path() /
                              ("hippo_cuda_engine_test_" + std::to_string(::getpid()) + ".ckpt"))
                                 .string();
    save_checkpoint(path, head, engine.config_hash());
    Engine other(small_config(GetParam().model), 1, GetParam().device);
    TrainState loaded =
        load_checkpoint(path, other.checkpoint_shape(k, hp, fixed()), other.backend());
    std::filesystem::remove(path);
    EXPECT_TRUE(loaded == head);
    other.train(loaded, kSteps, hp, fixed(), {});
    EXPECT_TRUE(loaded == whole);
    const Metrics m = other.evaluate(loaded);
    EXPECT_EQ(m.accuracy, whole_metrics.accuracy);
    EXPECT_EQ(m.loss, whole_metrics.loss);
  }
}

TEST_P(CudaExactnessTest, ForkedChildrenEqualTrialsTrainedAlone) {
  Engine engine(small_config(GetParam().model), 1, GetParam().device);
  for (int64_t k : {2, 6}) {
    SCOPED_TRACE("fork at " + std::to_string(k));
    auto trial = [&](double late_lr) {
      return Hyperparams{{"lr", piecewise({{0, 0.05}, {k, late_lr}})},
                         {"batch_size", Sequence::constant(32)}};
    };
    const TrainState parent = train_alone(engine, trial(0.02), fixed(), k);
    TrainState a = parent, b = parent;
    engine.train(a, kSteps, trial(0.02), fixed(), {});
    engine.train(b, kSteps, trial(0.1), fixed(), {});
    EXPECT_TRUE(a == train_alone(engine, trial(0.02), fixed(), kSteps));
    EXPECT_TRUE(b == train_alone(engine, trial(0.1), fixed(), kSteps));
    EXPECT_FALSE(a == b);
  }
}

// The same trial on the CPU and on the GPU. fp32: parameters within 1e-3 relative (rounding
// differs: other summation orders, fused multiply-adds; on the CPU, a 1e-6 relative perturbation
// of the initial parameters grows to at most 6e-5 over these 12 steps). bf16 is another trajectory
// (operands rounded to 8 significant bits; emulated on the CPU, it ends 1e-4 to 0.27 of the
// parameters' norm away from fp32, the most with Adam at this lr), so there the distance to the
// CPU's parameters must stay below half of the distance training moved them (emulated: 0.001 to
// 0.24 of it), which a broken product (about 1x or more) does not.
TEST_P(CudaExactnessTest, GpuTrainsTheSameModelAsTheCpu) {
  Engine gpu(small_config(GetParam().model), 1, GetParam().device);
  Engine cpu(small_config(GetParam().model), 1);
  nlohmann::json cpu_fixed = fixed();
  cpu_fixed["precision"] = "fp32";
  const std::vector<float> initial = cpu.initial_state().params.to_host();
  const std::vector<float> on_gpu =
      train_alone(gpu, recipe_hp(0.05), fixed(), kSteps).params.to_host();
  const std::vector<float> on_cpu =
      train_alone(cpu, recipe_hp(0.05), cpu_fixed, kSteps).params.to_host();
  ASSERT_EQ(on_gpu.size(), on_cpu.size());
  double diff = 0, norm = 0, moved = 0;
  for (size_t i = 0; i < on_cpu.size(); ++i) {
    diff += (double{on_gpu[i]} - on_cpu[i]) * (double{on_gpu[i]} - on_cpu[i]);
    norm += double{on_cpu[i]} * on_cpu[i];
    moved += (double{on_cpu[i]} - initial[i]) * (double{on_cpu[i]} - initial[i]);
  }
  if (GetParam().precision == "bf16")
    EXPECT_LT(std::sqrt(diff / moved), 0.5);
  else
    EXPECT_LT(std::sqrt(diff / norm), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Models, CudaExactnessTest,
                         ::testing::Values(Case{"mlp", "sgd", "fp32"}, Case{"cnn", "sgd", "fp32"},
                                           Case{"mlp", "adamw", "fp32"},
                                           Case{"cnn", "adam", "fp32"}, Case{"mlp", "sgd", "bf16"},
                                           Case{"cnn", "adamw", "bf16"}, Case{"gpt", "sgd", "fp32"},
                                           Case{"gpt", "adamw", "bf16"},
                                           Case{"cnn", "sgd", "fp32", "cuda:0:im2col"},
                                           Case{"cnn", "adam", "fp32", "cuda:0:im2col"},
                                           Case{"cnn", "adamw", "bf16", "cuda:0:im2col"}),
                         [](const auto& info) {
                           const bool im2col = info.param.device != kDevice;
                           return info.param.model + "_" + info.param.optimizer + "_" +
                                  info.param.precision + (im2col ? "_im2col" : "");
                         });

// The pipelined gpt on one GPU, its stages sharing cuda:0 (a stream each, activations moved by
// device copies), against the unpipelined gpt on cuda:0: every schedule, 2 and 4 stages, tied and
// untied, fp32 and bf16 products, the same parameters and optimizer state, bit for bit.
TEST(CudaPipelinedTest, StagesSharingOneGpuEqualUnpipelinedBitForBit) {
  HIPPO_NEED_CUDA_DEVICES(1);
  struct Shape {
    int stages;
    const char* schedule;
    int chunks;
  };
  for (const char* precision : {"fp32", "bf16"}) {
    for (bool tied : {true, false}) {
      const testing::PipelineRun alone = testing::train_pipeline_recipe(
          testing::pipeline_config(1, "1f1b", 1, tied), kDevice, precision);
      for (const Shape& p :
           {Shape{2, "gpipe", 1}, Shape{4, "gpipe", 1}, Shape{2, "1f1b", 1}, Shape{4, "1f1b", 1},
            Shape{2, "interleaved", 2}, Shape{4, "interleaved", 2}, Shape{2, "bpipe", 1},
            Shape{4, "bpipe", 1}}) {
        SCOPED_TRACE(std::string(p.schedule) + " stages " + std::to_string(p.stages) + " chunks " +
                     std::to_string(p.chunks) + (tied ? " tied " : " untied ") + precision);
        const testing::PipelineRun piped = testing::train_pipeline_recipe(
            testing::pipeline_config(p.stages, p.schedule, p.chunks, tied), kDevice, precision);
        EXPECT_TRUE(piped.state == alone.state);
        EXPECT_EQ(piped.metrics.loss, alone.metrics.loss);
        EXPECT_EQ(piped.metrics.accuracy, alone.metrics.accuracy);
      }
    }
  }
}

// Across two GPUs (the stages on cuda:1 work on mirrors of the parameters and gradients, NCCL
// between the GPUs, device copies between stages sharing one): the same bits as the unpipelined
// gpt on cuda:0.
TEST(CudaPipelinedTest, StagesOnTwoGpusEqualUnpipelinedBitForBit) {
  HIPPO_NEED_CUDA_DEVICES(2);
  const testing::PipelineRun alone =
      testing::train_pipeline_recipe(testing::pipeline_config(1, "1f1b", 1), kDevice);
  for (int stages : {2, 4}) {
    for (const char* schedule : {"1f1b", "bpipe"}) {
      SCOPED_TRACE(std::string(schedule) + " stages " + std::to_string(stages));
      RunConfig c = testing::pipeline_config(stages, schedule, 1);
      c.pipeline_devices = "cuda:0-1";
      const testing::PipelineRun piped = testing::train_pipeline_recipe(c, "cpu");
      EXPECT_TRUE(piped.state == alone.state);
      EXPECT_EQ(piped.metrics.loss, alone.metrics.loss);
    }
  }
}

// Between the steps the stages hold the state in their own device buffers; what after_step reads
// (StepDone::state(), assembled on cuda:0 by device copies ordered after the stages' streams) is
// the unpipelined state at that step, bit for bit, at steps read after steps not read, and the
// run goes on to the same end: stages sharing cuda:0, and on two GPUs when there are two.
TEST(CudaPipelinedTest, AfterStepReadsTheStateOfThatStep) {
  HIPPO_NEED_CUDA_DEVICES(1);
  const Hyperparams hp = {{"lr", multistep(3e-3, {2}, 0.5)}};
  const nlohmann::json fixed = {{"optimizer", "adamw"}, {"batch_size", 16}, {"weight_decay", 0.1}};
  constexpr int64_t kReadSteps = 5;
  Engine alone_engine(testing::pipeline_config(1, "1f1b", 1), 1, kDevice);
  TrainState alone = alone_engine.initial_state();
  std::vector<TrainState> states;  // after each step
  alone_engine.train(alone, kReadSteps, hp, fixed, [&](const StepDone& done) {
    states.push_back(done.state());
    return true;
  });
  std::vector<std::string> groups = {""};  // the engine's device: all stages on cuda:0
  if (kernels::cuda_device_count() >= 2) groups.push_back("cuda:0-1");
  for (const std::string& devices : groups) {
    SCOPED_TRACE("devices \"" + devices + "\"");
    RunConfig c = testing::pipeline_config(2, "1f1b", 1);
    c.pipeline_devices = devices;
    Engine engine(c, 1, kDevice);
    TrainState s = engine.initial_state();
    std::vector<int64_t> read;
    engine.train(s, kReadSteps, hp, fixed, [&](const StepDone& done) {
      if (done.step() == 1 || done.step() == 4) return true;
      read.push_back(done.step());
      EXPECT_TRUE(done.state() == states[static_cast<size_t>(done.step() - 1)]) << done.step();
      return true;
    });
    EXPECT_EQ(read, (std::vector<int64_t>{2, 3, 5}));
    EXPECT_TRUE(s == alone);
  }
}

}  // namespace
}  // namespace hippo::worker
