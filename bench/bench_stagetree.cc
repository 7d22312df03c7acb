// Merging a large random search into one stage tree: 100,000 trials, 10 hyper-parameters each,
// one root key, drawn the way a random searcher over a grid-like space would draw them. Only the
// add_trial calls are timed (not the generation of the trials, nor the tree's destruction).
#include <benchmark/benchmark.h>

#include <memory>
#include <random>

#include "stagetree/tree.h"

namespace hippo {
namespace {

struct RandomTrial {
  Hyperparams hp;
  int64_t length;
};

template <typename T>
T pick(std::mt19937_64& rng, std::initializer_list<T> values) {
  return values.begin()[rng() % values.size()];
}

std::vector<RandomTrial> make_trials(int n) {
  const int64_t epoch = 468;  // Fashion-MNIST at batch 128
  std::mt19937_64 rng(42);
  std::vector<RandomTrial> out;
  out.reserve(n);
  for (int i = 0; i < n; ++i) {
    int64_t epochs = pick<int64_t>(rng, {5, 10, 20, 30, 40});
    double init = pick(rng, {0.2, 0.1, 0.05, 0.02, 0.01});
    Sequence lr;
    switch (rng() % 5) {
      case 0:
        lr = multistep(init,
                       {pick<int64_t>(rng, {2, 4, 6}) * epoch, pick<int64_t>(rng, {8, 12}) * epoch},
                       pick(rng, {0.1, 0.3}));
        break;
      case 1:
        lr = step_decay(init, pick<int64_t>(rng, {1, 2, 5}) * epoch, pick(rng, {0.5, 0.8}));
        break;
      case 2:
        lr = cosine(init, 0, epochs * epoch);
        break;
      case 3:
        lr = warmup_linear(init, pick<int64_t>(rng, {1, 2}) * epoch,
                           cosine(init, 0, epochs * epoch));
        break;
      default:
        lr = exponential(init, pick(rng, {0.9, 0.95}), epoch);
        break;
    }
    Hyperparams hp = {
        {"lr", lr},
        {"momentum", Sequence::constant(pick(rng, {0.0, 0.9}))},
        {"weight_decay",
         piecewise({{0, pick(rng, {0.0, 5e-4})},
                    {pick<int64_t>(rng, {10, 20}) * epoch, pick(rng, {0.0, 1e-4})}})},
        {"optimizer", Sequence::text(pick<const char*>(rng, {"sgd", "adam"}))},
        {"batch_size",
         multistep(128, {pick<int64_t>(rng, {5, 15}) * epoch}, pick(rng, {1.0, 2.0}))},
        {"beta1", Sequence::constant(0.9)},
        {"beta2", Sequence::constant(pick(rng, {0.999, 0.99}))},
        {"eps", Sequence::constant(1e-8)},
        {"dropout", cosine(pick(rng, {0.0, 0.1}), 0, pick<int64_t>(rng, {10, 30}) * epoch)},
        {"label_smoothing", Sequence::constant(pick(rng, {0.0, 0.1}))},
    };
    out.push_back({std::move(hp), epochs * epoch});
  }
  return out;
}

void BM_MergeTrials(benchmark::State& state) {
  const std::vector<RandomTrial> trials = make_trials(int(state.range(0)));
  TreeCounts counts;
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<RandomTrial> batch = trials;
    auto tree = std::make_unique<StageTree>();
    state.ResumeTiming();
    for (size_t i = 0; i < batch.size(); ++i)
      tree->add_trial(TrialId(i), "fmnist-mlp", std::move(batch[i].hp), batch[i].length);
    state.PauseTiming();
    counts = tree->counts();
    tree.reset();
    state.ResumeTiming();
  }
  state.counters["stages"] = double(counts.stages);
  state.counters["unique/trial_based"] =
      double(counts.steps_unique) / double(counts.steps_trial_based);
}
BENCHMARK(BM_MergeTrials)->Arg(100000)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
}  // namespace hippo

BENCHMARK_MAIN();
