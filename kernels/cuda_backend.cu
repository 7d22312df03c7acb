// The CUDA backend: device memory, cuBLAS for matrix products (fp32, or bf16 operands with fp32
// accumulation), and the kernels of cuda_*.cu for everything else.
//
// Streams: a backend made with Stream::kDefault works on the device's legacy default stream, as
// every other such backend does, so all of its work, and the work of other CUDA backends sharing
// its buffers (kernels.h: backends of one name share their memory), runs in the order it was
// issued. One made with Stream::kOwn (a pipeline stage) has a non-blocking stream of its own: its
// work overlaps the others' and is ordered with theirs only by wait_for (an event) and copy_from.
// Operations return without waiting for the device; only copies to the host (and sum,
// count_correct, finish) wait.
//
// Determinism: cuBLAS products are bit-identical from run to run for the same shapes on the same
// GPU model and library version when they run on one stream with atomics disallowed and a fixed
// workspace (cuBLAS documentation, "Results reproducibility"); the other kernels reduce in fixed
// trees (cuda_ops.cuh); convolutions are cuDNN's deterministic algorithms (cuda_conv.cuh) or, with
// CudaConvolution::kIm2col, cuBLAS products between gathers (im2col.h).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda_check.cuh"
#include "kernels/cuda_conv.cuh"
#include "kernels/cuda_library.h"
#include "kernels/cuda_ops.cuh"
#include "kernels/cuda_transformer.cuh"
#include "kernels/kernels.h"

namespace hippo::kernels {
namespace {

// Host <-> device copies go through pinned host memory in chunks of this size (bounded pinned
// memory for buffers of any size; pinned transfers run at full bus speed and asynchronously),
// alternating between kStagingSlots slots: an upload waits only for the last transfer out of its
// own slot, so a training step's two uploads (inputs, labels) do not wait for the step before.
constexpr int64_t kStagingBytes = 4 << 20;
constexpr int kStagingSlots = 2;
// cuBLAS is loaded (cuda_library.h) when the first CUDA backend is made. These are the entry
// points the backend uses, by their exported names (cublas_v2.h maps cublasSgemm to
// cublasSgemm_v2, and so on).
struct Cublas {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasDestroy_v2) destroy;
  decltype(&cublasSetStream_v2) set_stream;
  decltype(&cublasSetMathMode) set_math_mode;
  decltype(&cublasSetAtomicsMode) set_atomics_mode;
  decltype(&cublasSetWorkspace_v2) set_workspace;
  decltype(&cublasSgemm_v2) sgemm;
  decltype(&cublasSgemmStridedBatched) sgemm_strided_batched;
  // cublasGemmEx is overloaded in C++ (cublas_api.h adds an inline wrapper): the exported one.
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                            int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t);
  decltype(&cublasGetStatusName) status_name;
  decltype(&cublasGetStatusString) status_string;
  decltype(&cublasGetProperty) property;
};

// Loads the cuBLAS of the major version hippo was built with, once per process.
const Cublas& cublas() {
  static const Cublas api = [] {
    const cuda::RuntimeLibrary library("cublas", CUBLAS_VER_MAJOR, "cuBLAS, for the CUDA backend");
    auto load = [&](auto& fn, const char* name) { library.load(fn, name); };
    Cublas c{};
    load(c.create, "cublasCreate_v2");
    load(c.destroy, "cublasDestroy_v2");
    load(c.set_stream, "cublasSetStream_v2");
    load(c.set_math_mode, "cublasSetMathMode");
    load(c.set_atomics_mode, "cublasSetAtomicsMode");
    load(c.set_workspace, "cublasSetWorkspace_v2");
    load(c.sgemm, "cublasSgemm_v2");
    load(c.sgemm_strided_batched, "cublasSgemmStridedBatched");
    load(c.gemm_ex, "cublasGemmEx");
    load(c.status_name, "cublasGetStatusName");
    load(c.status_string, "cublasGetStatusString");
    load(c.property, "cublasGetProperty");
    return c;
  }();
  return api;
}

void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("cuBLAS error " + std::string(cublas().status_name(status)) + ": " +
                             cublas().status_string(status) + " in " +
                             cuda::call_site(call, file, line));
}
#define HIPPO_CUBLAS_CHECK(call) check_cublas((call), #call, __FILE__, __LINE__)

// cuBLAS's workspace, owned by the backend so that cuBLAS picks the same algorithms every run
// (32 MiB: what cuBLAS recommends for Hopper).
constexpr size_t kCublasWorkspaceBytes = 32 << 20;

struct DeviceFree {
  void operator()(void* p) const { cudaFree(p); }
};
struct HostFree {
  void operator()(void* p) const { cudaFreeHost(p); }
};
struct CublasDestroy {
  void operator()(cublasHandle_t h) const { cublas().destroy(h); }
};
struct EventDestroy {
  void operator()(cudaEvent_t e) const { cudaEventDestroy(e); }
};
struct StreamDestroy {
  void operator()(cudaStream_t s) const { cudaStreamDestroy(s); }
};
using DeviceMemory = std::unique_ptr<void, DeviceFree>;
using PinnedMemory = std::unique_ptr<void, HostFree>;

DeviceMemory device_alloc(size_t bytes) {
  void* p = nullptr;
  HIPPO_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 1)));
  return DeviceMemory(p);
}

// The scalars that sum and count_correct return, and the first out-of-range label or token a
// kernel saw (cuda::BadIndex), copied to the host together.
struct Scalars {
  double total;
  int64_t correct;
  int32_t bad_index[cuda::kBadIndexSize];
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, Stream stream, CudaConvolution conv)
      : device_(device), name_("cuda:" + std::to_string(device)), conv_(conv) {
    activate();
    if (stream == Stream::kOwn) {
      HIPPO_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      own_stream_.reset(stream_);
    }
    cublasHandle_t handle = nullptr;
    HIPPO_CUBLAS_CHECK(cublas().create(&handle));
    cublas_.reset(handle);
    HIPPO_CUBLAS_CHECK(cublas().set_stream(handle, stream_));
    // Plain fp32 arithmetic (no TF32), and no atomics in any cuBLAS routine.
    HIPPO_CUBLAS_CHECK(cublas().set_math_mode(handle, CUBLAS_DEFAULT_MATH));
    HIPPO_CUBLAS_CHECK(cublas().set_atomics_mode(handle, CUBLAS_ATOMICS_NOT_ALLOWED));
    cublas_workspace_ = device_alloc(kCublasWorkspaceBytes);
    HIPPO_CUBLAS_CHECK(
        cublas().set_workspace(handle, cublas_workspace_.get(), kCublasWorkspaceBytes));

    partials_ = device_alloc(sizeof(double) * cuda::kSumPartials);
    scalars_ = device_alloc(sizeof(Scalars));
    HIPPO_CUDA_CHECK(cudaMemsetAsync(scalars_.get(), 0xff, sizeof(Scalars), stream_));
    void* host = nullptr;
    HIPPO_CUDA_CHECK(cudaMallocHost(&host, sizeof(Scalars)));
    host_scalars_.reset(host);
    HIPPO_CUDA_CHECK(cudaMallocHost(&host, kStagingBytes * kStagingSlots));
    staging_.reset(host);
    for (auto& slot_free : staging_free_) {
      cudaEvent_t event = nullptr;
      HIPPO_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
      slot_free.reset(event);
    }
    HIPPO_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  // The members free their memory on the current device: make it this backend's.
  ~CudaBackend() override { cudaSetDevice(device_); }

  const char* name() const override { return name_.c_str(); }
  int threads() const override { return 1; }
  void set_precision(Precision p) const override { precision_ = p; }
  CUstream_st* cuda_stream() const override { return stream_; }

  // ---- Memory --------------------------------------------------------------------------------

  void* allocate(int64_t bytes) const override {
    activate();
    DeviceMemory p = device_alloc(static_cast<size_t>(bytes));
    HIPPO_CUDA_CHECK(cudaMemsetAsync(p.get(), 0, static_cast<size_t>(bytes), stream_));
    return p.release();
  }

  // Called from destructors: reports a failure instead of throwing. Waits for the work in flight,
  // which may still use p.
  void deallocate(void* p) const override {
    if (p == nullptr) return;
    cudaError_t status = cudaSetDevice(device_);
    if (status == cudaSuccess) status = cudaStreamSynchronize(stream_);
    if (status == cudaSuccess) status = cudaFree(p);
    if (status != cudaSuccess)
      std::fprintf(stderr, "hippo: cudaFree on %s failed: %s\n", name_.c_str(),
                   cudaGetErrorString(status));
  }

  // Each chunk is copied into a pinned staging slot once the slot's previous transfer has left
  // it, then sent asynchronously: host_src may be reused when this returns, and every later
  // operation (all on the one stream) sees the data, which is what "complete" means for them.
  void copy_from_host(void* dst, const void* host_src, int64_t bytes) const override {
    activate();
    for (int64_t done = 0; done < bytes; done += kStagingBytes) {
      const size_t chunk = static_cast<size_t>(std::min(kStagingBytes, bytes - done));
      const int slot = next_slot_;
      next_slot_ = (next_slot_ + 1) % kStagingSlots;
      char* staging = static_cast<char*>(staging_.get()) + slot * kStagingBytes;
      HIPPO_CUDA_CHECK(cudaEventSynchronize(staging_free_[slot].get()));
      std::memcpy(staging, static_cast<const char*>(host_src) + done, chunk);
      HIPPO_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + done, staging, chunk,
                                       cudaMemcpyHostToDevice, stream_));
      HIPPO_CUDA_CHECK(cudaEventRecord(staging_free_[slot].get(), stream_));
    }
  }

  // Waits for the work before it, chunk by chunk through the first staging slot (the stream is
  // in order: an upload still reading that slot finishes before this transfer writes it).
  void copy_to_host(void* host_dst, const void* src, int64_t bytes) const override {
    activate();
    for (int64_t done = 0; done < bytes; done += kStagingBytes) {
      const size_t chunk = static_cast<size_t>(std::min(kStagingBytes, bytes - done));
      HIPPO_CUDA_CHECK(cudaMemcpyAsync(staging_.get(), static_cast<const char*>(src) + done, chunk,
                                       cudaMemcpyDeviceToHost, stream_));
      synchronize_and_check();
      std::memcpy(static_cast<char*>(host_dst) + done, staging_.get(), chunk);
    }
  }

  void copy(void* dst, const void* src, int64_t bytes) const override {
    if (bytes <= 0) return;
    activate();
    HIPPO_CUDA_CHECK(
        cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream_));
  }

  void fill_zero(void* dst, int64_t bytes) const override {
    if (bytes <= 0) return;
    activate();
    HIPPO_CUDA_CHECK(cudaMemsetAsync(dst, 0, static_cast<size_t>(bytes), stream_));
  }

  // ---- Order and copies between backends -----------------------------------------------------

  void finish() const override {
    activate();
    synchronize_and_check();
  }

  // An event recorded on the other's stream (on its device), which this stream waits for. One
  // stream of one device is in order already; a CPU backend's work is done when issued.
  void wait_for(const Backend& other) const override {
    const auto* gpu = dynamic_cast<const CudaBackend*>(&other);
    if (gpu == nullptr || (gpu->device_ == device_ && gpu->stream_ == stream_)) return;
    gpu->activate();
    cudaEvent_t event = nullptr;
    HIPPO_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    const std::unique_ptr<CUevent_st, EventDestroy> owned(event);  // freed once waited for
    HIPPO_CUDA_CHECK(cudaEventRecord(event, gpu->stream_));
    activate();
    HIPPO_CUDA_CHECK(cudaStreamWaitEvent(stream_, event, 0));
  }

  // From another GPU: a peer copy on this stream (through the host where the GPUs cannot reach
  // each other: the driver's business). Same device or a CPU source: Backend's copy.
  void copy_from(const Backend& src_backend, void* dst, const void* src,
                 int64_t bytes) const override {
    const auto* gpu = dynamic_cast<const CudaBackend*>(&src_backend);
    if (gpu == nullptr || gpu->device_ == device_ || bytes <= 0) {
      Backend::copy_from(src_backend, dst, src, bytes);
      return;
    }
    wait_for(*gpu);
    HIPPO_CUDA_CHECK(
        cudaMemcpyPeerAsync(dst, device_, src, gpu->device_, static_cast<size_t>(bytes), stream_));
  }

  // ---- Matrix products -----------------------------------------------------------------------

  // Row-major c[m, n] = op(a) op(b) is column-major c^T[n, m] = op(b)^T op(a)^T: the same call
  // with the operands swapped, each stored matrix read as its own transpose.
  void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
            const float* b, float beta, float* c) const override {
    if (m == 0 || n == 0) return;
    activate();
    const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int lda = std::max(1, trans_a ? m : k), ldb = std::max(1, trans_b ? k : n);
    if (precision_ == Precision::kFp32) {
      HIPPO_CUBLAS_CHECK(
          cublas().sgemm(cublas_.get(), op_b, op_a, n, m, k, &alpha, b, ldb, a, lda, &beta, c, n));
      return;
    }
    // bf16 operands (b's copy starts on a 16-byte boundary, for cuBLAS's vector loads).
    const int64_t a_size = int64_t{m} * k, b_offset = (a_size + 7) / 8 * 8;
    __nv_bfloat16* a16 = static_cast<__nv_bfloat16*>(
        workspace(sizeof(__nv_bfloat16) * static_cast<size_t>(b_offset + int64_t{k} * n)));
    __nv_bfloat16* b16 = a16 + b_offset;
    cuda::convert(stream_, a, a16, a_size);
    cuda::convert(stream_, b, b16, int64_t{k} * n);
    HIPPO_CUBLAS_CHECK(cublas().gemm_ex(cublas_.get(), op_b, op_a, n, m, k, &alpha, b16,
                                        CUDA_R_16BF, ldb, a16, CUDA_R_16BF, lda, &beta, c,
                                        CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }

  // ---- Element-wise ----------------------------------------------------------------------------

  void bias_forward(float* y, const float* bias, int64_t outer, int64_t channels,
                    int64_t inner) const override {
    activate();
    cuda::bias_forward(stream_, y, bias, outer, channels, inner);
  }
  void bias_backward(const float* dy, float* dbias, int64_t outer, int64_t channels,
                     int64_t inner) const override {
    activate();
    cuda::bias_backward(stream_, dy, dbias, outer, channels, inner);
  }
  void relu_forward(const float* x, float* y, int64_t n) const override {
    activate();
    cuda::relu_forward(stream_, x, y, n);
  }
  void relu_backward(const float* y, const float* dy, float* dx, int64_t n) const override {
    activate();
    cuda::relu_backward(stream_, y, dy, dx, n);
  }
  void gelu_forward(const float* x, float* y, int64_t n) const override {
    activate();
    cuda::gelu_forward(stream_, x, y, n);
  }
  void gelu_backward(const float* x, const float* dy, float* dx, int64_t n) const override {
    activate();
    cuda::gelu_backward(stream_, x, dy, dx, n);
  }
  void swap_outer_axes(const float* x, float* y, int64_t a, int64_t b,
                       int64_t inner) const override {
    activate();
    cuda::swap_outer_axes(stream_, x, y, a, b, inner);
  }

  // ---- Convolution (cuDNN or im2col) and pooling ---------------------------------------------
  // col and dcol are the column scratch: the im2col path fills them, cuDNN does not need them.

  void conv2d_forward(const ConvShape& s, const float* x, const float* w, const float* bias,
                      float* col, float* y) const override {
    activate();
    if (im2col(s)) {
      const Im2col g = im2col_of(s);
      cuda::im2col(stream_, g, x, col);
      gemm(false, false, s.out_channels, static_cast<int>(g.cols()), static_cast<int>(g.rows()), 1,
           w, col, 0, y);  // y[Cout, N] = w[Cout, R] col[R, N]
    } else {
      cuda::CudnnConvolutions& c = convolutions();
      c.forward(s, precision_, x, w, y, workspace(c.workspace_bytes(s, precision_)));
    }
    if (bias) cuda::bias_forward(stream_, y, bias, 1, s.out_channels, s.col_cols());
  }

  void conv2d_backward(const ConvShape& s, const float* x, const float* col, const float* w,
                       const float* dy, float* dcol, float* dx, float* dw,
                       float* dbias) const override {
    activate();
    if (dbias) cuda::bias_backward(stream_, dy, dbias, 1, s.out_channels, s.col_cols());
    if (!im2col(s)) {
      cuda::CudnnConvolutions& c = convolutions();
      c.backward(s, precision_, x, w, dy, dx, dw, workspace(c.workspace_bytes(s, precision_)));
      return;
    }
    const Im2col g = im2col_of(s);
    weight_gradient(g, s.out_channels, dy, col, dw);
    if (dx == nullptr) return;
    gemm(true, false, static_cast<int>(g.rows()), static_cast<int>(g.cols()), s.out_channels, 1, w,
         dy, 0, dcol);  // dcol[R, N] = w[Cout, R]^T dy[Cout, N]
    cuda::col2im(stream_, g, dcol, dx);
  }

  void maxpool_forward(const float* x, float* y, int64_t planes, int h, int w,
                       int k) const override {
    activate();
    cuda::maxpool_forward(stream_, x, y, planes, h, w, k);
  }
  void maxpool_backward(const float* x, const float* dy, float* dx, int64_t planes, int h, int w,
                        int k) const override {
    activate();
    cuda::maxpool_backward(stream_, x, dy, dx, planes, h, w, k);
  }
  void avgpool_forward(const float* x, float* y, int64_t planes, int h, int w,
                       int k) const override {
    activate();
    cuda::avgpool_forward(stream_, x, y, planes, h, w, k);
  }
  void avgpool_backward(const float* dy, float* dx, int64_t planes, int h, int w,
                        int k) const override {
    activate();
    cuda::avgpool_backward(stream_, dy, dx, planes, h, w, k);
  }

  // ---- Loss, metrics, reductions ---------------------------------------------------------------

  void softmax_cross_entropy(const float* logits, const int32_t* labels, int batch, int classes,
                             float* losses, float* dlogits, float grad_scale) const override {
    activate();
    cuda::softmax_cross_entropy(stream_, logits, labels, batch, classes, losses, dlogits,
                                grad_scale, device_bad_index());
  }

  int64_t count_correct(const float* logits, const int32_t* labels, int batch,
                        int classes) const override {
    activate();
    cuda::count_correct(stream_, logits, labels, batch, classes, device_scalar<int64_t>(kCorrect),
                        device_bad_index());
    return read_scalars().correct;
  }

  double sum(const float* x, int64_t n) const override {
    activate();
    cuda::sum(stream_, x, n, static_cast<double*>(partials_.get()), device_scalar<double>(kTotal));
    return read_scalars().total;
  }

  // ---- Optimizers ----------------------------------------------------------------------------

  void sgd_update(float* params, const float* grads, float* buf, int64_t n,
                  const SgdParams& hp) const override {
    activate();
    cuda::sgd_update(stream_, params, grads, buf, n, hp);
  }
  void adam_update(float* params, const float* grads, float* m, float* v, int64_t n,
                   const AdamParams& hp) const override {
    activate();
    cuda::adam_update(stream_, params, grads, m, v, n, hp);
  }

  // ---- Transformer operations (cuda_transformer.cu) -------------------------------------------

  void add(const float* a, const float* b, float* y, int64_t n) const override {
    activate();
    cuda::add(stream_, a, b, y, n);
  }
  void embedding_forward(const int32_t* tokens, const float* wte, const float* wpe, float* out,
                         int B, int T, int C, int V) const override {
    activate();
    cuda::embedding_forward(stream_, tokens, wte, wpe, out, B, T, C, V, device_bad_index());
  }
  void embedding_backward(const int32_t* tokens, const float* dout, float* dwte, float* dwpe, int B,
                          int T, int C, int V) const override {
    activate();
    cuda::embedding_backward(stream_, tokens, dout, dwte, dwpe, B, T, C, V);
  }
  void layernorm_forward(const float* x, const float* weight, const float* bias, float* out,
                         float* mean, float* rstd, int64_t N, int C) const override {
    activate();
    cuda::layernorm_forward(stream_, x, weight, bias, out, mean, rstd, N, C);
  }
  void layernorm_backward(const float* dout, const float* x, const float* weight, const float* mean,
                          const float* rstd, float* dx, float* dweight, float* dbias, int64_t N,
                          int C) const override {
    activate();
    cuda::layernorm_backward(stream_, dout, x, weight, mean, rstd, dx, dweight, dbias, N, C);
  }
  void attention_forward(const float* qkv, float* out, float* att, int B, int T, int C,
                         int NH) const override {
    activate();
    cuda::attention_forward(stream_, qkv, out, att, B, T, C, NH);
  }
  void attention_backward(const float* dout, const float* qkv, const float* att, float* scratch,
                          float* dqkv, int B, int T, int C, int NH) const override {
    activate();
    cuda::attention_backward(stream_, dout, qkv, att, scratch, dqkv, B, T, C, NH);
  }

 private:
  // The device is per host thread in CUDA: every call makes this backend's device current, so a
  // process may hold backends of several devices.
  void activate() const { HIPPO_CUDA_CHECK(cudaSetDevice(device_)); }

  // Fields of the device's Scalars (addresses only: the struct lives in device memory).
  static constexpr size_t kTotal = offsetof(Scalars, total), kCorrect = offsetof(Scalars, correct);
  template <typename T>
  T* device_scalar(size_t offset) const {
    return reinterpret_cast<T*>(static_cast<char*>(scalars_.get()) + offset);
  }
  int32_t* device_bad_index() const { return device_scalar<int32_t>(offsetof(Scalars, bad_index)); }

  // Waits for all work issued so far, then throws if a kernel saw a label or token out of range
  // (kernels cannot throw; they record one, reported with the CPU backend's message).
  void synchronize_and_check() const {
    Scalars* host = static_cast<Scalars*>(host_scalars_.get());
    HIPPO_CUDA_CHECK(
        cudaMemcpyAsync(host, scalars_.get(), sizeof(Scalars), cudaMemcpyDeviceToHost, stream_));
    HIPPO_CUDA_CHECK(cudaStreamSynchronize(stream_));
    const int32_t* bad = host->bad_index;
    if (bad[cuda::kBadRow] < 0) return;
    const std::string value = std::to_string(bad[cuda::kBadValue]),
                      row = std::to_string(bad[cuda::kBadRow]),
                      limit = std::to_string(bad[cuda::kBadLimit]);
    const std::string message =
        bad[cuda::kBadKind] == cuda::kBadToken
            ? "token " + value + " at position " + row + " is outside the vocabulary [0, " + limit +
                  ")"
            : "label " + value + " of row " + row + " is outside [0, " + limit + ")";
    // Clear the record (row -1) so that later operations report only their own errors.
    HIPPO_CUDA_CHECK(
        cudaMemsetAsync(device_bad_index() + cuda::kBadRow, 0xff, sizeof(int32_t), stream_));
    throw std::invalid_argument(message);
  }

  const Scalars& read_scalars() const {
    synchronize_and_check();
    return *static_cast<const Scalars*>(host_scalars_.get());
  }

  // Device scratch of at least `bytes` for one operation at a time (bf16 operands, cuDNN's
  // copies and workspace). Every user is on the one stream, so the next operation's writes come
  // after the previous operation's reads. It grows by doubling at least, and an outgrown scratch
  // is kept (smaller than the new one together) until the backend goes: freeing device memory
  // synchronizes the whole device, which would wait for work still reading it and, in a
  // pipeline, for NCCL transfers that wait for another GPU (pipeline/cuda_transport.h).
  void* workspace(size_t bytes) const {
    if (bytes > workspace_bytes_) {
      const size_t grown = std::max(bytes, 2 * workspace_bytes_);
      DeviceMemory fresh = device_alloc(grown);
      if (workspace_) outgrown_workspaces_.push_back(std::move(workspace_));
      workspace_ = std::move(fresh);
      workspace_bytes_ = grown;
    }
    return workspace_.get();
  }

  // Whether this convolution runs on the column matrix: fp32 under kIm2col, and sizes that the
  // int arithmetic of cuBLAS and of the gathers (im2col.h) holds with room for a grid's stride
  // (N = B*Ho*Wo columns, R = Cin*k*k rows, H*W input positions); else cuDNN takes it.
  bool im2col(const ConvShape& s) const {
    constexpr int64_t kLimit = int64_t{1} << 30;
    return conv_ == CudaConvolution::kIm2col && precision_ == Precision::kFp32 &&
           s.col_cols() < kLimit && s.col_rows() < kLimit && int64_t{s.height} * s.width < kLimit;
  }

  // dw[Cout, R] = dy[Cout, N] col[R, N]^T, as weight_gradient_slices cuts it (im2col.h): each
  // slice's product in one strided batch, then the partials added in order. In cuBLAS's
  // column-major terms, slice q's partial^T[R, Cout] = A^T B with A = col's columns of the slice
  // read as [L, R] (lda = N) and B = dy's read as [L, Cout] (ldb = N).
  void weight_gradient(const Im2col& g, int out_channels, const float* dy, const float* col,
                       float* dw) const {
    const WeightGradientSlices slices = weight_gradient_slices(g);
    const int64_t n = g.cols(), plane = int64_t{g.ho} * g.wo, outputs = out_channels * g.rows();
    const int64_t full = g.batch / slices.images, columns = slices.images * plane;
    const int rows = static_cast<int>(g.rows()), ld = static_cast<int>(n);
    float* partials = slices.count == 1
                          ? dw
                          : static_cast<float*>(workspace(sizeof(float) * slices.count * outputs));
    const float one = 1, zero = 0;
    auto products = [&](int64_t first, int64_t count, int64_t length) {
      HIPPO_CUBLAS_CHECK(cublas().sgemm_strided_batched(
          cublas_.get(), CUBLAS_OP_T, CUBLAS_OP_N, rows, out_channels, static_cast<int>(length),
          &one, col + first * columns, ld, columns, dy + first * columns, ld, columns, &zero,
          partials + first * outputs, rows, outputs, static_cast<int>(count)));
    };
    if (full > 0) products(0, full, columns);
    if (full < slices.count) products(full, 1, (g.batch - full * slices.images) * plane);
    if (slices.count > 1) cuda::add_partials(stream_, partials, slices.count, outputs, dw);
  }

  // Made at the first convolution (which loads cuDNN), on this backend's device.
  cuda::CudnnConvolutions& convolutions() const {
    if (!convolutions_) convolutions_ = std::make_unique<cuda::CudnnConvolutions>(stream_);
    return *convolutions_;
  }

  int device_;
  std::string name_;
  // Null: the legacy default stream (Stream::kDefault); else own_stream_, destroyed last.
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<CUstream_st, StreamDestroy> own_stream_;
  DeviceMemory cublas_workspace_;  // declared before the handle: freed after it is destroyed
  std::unique_ptr<cublasContext, CublasDestroy> cublas_;
  DeviceMemory partials_;      // [kSumPartials] doubles: sum's per-block partial sums
  DeviceMemory scalars_;       // one Scalars
  PinnedMemory host_scalars_;  // one Scalars
  PinnedMemory staging_;       // [kStagingSlots][kStagingBytes]
  // Per slot, recorded after each upload from it.
  std::unique_ptr<CUevent_st, EventDestroy> staging_free_[kStagingSlots];
  mutable int next_slot_ = 0;
  mutable DeviceMemory workspace_;
  mutable size_t workspace_bytes_ = 0;
  mutable std::vector<DeviceMemory> outgrown_workspaces_;
  mutable std::unique_ptr<cuda::CudnnConvolutions> convolutions_;
  CudaConvolution conv_;
  mutable Precision precision_ = Precision::kFp32;
};

}  // namespace

namespace {

// cudaGetDeviceCount, its error cleared: no driver or no device is an answer here, not an error.
cudaError_t ask_device_count(int& count) {
  count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) cudaGetLastError();
  return error;
}

}  // namespace

int cuda_device_count() {
  int count = 0;
  return ask_device_count(count) == cudaSuccess ? count : 0;
}

std::string cuda_devices_unseen_reason() {
  int count = 0;
  const cudaError_t error = ask_device_count(count);
  if (error != cudaSuccess) return std::string("cudaGetDeviceCount: ") + cudaGetErrorString(error);
  return count == 0 ? "the CUDA runtime sees no device" : "";
}

std::string cuda_device_model(int device) {
  const int count = cuda_device_count();
  if (device < 0 || device >= count)
    throw std::invalid_argument("cuda:" + std::to_string(device) + " requested, this machine has " +
                                std::to_string(count) + " CUDA device" + (count == 1 ? "" : "s"));
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess)
    throw std::invalid_argument("cuda:" + std::to_string(device) + ": " +
                                cudaGetErrorString(cudaGetLastError()));
  return std::string(p.name) + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
         std::to_string(p.multiProcessorCount) + " SMs)";
}

std::string cuda_device_environment(int device) {
  const std::string model = cuda_device_model(device);
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  int blas[3] = {};
  const libraryPropertyType parts[3] = {MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL};
  for (int i = 0; i < 3; ++i) HIPPO_CUBLAS_CHECK(cublas().property(parts[i], &blas[i]));
  const int dnn = cuda::cudnn_version();  // major * 10000 + minor * 100 + patch
  auto dotted = [](int a, int b, int c) {
    return std::to_string(a) + "." + std::to_string(b) + "." + std::to_string(c);
  };
  return model + ", CUDA " + std::to_string(runtime / 1000) + "." +
         std::to_string(runtime % 1000 / 10) + ", cuBLAS " + dotted(blas[0], blas[1], blas[2]) +
         ", cuDNN " + dotted(dnn / 10000, dnn % 10000 / 100, dnn % 100);
}

std::unique_ptr<Backend> make_cuda_backend(int device, Stream stream, CudaConvolution conv) {
  const int count = cuda_device_count();
  if (device < 0 || device >= count)
    throw std::invalid_argument("cuda:" + std::to_string(device) + " requested, this machine has " +
                                std::to_string(count) + " CUDA device" + (count == 1 ? "" : "s"));
  return std::make_unique<CudaBackend>(device, stream, conv);
}

}  // namespace hippo::kernels
