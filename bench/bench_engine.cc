// Training throughput of the engine: times `steps` SGD steps (after `warmup` untimed ones) of the
// reference MLP (784-256-128-10) or CNN on Fashion-MNIST, or a gpt on fortunes (a sample is a
// sequence of --context tokens; --stages > 1 pipelines it over that many CPU threads, each with
// --threads kernel threads, or over the streams of --device cuda:N, or over the GPUs of
// --devices cuda:A-B), and prints one JSON line
//   {"model": "mlp", "batch": 128, "threads": 1, "device": "cpu", "isa": "avx512",
//    "precision": "fp32", "samples_per_s": 12345.6, "cpu_seconds": 1.2, "steps_done": 20,
//    "product_flops_per_step": 1.289e8, "product_gflops": 12.4}
// (cpu_seconds: CPU time of the timed steps, all threads; isa: the CPU kernels' instruction set,
// --device cpu:avx2 etc. picks one; product_*: the matrix products' flops per step and their
// rate, mlp and cnn only; gpt adds its shape, "microbatches", "stages", "schedule",
// "vocab_parallel", "tokenizer" (when given), "tokens_per_s" and "peak_rss_mib", the process's
// peak resident memory; pipelined, "stage_peak_mib", each stage's measured peak of the bytes
// its own buffers held at once: its parameters, gradients, optimizer state, activations,
// messages (PipelinedGpt::stage_peak_bytes), and "stage_memory_max_over_mean" of them). --predict
// then times each instruction on one stage's backend (stage_balance.h) and prints one more line
// per pipeline of 2, 4 and 8 stages of the same schedule: the simulator's samples/s with and
// without vocabulary parallelism from those times ({"predict": ...}; a model of at least 8
// layers, the same otherwise, so that 8 stages fit), and the same for the benchmarked model's
// own stages. With
// --checkpoint-dir, it then saves the trained state there 5 times and adds the median times of
// the part of a save that stalls training (the copy to host memory, encode_checkpoint) and of the
// part a worker does in the background (the durable write, write_checkpoint_file, which includes
// hashing the bytes), in ms, and of the content hash alone of the same bytes (checkpoint_hash_ms,
// BLAKE2b-256: what issue 29's content hashes add to a write, and to each load or fetch).
// bench/engine_vs_pytorch.sh runs it next to the same model in PyTorch on the CPU,
// bench/gpu_vs_pytorch.sh with --device cuda:0 next to PyTorch on the same GPU,
// bench/vocab_parallel.sh a bpe32k gpt on 2 stages with --vocab-parallel against without.
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "kernels/cpu_gemm.h"
#include "pipeline/schedules.h"
#include "pipeline/simulator.h"
#include "protocol/content_hash.h"
#include "worker/engine/engine.h"
#include "worker/engine/stage_balance.h"
#include "worker/engine/text_data.h"

// Floating-point operations of the matrix products of one training step of the mlp or cnn of
// `model` on 28 x 28 images, per sample: forward, weight gradients, and input gradients of every
// layer but the first (biases, activations, pooling and the loss are not counted).
double product_flops_per_sample(const nlohmann::json& model) {
  double flops = 0;
  bool first = true;
  auto layer = [&](double macs) {  // forward, weight gradient, input gradient
    flops += 2 * macs * (first ? 2 : 3);
    first = false;
  };
  int64_t features = 28 * 28;
  if (model["type"] == "cnn") {
    int64_t channels = 1, side = 28;
    for (int64_t out : model["channels"]) {
      layer(double(side * side) * out * channels * 9);
      channels = out;
      side /= 2;
    }
    features = channels * side * side;
  }
  for (int64_t out : model[model["type"] == "cnn" ? "fc" : "hidden"]) {
    layer(double(features) * out);
    features = out;
  }
  layer(double(features) * 10);
  return flops;
}

// CPU time of this process (all its threads), in seconds.
double process_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// The simulator's samples/s of one optimizer step of `shape` for `model`, from measured times:
// the program's makespan, then the update (which the engine runs after it).
double predicted_samples_per_s(const hippo::worker::Gpt& model,
                               const hippo::pipeline::PipelineShape& shape, int sequences,
                               const hippo::worker::InstructionTimes& times) {
  const hippo::pipeline::SimulationReport report = hippo::pipeline::simulate(
      hippo::pipeline::generate(shape), hippo::worker::measured_costs(model, shape, times));
  if (!report.ok()) throw std::logic_error("simulator: " + report.error_text());
  return double(shape.microbatches) * sequences / (report.makespan + times.update);
}

// {"predict": {...}} lines: without and with vocabulary parallelism on `stages` stages.
void print_predictions(const nlohmann::json& spec, const hippo::worker::RunConfig& config,
                       int batch, int threads, const std::vector<int>& stages) {
  using hippo::pipeline::PipelineShape;
  const hippo::worker::Gpt model(hippo::worker::GptShape::parse(spec));
  const int sequences = batch / config.microbatches;
  const auto schedule = *hippo::pipeline::parse_schedule(config.pipeline_schedule);
  const hippo::worker::InstructionTimes times = hippo::worker::measure_instruction_times(
      model, sequences, hippo::kernels::make_cpu_backend(threads));
  for (int p : stages) {
    const int microbatches = std::max(config.microbatches, p);  // at least one per stage
    const PipelineShape without{p, microbatches, schedule, config.pipeline_chunks, false};
    const PipelineShape with{p, microbatches, schedule, config.pipeline_chunks, true};
    const double a = predicted_samples_per_s(model, without, sequences, times);
    const double b = predicted_samples_per_s(model, with, sequences, times);
    std::cout << nlohmann::json{{"predict",
                                 {{"layers", spec["layers"]},
                                  {"stages", p},
                                  {"microbatches", microbatches},
                                  {"without", a},
                                  {"with", b},
                                  {"ratio", b / a}}}}
                     .dump()
              << std::endl;
  }
}

int main(int argc, char** argv) {
  std::string model = "mlp", device = "cpu", precision = "fp32";
  int batch = 128, threads = 1, steps = 50, warmup = 5;
  int layers = 2, heads = 4, dim = 128, context = 64, vocab = 96;  // gpt
  CLI::App app{"engine training throughput"};
  app.add_option("--model", model, "mlp, cnn or gpt")->check(CLI::IsMember({"mlp", "cnn", "gpt"}));
  app.add_option("--layers", layers, "gpt: transformer blocks")->check(CLI::Range(1, 1024));
  app.add_option("--heads", heads, "gpt: attention heads")->check(CLI::Range(1, 1024));
  app.add_option("--dim", dim, "gpt: channels")->check(CLI::Range(1, 65536));
  app.add_option("--context", context, "gpt: tokens per sequence")->check(CLI::Range(1, 4096));
  app.add_option("--vocab", vocab, "gpt: vocabulary (>= 96; 50257 for GPT-2's size)")
      ->check(CLI::Range(96, 1 << 20));
  app.add_option("--batch", batch, "batch size")->check(CLI::Range(1, 60000));
  app.add_option("--threads", threads, "kernel threads")->check(CLI::Range(1, 1024));
  app.add_option("--steps", steps, "timed steps")->check(CLI::Range(1, 1000000));
  app.add_option("--warmup", warmup, "untimed steps first")->check(CLI::Range(0, 1000000));
  app.add_option("--device", device,
                 "cpu, cpu:avx512, cpu:avx2, cpu:portable, cuda:N or cuda:N:im2col");
  hippo::worker::RunConfig config;
  app.add_option("--microbatches", config.microbatches, "gpt: micro-batches per step")
      ->check(CLI::Range(1, 4096));
  app.add_option("--stages", config.pipeline_stages,
                 "gpt: pipeline stages (CPU threads, or streams of --device's GPU)")
      ->check(CLI::Range(1, 256));
  app.add_option("--devices", config.pipeline_devices,
                 "gpt: the pipeline stages' devices, cpu:N or cuda:A-B (default: --device)");
  app.add_option("--schedule", config.pipeline_schedule, "gpt: gpipe, 1f1b, interleaved, bpipe");
  app.add_option("--chunks", config.pipeline_chunks, "gpt: model chunks per stage (interleaved)")
      ->check(CLI::Range(1, 64));
  app.add_flag("--vocab-parallel", config.pipeline_vocab_parallel,
               "gpt: the embedding and output layer cut by vocabulary across the stages");
  app.add_option("--tokenizer", config.tokenizer, "gpt: the fortunes text's tokenizer (bpe32k)")
      ->check(CLI::IsMember({"", "bpe32k"}));
  app.add_option("--data-dir", config.data_dir, "Fashion-MNIST directory (*-ubyte.gz files)");
  app.add_option("--precision", precision, "fp32, or bf16 (matrix products; CUDA only)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  bool predict = false;
  app.add_flag("--predict", predict,
               "gpt: also the simulator's samples/s on 2, 4, 8 stages from measured times");
  std::string checkpoint_dir;
  app.add_option("--checkpoint-dir", checkpoint_dir, "also time checkpoints written there")
      ->check(CLI::ExistingDirectory);
  CLI11_PARSE(app, argc, argv);

  config.model = model == "mlp"
                     ? nlohmann::json{{"type", "mlp"}, {"hidden", {256, 128}}}
                     : nlohmann::json{{"type", "cnn"}, {"channels", {32, 64}}, {"fc", {128}}};
  if (model == "gpt") {
    config.model = {{"type", "gpt"}, {"layers", layers},   {"heads", heads},
                    {"dim", dim},    {"context", context}, {"vocab", vocab}};
    config.data = "fortunes";
    config.train_samples =  // every window
        hippo::worker::text_samples(config.tokenizer.empty()
                                        ? hippo::worker::kFortunesTrainTokens
                                        : hippo::worker::kFortunesBpe32kTrainTokens,
                                    context);
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
    const double cpu_start = process_cpu_seconds();
    engine.train(state, warmup + steps, {}, fixed, {});
    finish();
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    const double cpu_seconds = process_cpu_seconds() - cpu_start;
    const double samples_per_s = double(batch) * steps / elapsed.count();
    nlohmann::json line = {{"model", model},
                           {"batch", batch},
                           {"threads", threads},
                           {"device", device},
                           {"precision", precision},
                           {"samples_per_s", samples_per_s},
                           {"cpu_seconds", cpu_seconds},
                           {"steps_done", state.step - warmup}};
    if (model != "gpt") {
      line["product_flops_per_step"] = product_flops_per_sample(config.model) * batch;
      line["product_gflops"] = product_flops_per_sample(config.model) * samples_per_s / 1e9;
    }
    if (device.rfind("cpu", 0) == 0)
      line["isa"] = device.size() > 4
                        ? device.substr(4)
                        : hippo::kernels::cpu::isa_name(hippo::kernels::cpu::best_isa());
    if (model == "gpt") {
      line["shape"] = config.model;
      line["microbatches"] = config.microbatches;
      line["stages"] = config.pipeline_stages;
      if (!config.pipeline_devices.empty()) line["devices"] = config.pipeline_devices;
      line["schedule"] = config.pipeline_schedule;
      line["vocab_parallel"] = config.pipeline_vocab_parallel;
      if (!config.tokenizer.empty()) line["tokenizer"] = config.tokenizer;
      line["tokens_per_s"] = samples_per_s * context;
      rusage usage;  // the whole process: its stages share it
      getrusage(RUSAGE_SELF, &usage);
      line["peak_rss_mib"] = double(usage.ru_maxrss) / 1024;
      if (config.pipeline_stages > 1) {
        std::vector<double> mib;
        for (int64_t bytes : engine.stage_peak_bytes()) mib.push_back(double(bytes) / (1 << 20));
        line["stage_peak_mib"] = mib;
        double sum = 0;
        for (double m : mib) sum += m;
        line["stage_memory_max_over_mean"] =
            *std::max_element(mib.begin(), mib.end()) / (sum / double(mib.size()));
      }
    }
    if (!checkpoint_dir.empty()) {
      using Ms = std::chrono::duration<double, std::milli>;
      std::vector<double> copy_ms, write_ms, hash_ms;
      const std::string path = checkpoint_dir + "/bench_engine.ckpt";
      for (int i = 0; i < 5; ++i) {
        std::filesystem::remove(path);  // a checkpoint file is never overwritten
        auto t0 = std::chrono::steady_clock::now();
        const std::vector<char> bytes = hippo::worker::encode_checkpoint(state, 0);
        auto t1 = std::chrono::steady_clock::now();
        hippo::worker::write_checkpoint_file(path, bytes);
        auto t2 = std::chrono::steady_clock::now();
        const std::string hash =
            hippo::protocol::content_hash(std::string_view(bytes.data(), bytes.size()));
        auto t3 = std::chrono::steady_clock::now();
        if (hash.empty()) throw std::runtime_error("no content hash");  // keeps the call
        copy_ms.push_back(Ms(t1 - t0).count());
        write_ms.push_back(Ms(t2 - t1).count());
        hash_ms.push_back(Ms(t3 - t2).count());
        line["checkpoint_bytes"] = bytes.size();
      }
      std::filesystem::remove(path);
      auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
      };
      line["checkpoint_copy_ms"] = median(copy_ms);
      line["checkpoint_write_ms"] = median(write_ms);
      line["checkpoint_hash_ms"] = median(hash_ms);
    }
    std::cout << line.dump() << std::endl;
    if (predict && model == "gpt") {
      print_predictions(config.model, config, batch, threads, {config.pipeline_stages});
      nlohmann::json deeper = config.model;
      deeper["layers"] = std::max(layers, 8);
      print_predictions(deeper, config, batch, threads, {2, 4, 8});
    }
  } catch (const std::invalid_argument& e) {  // a device that is not there, bf16 on the CPU
    std::cerr << "error: " << e.what() << std::endl;
    return 2;
  } catch (const std::exception& e) {  // no data files, a device that fails
    std::cerr << "error: " << e.what() << std::endl;
    return 1;
  }
}
