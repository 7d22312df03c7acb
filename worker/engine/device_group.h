// Where a pipelined run's stages compute: a device group, as a worker's --devices names it.
//
//   cpu:N      N stage threads of the CPU (N is what the worker offers; the engine runs one thread
//              per stage, each with its own CPU backend)
//   cuda:A     GPU A
//   cuda:A-B   GPUs A, A+1, ..., B
//
// Stages are placed on GPUs in contiguous runs: P stages on D GPUs use the first min(P, D) of
// them, and when there are more stages than GPUs, consecutive stages share one (each stage on a
// stream of its own), so that neighbours exchange activations by device copies and only the
// runs' ends cross between GPUs. A pipelined engine keeps its state (parameters, gradients,
// optimizer state) on the group's first device (home()): the stages on other GPUs get copies of
// their parameters each step and send their gradients back (pipelined_engine.h).
#pragma once

#include <string>
#include <vector>

namespace hippo::worker {

struct DeviceGroup {
  bool cuda = false;
  int first = 0;  // cuda: the first GPU
  int count = 1;  // CPU: stage threads offered; CUDA: GPUs first .. first + count - 1

  // From "cpu:N" (1 <= N <= 256), "cuda:A" or "cuda:A-B" (A <= B); throws std::invalid_argument
  // naming the text and the expected forms. Whether the GPUs exist is checked when backends are
  // made on them.
  static DeviceGroup parse(const std::string& text);
  // The group of a single device name ("cpu" or "cuda:N", kernels::Backend::name()).
  static DeviceGroup of_device(const std::string& device);

  // "cpu" or "cuda:A": the device that holds a pipelined engine's state.
  std::string home() const;
  // The GPU of each of `stages` stages (CUDA groups): stage s on first + s * used / stages, with
  // used = min(stages, count).
  std::vector<int> stage_gpus(int stages) const;
};

}  // namespace hippo::worker
