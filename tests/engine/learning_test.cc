// The reference runs learn: two epochs of SGD (momentum 0.9, lr 0.05, batch 128) on all 60000
// training images, evaluated on all 10000 test images. Release build only (label slow).
#include <gtest/gtest.h>

#include <iostream>

#include "worker/engine.h"

namespace hippo::worker {
namespace {

double two_epoch_accuracy(const nlohmann::json& model) {
  RunConfig config;
  config.model = model;
  Engine engine(config, 2);
  TrainState s = engine.initial_state();
  const nlohmann::json fixed = {
      {"lr", 0.05}, {"batch_size", 128}, {"optimizer", "sgd"}, {"momentum", 0.9}};
  engine.train(s, 2 * (60000 / 128), {}, fixed, {});
  const Metrics m = engine.evaluate(s);
  std::cout << model.dump() << ": accuracy " << m.accuracy << ", loss " << m.loss << std::endl;
  return m.accuracy;
}

TEST(LearningTest, MlpReaches085InTwoEpochs) {
  EXPECT_GE(two_epoch_accuracy({{"type", "mlp"}, {"hidden", {256, 128}}}), 0.85);
}

TEST(LearningTest, CnnReaches088InTwoEpochs) {
  EXPECT_GE(two_epoch_accuracy({{"type", "cnn"}, {"channels", {32, 64}}, {"fc", {128}}}), 0.88);
}

}  // namespace
}  // namespace hippo::worker
