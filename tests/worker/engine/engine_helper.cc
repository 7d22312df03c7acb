// Continues a run of recipe.h in a fresh process, for the engine tests:
//   engine_helper MODEL OPTIMIZER LR THREADS IN_CHECKPOINT TO OUT_CHECKPOINT
// loads IN_CHECKPOINT, trains to step TO, saves OUT_CHECKPOINT and prints the evaluation metrics
// as one JSON line. Exit status 1 with a message on any error.
#include <cstdio>
#include <exception>
#include <string>

#include "tests/worker/engine/recipe.h"

int main(int argc, char** argv) {
  using namespace hippo::worker;
  if (argc != 8) {
    std::fprintf(stderr, "usage: %s MODEL OPTIMIZER LR THREADS IN TO OUT\n", argv[0]);
    return 2;
  }
  try {
    Engine engine(testing::small_config(argv[1]), std::stoi(argv[4]));
    TrainState s = load_checkpoint(argv[5], engine.config_hash(), engine.backend());
    engine.train(s, std::stoll(argv[6]), testing::recipe_hp(std::stod(argv[3])),
                 testing::recipe_fixed(argv[2]), {});
    save_checkpoint(argv[7], s, engine.config_hash());
    const Metrics m = engine.evaluate(s);
    std::printf("%s\n", nlohmann::json{{"accuracy", m.accuracy}, {"loss", m.loss}}.dump().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "engine_helper: %s\n", e.what());
    return 1;
  }
}
