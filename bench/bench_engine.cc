// Training throughput of the engine: times `steps` SGD steps (after `warmup` untimed ones) of the
// reference MLP (784-256-128-10) or CNN on Fashion-MNIST, or a gpt on fortunes (a sample is a
// sequence of --context tokens; --stages > 1 pipelines it over that many CPU threads, each with
// --threads kernel threads), and prints one JSON line
//   {"model": "mlp", "batch": 128, "threads": 1, "device": "cpu", "precision": "fp32",
//    "samples_per_s": 12345.6}
// (gpt adds its shape, "microbatches", "stages", "schedule" and "tokens_per_s"). With
// --checkpoint-dir, it then saves the trained state there 5 times and adds the median times of
// the part of a save that stalls training (the copy to host memory, encode_checkpoint) and of the
// part a worker does in the background (the durable write, write_checkpoint_file), in ms.
// bench/engine_vs_pytorch.sh runs it next to the same model in PyTorch on the CPU,
// bench/gpu_vs_pytorch.sh with --device cuda:0 next to PyTorch on the same GPU.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "kernels/blas_env.h"
#include "worker/engine/engine.h"
#include "worker/engine/text_data.h"

int main(int argc, char** argv) {
  hippo::kernels::use_native_blas_kernels(argv);
  std::string model = "mlp", device = "cpu", precision = "fp32";
  int batch = 128, threads = 1, steps = 50, warmup = 5;
  int layers = 2, heads = 4, dim = 128, context = 64;  // gpt
  CLI::App app{"engine training throughput"};
  app.add_option("--model", model, "mlp, cnn or gpt")->check(CLI::IsMember({"mlp", "cnn", "gpt"}));
  app.add_option("--layers", layers, "gpt: transformer blocks")->check(CLI::Range(1, 1024));
  app.add_option("--heads", heads, "gpt: attention heads")->check(CLI::Range(1, 1024));
  app.add_option("--dim", dim, "gpt: channels")->check(CLI::Range(1, 65536));
  app.add_option("--context", context, "gpt: tokens per sequence")->check(CLI::Range(1, 4096));
  app.add_option("--batch", batch, "batch size")->check(CLI::Range(1, 60000));
  app.add_option("--threads", threads, "kernel threads")->check(CLI::Range(1, 1024));
  app.add_option("--steps", steps, "timed steps")->check(CLI::Range(1, 1000000));
  app.add_option("--warmup", warmup, "untimed steps first")->check(CLI::Range(0, 1000000));
  app.add_option("--device", device, "cpu or cuda:N");
  hippo::worker::RunConfig config;
  app.add_option("--microbatches", config.microbatches, "gpt: micro-batches per step")
      ->check(CLI::Range(1, 4096));
  app.add_option("--stages", config.pipeline_stages, "gpt: pipeline stages (CPU threads)")
      ->check(CLI::Range(1, 256));
  app.add_option("--schedule", config.pipeline_schedule, "gpt: gpipe, 1f1b, interleaved, bpipe");
  app.add_option("--chunks", config.pipeline_chunks, "gpt: model chunks per stage (interleaved)")
      ->check(CLI::Range(1, 64));
  app.add_option("--data-dir", config.data_dir, "Fashion-MNIST directory (*-ubyte.gz files)");
  app.add_option("--precision", precision, "fp32, or bf16 (matrix products; CUDA only)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  std::string checkpoint_dir;
  app.add_option("--checkpoint-dir", checkpoint_dir, "also time checkpoints written there")
      ->check(CLI::ExistingDirectory);
  CLI11_PARSE(app, argc, argv);

  config.model = model == "mlp"
                     ? nlohmann::json{{"type", "mlp"}, {"hidden", {256, 128}}}
                     : nlohmann::json{{"type", "cnn"}, {"channels", {32, 64}}, {"fc", {128}}};
  if (model == "gpt") {
    config.model = {{"type", "gpt"}, {"layers", layers},   {"heads", heads},
                    {"dim", dim},    {"context", context}, {"vocab", 96}};
    config.data = "fortunes";
    config.train_samples =  // every window
        hippo::worker::text_samples(hippo::worker::kFortunesTrainTokens, context);
    config.eval_samples = 1;
  }
  try {
    // Each pipeline stage has its own kernel threads.
    hippo::worker::Engine engine(config, threads * config.pipeline_stages, device);
    hippo::worker::TrainState state = engine.initial_state();
    const nlohmann::json fixed = {{"lr", 0.05},
                                  {"batch_size", batch},
                                  {"optimizer", "sgd"},
                                  {"momentum", 0.9},
                                  {"precision", precision}};
    // A GPU backend returns before the device is done: reading one parameter back waits for it.
    auto finish = [&] { state.params.to_host(1); };
    engine.train(state, warmup, {}, fixed, {});
    finish();
    const auto start = std::chrono::steady_clock::now();
    engine.train(state, warmup + steps, {}, fixed, {});
    finish();
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    const double samples_per_s = double(batch) * steps / elapsed.count();
    nlohmann::json line = {{"model", model},         {"batch", batch},
                           {"threads", threads},     {"device", device},
                           {"precision", precision}, {"samples_per_s", samples_per_s}};
    if (model == "gpt") {
      line["shape"] = config.model;
      line["microbatches"] = config.microbatches;
      line["stages"] = config.pipeline_stages;
      line["schedule"] = config.pipeline_schedule;
      line["tokens_per_s"] = samples_per_s * context;
    }
    if (!checkpoint_dir.empty()) {
      using Ms = std::chrono::duration<double, std::milli>;
      std::vector<double> copy_ms, write_ms;
      const std::string path = checkpoint_dir + "/bench_engine.ckpt";
      for (int i = 0; i < 5; ++i) {
        std::filesystem::remove(path);  // a checkpoint file is never overwritten
        auto t0 = std::chrono::steady_clock::now();
        const std::vector<char> bytes = hippo::worker::encode_checkpoint(state, 0);
        auto t1 = std::chrono::steady_clock::now();
        hippo::worker::write_checkpoint_file(path, bytes);
        auto t2 = std::chrono::steady_clock::now();
        copy_ms.push_back(Ms(t1 - t0).count());
        write_ms.push_back(Ms(t2 - t1).count());
        line["checkpoint_bytes"] = bytes.size();
      }
      std::filesystem::remove(path);
      auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
      };
      line["checkpoint_copy_ms"] = median(copy_ms);
      line["checkpoint_write_ms"] = median(write_ms);
    }
    std::cout << line.dump() << std::endl;
  } catch (const std::invalid_argument& e) {  // a device that is not there, bf16 on the CPU
    std::cerr << "error: " << e.what() << std::endl;
    return 2;
  } catch (const std::exception& e) {  // no data files, a device that fails
    std::cerr << "error: " << e.what() << std::endl;
    return 1;
  }
}
