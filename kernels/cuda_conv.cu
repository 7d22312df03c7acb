// Convolutions through cuDNN's convolution API (cuda_conv.cuh says what and why).
#include <cuda_bf16.h>
#include <cudnn.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cuda_check.cuh"
#include "kernels/cuda_conv.cuh"
#include "kernels/cuda_library.h"
#include "kernels/cuda_ops.cuh"

namespace hippo::kernels::cuda {
namespace {

// The cuDNN entry points used here, from the library of the major version hippo was built with
// (cuda_library.h).
struct Cudnn {
  decltype(&cudnnCreate) create;
  decltype(&cudnnDestroy) destroy;
  decltype(&cudnnSetStream) set_stream;
  decltype(&cudnnGetErrorString) error_string;
  decltype(&cudnnGetCudartVersion) cudart_version;
  decltype(&cudnnGetVersion) version;
  decltype(&cudnnCreateTensorDescriptor) create_tensor;
  decltype(&cudnnDestroyTensorDescriptor) destroy_tensor;
  decltype(&cudnnSetTensor4dDescriptor) set_tensor;
  decltype(&cudnnCreateFilterDescriptor) create_filter;
  decltype(&cudnnDestroyFilterDescriptor) destroy_filter;
  decltype(&cudnnSetFilter4dDescriptor) set_filter;
  decltype(&cudnnCreateConvolutionDescriptor) create_convolution;
  decltype(&cudnnDestroyConvolutionDescriptor) destroy_convolution;
  decltype(&cudnnSetConvolution2dDescriptor) set_convolution;
  decltype(&cudnnSetConvolutionMathType) set_math_type;
  decltype(&cudnnGetConvolutionForwardAlgorithm_v7) rank_forward;
  decltype(&cudnnGetConvolutionBackwardDataAlgorithm_v7) rank_backward_data;
  decltype(&cudnnGetConvolutionBackwardFilterAlgorithm_v7) rank_backward_filter;
  decltype(&cudnnGetConvolutionForwardWorkspaceSize) forward_workspace;
  decltype(&cudnnGetConvolutionBackwardDataWorkspaceSize) backward_data_workspace;
  decltype(&cudnnGetConvolutionBackwardFilterWorkspaceSize) backward_filter_workspace;
  decltype(&cudnnConvolutionForward) forward;
  decltype(&cudnnConvolutionBackwardData) backward_data;
  decltype(&cudnnConvolutionBackwardFilter) backward_filter;
};

const Cudnn& cudnn() {
  static const Cudnn api = [] {
    const RuntimeLibrary library("cudnn", CUDNN_MAJOR, "cuDNN, for convolutions on the GPU");
    auto load = [&](auto& fn, const char* name) { library.load(fn, name); };
    Cudnn c{};
    load(c.create, "cudnnCreate");
    load(c.destroy, "cudnnDestroy");
    load(c.set_stream, "cudnnSetStream");
    load(c.error_string, "cudnnGetErrorString");
    load(c.cudart_version, "cudnnGetCudartVersion");
    load(c.version, "cudnnGetVersion");
    // A cuDNN built for another CUDA major version (e.g. one from a Python wheel found first on
    // the library path) fails in obscure ways later: say so now.
    if (c.cudart_version() / 1000 != CUDART_VERSION / 1000)
      throw std::runtime_error("the libcudnn.so." + std::to_string(CUDNN_MAJOR) +
                               " found is built for CUDA " +
                               std::to_string(c.cudart_version() / 1000) + ", hippo for CUDA " +
                               std::to_string(CUDART_VERSION / 1000) + " (check LD_LIBRARY_PATH)");
    load(c.create_tensor, "cudnnCreateTensorDescriptor");
    load(c.destroy_tensor, "cudnnDestroyTensorDescriptor");
    load(c.set_tensor, "cudnnSetTensor4dDescriptor");
    load(c.create_filter, "cudnnCreateFilterDescriptor");
    load(c.destroy_filter, "cudnnDestroyFilterDescriptor");
    load(c.set_filter, "cudnnSetFilter4dDescriptor");
    load(c.create_convolution, "cudnnCreateConvolutionDescriptor");
    load(c.destroy_convolution, "cudnnDestroyConvolutionDescriptor");
    load(c.set_convolution, "cudnnSetConvolution2dDescriptor");
    load(c.set_math_type, "cudnnSetConvolutionMathType");
    load(c.rank_forward, "cudnnGetConvolutionForwardAlgorithm_v7");
    load(c.rank_backward_data, "cudnnGetConvolutionBackwardDataAlgorithm_v7");
    load(c.rank_backward_filter, "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
    load(c.forward_workspace, "cudnnGetConvolutionForwardWorkspaceSize");
    load(c.backward_data_workspace, "cudnnGetConvolutionBackwardDataWorkspaceSize");
    load(c.backward_filter_workspace, "cudnnGetConvolutionBackwardFilterWorkspaceSize");
    load(c.forward, "cudnnConvolutionForward");
    load(c.backward_data, "cudnnConvolutionBackwardData");
    load(c.backward_filter, "cudnnConvolutionBackwardFilter");
    return c;
  }();
  return api;
}

void check_cudnn(cudnnStatus_t status, const char* call, const char* file, int line) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw std::runtime_error("cuDNN error " + std::string(cudnn().error_string(status)) + " in " +
                             call_site(call, file, line));
}
#define HIPPO_CUDNN_CHECK(call) check_cudnn((call), #call, __FILE__, __LINE__)

// Algorithms needing more workspace than this (FFT variants on large images) are passed over.
constexpr size_t kMaxCudnnWorkspace = size_t{1} << 30;

std::string describe(const ConvShape& s, Precision p) {
  return "x[" + std::to_string(s.in_channels) + ", " + std::to_string(s.batch) + ", " +
         std::to_string(s.height) + ", " + std::to_string(s.width) + "], " +
         std::to_string(s.out_channels) + " filters " + std::to_string(s.kernel) + "x" +
         std::to_string(s.kernel) + " pad " + std::to_string(s.pad) +
         (p == Precision::kBf16 ? ", bf16" : ", fp32");
}

// FFT and Winograd algorithms convolve in a transformed domain: their rounding differs from a
// direct product's by more than the fp32 tolerance against the CPU (1e-5), so fp32 passes them
// over.
bool transforms(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
bool transforms(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
bool transforms(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

// The first of cuDNN's ranked (algorithm, math type) pairs that runs here, is deterministic, fits
// the workspace limit and, in fp32, is a direct product in plain FMA arithmetic (no TF32, no
// transform).
template <typename Perf>
Perf first_deterministic(const Perf* ranked, int count, const char* direction, const ConvShape& s,
                         Precision p) {
  for (int i = 0; i < count; ++i)
    if (ranked[i].status == CUDNN_STATUS_SUCCESS && ranked[i].determinism == CUDNN_DETERMINISTIC &&
        ranked[i].memory <= kMaxCudnnWorkspace &&
        (p == Precision::kBf16 ||
         (ranked[i].mathType == CUDNN_FMA_MATH && !transforms(ranked[i].algo))))
      return ranked[i];
  throw std::runtime_error(std::string("cuDNN offers no deterministic ") + direction +
                           " convolution algorithm for " + describe(s, p));
}

// Offsets in the workspace start on 256-byte boundaries (what cuDNN and vector loads want).
size_t aligned(size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

// dst[b, c, inner] = src[c, b, inner] (CNHW -> NCHW), as float or bf16.
void to_nchw(cudaStream_t stream, Precision p, const float* src, void* dst, int64_t c, int64_t b,
             int64_t inner) {
  if (p == Precision::kBf16)
    swap_outer_axes(stream, src, static_cast<__nv_bfloat16*>(dst), c, b, inner);
  else
    swap_outer_axes(stream, src, static_cast<float*>(dst), c, b, inner);
}

// dst[c, b, inner] = src[b, c, inner] (NCHW -> CNHW), widened to float.
void from_nchw(cudaStream_t stream, Precision p, const void* src, float* dst, int64_t b, int64_t c,
               int64_t inner) {
  if (p == Precision::kBf16)
    swap_outer_axes(stream, static_cast<const __nv_bfloat16*>(src), dst, b, c, inner);
  else
    swap_outer_axes(stream, static_cast<const float*>(src), dst, b, c, inner);
}

}  // namespace

// One shape's descriptors, algorithms and workspace layout (byte offsets). Each direction has its
// own convolution descriptor, set to the math type that cuDNN ranked its algorithm with (cuDNN
// runs the algorithm under the descriptor's math type).
struct CudnnConvolutions::Plan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;  // NCHW input and output
  cudnnFilterDescriptor_t w = nullptr;               // [Cout, Cin, k, k]
  cudnnConvolutionDescriptor_t forward_conv = nullptr, backward_data_conv = nullptr,
                               backward_filter_conv = nullptr;
  cudnnConvolutionFwdAlgo_t forward{};
  cudnnConvolutionBwdDataAlgo_t backward_data{};
  cudnnConvolutionBwdFilterAlgo_t backward_filter{};
  // NCHW copies of x and dx, aligned copies of w and dw (bf16 in bf16), the NCHW y or dy, and
  // cuDNN's own workspace.
  size_t x_at = 0, dx_at = 0, w_at = 0, dw_at = 0, y_at = 0, cudnn_at = 0, cudnn_bytes = 0;
  size_t total = 0;

  ~Plan() {
    if (x) cudnn().destroy_tensor(x);
    if (y) cudnn().destroy_tensor(y);
    if (w) cudnn().destroy_filter(w);
    for (cudnnConvolutionDescriptor_t c : {forward_conv, backward_data_conv, backward_filter_conv})
      if (c) cudnn().destroy_convolution(c);
  }
};

CudnnConvolutions::CudnnConvolutions(cudaStream_t stream) : stream_(stream) {
  HIPPO_CUDNN_CHECK(cudnn().create(&handle_));
  try {
    HIPPO_CUDNN_CHECK(cudnn().set_stream(handle_, stream_));
  } catch (...) {
    cudnn().destroy(handle_);  // the destructor does not run for a constructor that throws
    throw;
  }
}

CudnnConvolutions::~CudnnConvolutions() {
  plans_.clear();
  if (handle_) cudnn().destroy(handle_);
}

int cudnn_version() {
  return static_cast<int>(cudnn().version());
}

const CudnnConvolutions::Plan& CudnnConvolutions::plan(const ConvShape& s, Precision p) {
  const auto key = std::make_tuple(s.batch, s.in_channels, s.out_channels, s.height, s.width,
                                   s.kernel, s.pad, static_cast<int>(p));
  if (auto found = plans_.find(key); found != plans_.end()) return *found->second;

  auto plan = std::make_unique<Plan>();
  const bool bf16 = p == Precision::kBf16;
  const cudnnDataType_t type = bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
  const Cudnn& api = cudnn();
  HIPPO_CUDNN_CHECK(api.create_tensor(&plan->x));
  HIPPO_CUDNN_CHECK(api.create_tensor(&plan->y));
  HIPPO_CUDNN_CHECK(api.create_filter(&plan->w));
  HIPPO_CUDNN_CHECK(
      api.set_tensor(plan->x, CUDNN_TENSOR_NCHW, type, s.batch, s.in_channels, s.height, s.width));
  HIPPO_CUDNN_CHECK(api.set_tensor(plan->y, CUDNN_TENSOR_NCHW, type, s.batch, s.out_channels,
                                   s.out_height(), s.out_width()));
  HIPPO_CUDNN_CHECK(api.set_filter(plan->w, type, CUDNN_TENSOR_NCHW, s.out_channels, s.in_channels,
                                   s.kernel, s.kernel));
  // Cross-correlation (as the CPU backend's im2col product), fp32 accumulation in both
  // precisions; ranked under FMA only in fp32 (no TF32, which would round the operands to 10
  // bits), under tensor cores in bf16.
  for (cudnnConvolutionDescriptor_t* conv :
       {&plan->forward_conv, &plan->backward_data_conv, &plan->backward_filter_conv}) {
    HIPPO_CUDNN_CHECK(api.create_convolution(conv));
    HIPPO_CUDNN_CHECK(api.set_convolution(*conv, s.pad, s.pad, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                          CUDNN_DATA_FLOAT));
    HIPPO_CUDNN_CHECK(api.set_math_type(*conv, bf16 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  }

  int count = 0;
  cudnnConvolutionFwdAlgoPerf_t forward[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  HIPPO_CUDNN_CHECK(api.rank_forward(handle_, plan->x, plan->w, plan->forward_conv, plan->y,
                                     CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, forward));
  const auto chosen_forward = first_deterministic(forward, count, "forward", s, p);
  plan->forward = chosen_forward.algo;
  HIPPO_CUDNN_CHECK(api.set_math_type(plan->forward_conv, chosen_forward.mathType));

  cudnnConvolutionBwdDataAlgoPerf_t backward_data[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  HIPPO_CUDNN_CHECK(api.rank_backward_data(handle_, plan->w, plan->y, plan->backward_data_conv,
                                           plan->x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count,
                                           backward_data));
  const auto chosen_data = first_deterministic(backward_data, count, "backward-data", s, p);
  plan->backward_data = chosen_data.algo;
  HIPPO_CUDNN_CHECK(api.set_math_type(plan->backward_data_conv, chosen_data.mathType));

  cudnnConvolutionBwdFilterAlgoPerf_t backward_filter[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  HIPPO_CUDNN_CHECK(api.rank_backward_filter(handle_, plan->x, plan->y, plan->backward_filter_conv,
                                             plan->w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
                                             &count, backward_filter));
  const auto chosen_filter = first_deterministic(backward_filter, count, "backward-filter", s, p);
  plan->backward_filter = chosen_filter.algo;
  HIPPO_CUDNN_CHECK(api.set_math_type(plan->backward_filter_conv, chosen_filter.mathType));

  size_t forward_bytes = 0, backward_data_bytes = 0, backward_filter_bytes = 0;
  HIPPO_CUDNN_CHECK(api.forward_workspace(handle_, plan->x, plan->w, plan->forward_conv, plan->y,
                                          plan->forward, &forward_bytes));
  HIPPO_CUDNN_CHECK(api.backward_data_workspace(handle_, plan->w, plan->y, plan->backward_data_conv,
                                                plan->x, plan->backward_data,
                                                &backward_data_bytes));
  HIPPO_CUDNN_CHECK(api.backward_filter_workspace(handle_, plan->x, plan->y,
                                                  plan->backward_filter_conv, plan->w,
                                                  plan->backward_filter, &backward_filter_bytes));

  const size_t element = bf16 ? sizeof(__nv_bfloat16) : sizeof(float);
  const size_t x_bytes = aligned(element * s.in_channels * s.batch * s.height * s.width);
  const size_t y_bytes = aligned(element * s.out_channels * s.col_cols());
  const size_t w_bytes = aligned(element * s.out_channels * s.col_rows());
  plan->dx_at = plan->x_at + x_bytes;
  plan->w_at = plan->dx_at + x_bytes;
  plan->dw_at = plan->w_at + w_bytes;
  plan->y_at = plan->dw_at + w_bytes;
  plan->cudnn_at = plan->y_at + y_bytes;
  plan->cudnn_bytes = std::max(forward_bytes, std::max(backward_data_bytes, backward_filter_bytes));
  plan->total = plan->cudnn_at + plan->cudnn_bytes;
  return *(plans_[key] = std::move(plan));
}

size_t CudnnConvolutions::workspace_bytes(const ConvShape& s, Precision p) {
  return plan(s, p).total;
}

namespace {

// w[Cout, Cin, k, k] copied into the workspace (256-byte aligned, whatever the offset of the layer
// in its parameter buffer), rounded to bf16 in bf16.
void weights_operand(cudaStream_t stream, Precision p, const float* w, void* dst, int64_t n) {
  if (p == Precision::kBf16) {
    convert(stream, w, static_cast<__nv_bfloat16*>(dst), n);
    return;
  }
  HIPPO_CUDA_CHECK(cudaMemcpyAsync(dst, w, sizeof(float) * n, cudaMemcpyDeviceToDevice, stream));
}

// A cuDNN failure while running, with the shape and the algorithm it ran.
template <typename Run>
void with_context(const ConvShape& s, Precision p, const char* direction, int algorithm, Run run) {
  try {
    run();
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string(e.what()) + " (" + direction + " convolution, " +
                             describe(s, p) + ", algorithm " + std::to_string(algorithm) + ")");
  }
}

}  // namespace

void CudnnConvolutions::forward(const ConvShape& s, Precision p, const float* x, const float* w,
                                float* y, void* workspace) {
  const Plan& plan = this->plan(s, p);
  char* ws = static_cast<char*>(workspace);
  const float one = 1, zero = 0;  // alpha and beta are float for float and bf16 data
  to_nchw(stream_, p, x, ws + plan.x_at, s.in_channels, s.batch, int64_t{s.height} * s.width);
  weights_operand(stream_, p, w, ws + plan.w_at, s.out_channels * s.col_rows());
  with_context(s, p, "forward", plan.forward, [&] {
    HIPPO_CUDNN_CHECK(cudnn().forward(handle_, &one, plan.x, ws + plan.x_at, plan.w, ws + plan.w_at,
                                      plan.forward_conv, plan.forward, ws + plan.cudnn_at,
                                      plan.cudnn_bytes, &zero, plan.y, ws + plan.y_at));
  });
  from_nchw(stream_, p, ws + plan.y_at, y, s.batch, s.out_channels,
            int64_t{s.out_height()} * s.out_width());
}

void CudnnConvolutions::backward(const ConvShape& s, Precision p, const float* x, const float* w,
                                 const float* dy, float* dx, float* dw, void* workspace) {
  const Plan& plan = this->plan(s, p);
  char* ws = static_cast<char*>(workspace);
  const float one = 1, zero = 0;
  const int64_t image = int64_t{s.height} * s.width, weights = s.out_channels * s.col_rows();
  to_nchw(stream_, p, dy, ws + plan.y_at, s.out_channels, s.batch,
          int64_t{s.out_height()} * s.out_width());
  to_nchw(stream_, p, x, ws + plan.x_at, s.in_channels, s.batch, image);

  with_context(s, p, "backward-filter", plan.backward_filter, [&] {
    HIPPO_CUDNN_CHECK(cudnn().backward_filter(handle_, &one, plan.x, ws + plan.x_at, plan.y,
                                              ws + plan.y_at, plan.backward_filter_conv,
                                              plan.backward_filter, ws + plan.cudnn_at,
                                              plan.cudnn_bytes, &zero, plan.w, ws + plan.dw_at));
  });
  if (p == Precision::kBf16)
    convert(stream_, reinterpret_cast<const __nv_bfloat16*>(ws + plan.dw_at), dw, weights);
  else
    HIPPO_CUDA_CHECK(cudaMemcpyAsync(dw, ws + plan.dw_at, sizeof(float) * weights,
                                     cudaMemcpyDeviceToDevice, stream_));
  if (dx == nullptr) return;

  weights_operand(stream_, p, w, ws + plan.w_at, weights);
  with_context(s, p, "backward-data", plan.backward_data, [&] {
    HIPPO_CUDNN_CHECK(cudnn().backward_data(
        handle_, &one, plan.w, ws + plan.w_at, plan.y, ws + plan.y_at, plan.backward_data_conv,
        plan.backward_data, ws + plan.cudnn_at, plan.cudnn_bytes, &zero, plan.x, ws + plan.dx_at));
  });
  from_nchw(stream_, p, ws + plan.dx_at, dx, s.batch, s.in_channels, image);
}

}  // namespace hippo::kernels::cuda
