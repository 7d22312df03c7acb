// What the bits of a worker's states depend on besides the study's spec (the determinism rule):
// its environment, which it says in its hello. The master gives a job that goes on from a state
// only to a worker whose environment for that model is the state's (master/README.md), so that a
// trial is trained in one environment from its first step to its last, and the plan records each
// state's environment.
//
// Built-in models: the engine's. On a CPU, hippo's own kernels give the same bits for every
// instruction set and thread count (kernels/README.md): "cpu, hippo 0.3.0". On a GPU: the GPU's
// model and the CUDA libraries loaded (kernels::cuda_device_environment), hippo's version, and
// ", im2col convolutions" on a cuda:N:im2col device (kernels.h, CudaConvolution).
// External trainers: the device they are given (a GPU's model) and the threads the worker gives
// them (OMP/MKL/OpenBLAS threads change PyTorch's bits on a CPU). The trainer's own libraries are
// not the worker's to know (python/README.md: a study's workers run one PyTorch build).
#pragma once

#include <string>

namespace hippo::worker {

struct WorkerEnvironment {
  std::string engine;   // for built-in models
  std::string trainer;  // for external trainers
};

// For a worker on `device` ("cpu", "cuda:N" or "cuda:N:im2col") whose trainers get `threads` threads. On a GPU
// it loads cuBLAS and cuDNN (which the engine would load at its first job); throws
// std::invalid_argument when the device is not there.
WorkerEnvironment worker_environment(const std::string& device, int threads);

}  // namespace hippo::worker
