// Continues a run of recipe.h in a fresh process, for the engine tests:
//   engine_helper MODEL OPTIMIZER LR THREADS IN_CHECKPOINT FROM TO OUT_CHECKPOINT
// loads IN_CHECKPOINT (the state after FROM steps), trains to step TO, saves OUT_CHECKPOINT and
// prints the evaluation metrics as one JSON line. Exit status 1 with a message on any error.
#include <cstdio>
#include <exception>
#include <string>

#include "tests/worker/engine/recipe.h"

int main(int argc, char** argv) {
  using namespace hippo::worker;
  if (argc != 9) {
    std::fprintf(stderr, "usage: %s MODEL OPTIMIZER LR THREADS IN FROM TO OUT\n", argv[0]);
    return 2;
  }
  try {
    Engine engine(testing::small_config(argv[1]), std::stoi(argv[4]));
    const hippo::Hyperparams hp = testing::recipe_hp(std::stod(argv[3]));
    const nlohmann::json fixed = testing::recipe_fixed(argv[2]);
    TrainState s = load_checkpoint(argv[5], engine.checkpoint_shape(std::stoll(argv[6]), hp, fixed),
                                   engine.backend());
    engine.train(s, std::stoll(argv[7]), hp, fixed, {});
    save_checkpoint(argv[8], s, engine.config_hash());
    const Metrics m = engine.evaluate(s);
    std::printf("%s\n", nlohmann::json{{"accuracy", m.accuracy}, {"loss", m.loss}}.dump().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "engine_helper: %s\n", e.what());
    return 1;
  }
}
