// Convolutions through cuDNN, for CudaBackend (the conv2d_forward / conv2d_backward contract of
// kernels.h, without the column scratch, which only the CPU backend uses).
//
// Layout: hippo's activations are CNHW; cuDNN runs on NCHW copies in the workspace (one transpose
// kernel each way: cuDNN documents its deterministic backward algorithms for packed NCHW and NHWC
// tensors only, and CNHW would be a strided layout), and on copies of the weights aligned to 256
// bytes (a layer's weights start anywhere in the parameter buffer).
//
// Precision: fp32 runs with CUDNN_FMA_MATH (no TF32, as the cuBLAS products). bf16 runs on bf16
// copies of x, w and dy on the tensor cores with fp32 accumulation, and its results (y, dx, dw)
// come out of cuDNN as bf16 and are widened to fp32: they carry bf16 rounding, as under PyTorch's
// autocast. Parameters and everything else stay fp32.
//
// Determinism: each direction's algorithm is the first of cuDNN's
// heuristic ranking (a function of the shapes, the GPU and the library, never of timing) that
// cuDNN reports deterministic (in fp32 also: FMA math, no TF32), run under the math type it was
// ranked with, chosen once per shape and precision and kept for the life of the object, so a
// trial's bits do not depend on how it was split into stages. They may differ between GPUs of one
// architecture with other SM counts (as cuBLAS's): the GPU workers of a study share a GPU model.
//
// cuDNN is loaded (dlopen) when the first object is made, i.e. at a worker's first convolution:
// processes that train MLPs or GPTs never need it.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <map>
#include <memory>
#include <tuple>

#include "kernels/kernels.h"

struct cudnnContext;  // cudnn.h's handle type (cudnnHandle_t is cudnnContext*)

namespace hippo::kernels::cuda {

// The version of the cuDNN loaded (cudnnGetVersion: major * 10000 + minor * 100 + patch from
// cuDNN 9 on). Loads cuDNN, or throws.
int cudnn_version();

class CudnnConvolutions {
 public:
  // On the current device, with all work on `stream`. Throws if cuDNN cannot be loaded.
  explicit CudnnConvolutions(cudaStream_t stream);
  ~CudnnConvolutions();
  CudnnConvolutions(const CudnnConvolutions&) = delete;
  CudnnConvolutions& operator=(const CudnnConvolutions&) = delete;

  // Device workspace that forward and backward need for this shape and precision (the NCHW
  // copies and cuDNN's own workspace).
  size_t workspace_bytes(const ConvShape& s, Precision p);

  // y[Cout, B, Ho, Wo] = conv(x[Cin, B, H, W], w[Cout, Cin, k, k]), no bias.
  void forward(const ConvShape& s, Precision p, const float* x, const float* w, float* y,
               void* workspace);
  // From dy[Cout, B, Ho, Wo]: dw[Cout, Cin, k, k] and, unless dx is null, dx[Cin, B, H, W]
  // (both overwritten).
  void backward(const ConvShape& s, Precision p, const float* x, const float* w, const float* dy,
                float* dx, float* dw, void* workspace);

 private:
  struct Plan;
  const Plan& plan(const ConvShape& s, Precision p);

  cudaStream_t stream_;
  cudnnContext* handle_ = nullptr;
  // (batch, in, out, height, width, kernel, pad, precision) -> its descriptors and algorithms.
  std::map<std::tuple<int, int, int, int, int, int, int, int>, std::unique_ptr<Plan>> plans_;
};

}  // namespace hippo::kernels::cuda
