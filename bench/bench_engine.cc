// Training throughput of the CPU engine: times `steps` SGD steps (after `warmup` untimed ones) of
// the reference MLP (784-256-128-10) or CNN on Fashion-MNIST and prints one JSON line
//   {"model": "mlp", "batch": 128, "threads": 1, "samples_per_s": 12345.6}
// bench/engine_vs_pytorch.sh runs it next to the same model in PyTorch.
#include <CLI/CLI.hpp>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "kernels/blas_env.h"
#include "worker/engine.h"

int main(int argc, char** argv) {
  hippo::kernels::use_native_blas_kernels(argv);
  std::string model = "mlp";
  int batch = 128, threads = 1, steps = 50, warmup = 5;
  CLI::App app{"CPU engine training throughput"};
  app.add_option("--model", model, "mlp or cnn")->check(CLI::IsMember({"mlp", "cnn"}));
  app.add_option("--batch", batch, "batch size")->check(CLI::Range(1, 60000));
  app.add_option("--threads", threads, "kernel threads")->check(CLI::Range(1, 1024));
  app.add_option("--steps", steps, "timed steps")->check(CLI::Range(1, 1000000));
  app.add_option("--warmup", warmup, "untimed steps first")->check(CLI::Range(0, 1000000));
  CLI11_PARSE(app, argc, argv);

  hippo::worker::RunConfig config;
  config.model = model == "mlp"
                     ? nlohmann::json{{"type", "mlp"}, {"hidden", {256, 128}}}
                     : nlohmann::json{{"type", "cnn"}, {"channels", {32, 64}}, {"fc", {128}}};
  hippo::worker::Engine engine(config, threads);
  hippo::worker::TrainState state = engine.initial_state();
  const nlohmann::json fixed = {
      {"lr", 0.05}, {"batch_size", batch}, {"optimizer", "sgd"}, {"momentum", 0.9}};
  engine.train(state, warmup, {}, fixed, {});
  const auto start = std::chrono::steady_clock::now();
  engine.train(state, warmup + steps, {}, fixed, {});
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  std::cout << nlohmann::json{{"model", model},
                              {"batch", batch},
                              {"threads", threads},
                              {"samples_per_s", double(batch) * steps / elapsed.count()}}
                   .dump()
            << std::endl;
}
