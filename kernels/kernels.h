// The numerical operations of the training engine, on raw float buffers, behind one dispatch
// point: a Backend. The engine picks a backend once (make_backend: the CPU's, or a CUDA device's)
// and calls every operation through it, so no call site branches on the device.
//
// Conventions:
//   - All matrices are row-major. Shapes are written next to pointers, outermost axis first.
//   - Convolution activations use the CNHW layout: x[C, B, H, W]. A whole batch then becomes one
//     matrix product (weights[Cout, Cin*k*k] x columns[Cin*k*k, B*Ho*Wo]) whose result is again
//     CNHW, and bias, ReLU and pooling work on contiguous planes.
//   - Determinism: every output element is computed by exactly one thread, in an order that does
//     not depend on the thread count, so results are bit-identical for any thread count. On the
//     CPU, matrix products and convolutions are hippo's own kernels (one fused multiply-add chain
//     per output value), whose bits are also the same for each instruction set (AVX-512, AVX2,
//     portable); the tests check both.
//
// Kernels depend on nothing else of hippo's.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

struct CUstream_st;  // CUDA's stream (cudaStream_t is CUstream_st*), for Backend::cuda_stream

namespace hippo::kernels {

// Geometry of a stride-1 2-D convolution with a square kernel and zero padding.
struct ConvShape {
  int batch = 0;
  int in_channels = 0, out_channels = 0;
  int height = 0, width = 0;  // of the input
  int kernel = 3, pad = 1;
  int out_height() const { return height + 2 * pad - kernel + 1; }
  int out_width() const { return width + 2 * pad - kernel + 1; }
  // Rows and columns of the column matrix that conv2d_forward fills.
  int64_t col_rows() const { return int64_t{in_channels} * kernel * kernel; }
  int64_t col_cols() const { return int64_t{batch} * out_height() * out_width(); }
};

struct SgdParams {
  float lr = 0, momentum = 0, weight_decay = 0;
  bool nesterov = false;
};

struct AdamParams {
  float lr = 0, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0;
  bool decoupled = false;  // AdamW: decay the weights directly instead of adding wd*p to the grad
  int64_t t = 1;           // 1-based count of updates, for the bias corrections
};

// Operand precision of matrix products (see Backend::set_precision).
enum class Precision { kFp32, kBf16 };

class Backend {
 public:
  virtual ~Backend() = default;
  // "cpu", or "cuda:N" for device N. Backends of one name share their memory: a buffer of one
  // may be used by another (the worker keeps states across engines).
  virtual const char* name() const = 0;
  virtual int threads() const = 0;
  // The threads of the calls that follow (between calls, never during one). The CPU's results do
  // not depend on them (README, "Determinism"), so a worker may lend a job the cores of its idle
  // neighbours and take them back between two steps; other backends ignore it.
  virtual void set_threads(int /*threads*/) const {}

  // The precision of the matrix products of the calls that follow (gemm, and the convolutions'
  // products): kBf16 rounds both operands of each product to bf16 and accumulates in fp32; its
  // output, and every other operation, parameters, gradients and optimizer state, stay fp32
  // (mixed precision with fp32 master weights). Default kFp32. A backend without bf16 products
  // (the CPU's) throws std::invalid_argument for kBf16.
  virtual void set_precision(Precision p) const {
    if (p != Precision::kFp32)
      throw std::invalid_argument(std::string("precision bf16: the ") + name() +
                                  " backend computes in fp32 only (bf16 needs a CUDA device)");
  }

  // Memory the kernels read and write: host memory for the CPU backend, device memory for a GPU
  // backend. Every pointer passed to an operation below lies in this memory (buffer.h owns it).
  // allocate returns `bytes` zero-filled bytes aligned to 64 (never null; throws on failure).
  virtual void* allocate(int64_t bytes) const = 0;
  virtual void deallocate(void* p) const = 0;
  // Copies between host memory and this backend's memory, and within this backend's memory.
  // They are complete when they return (a GPU backend waits for its stream).
  virtual void copy_from_host(void* dst, const void* host_src, int64_t bytes) const = 0;
  virtual void copy_to_host(void* host_dst, const void* src, int64_t bytes) const = 0;
  virtual void copy(void* dst, const void* src, int64_t bytes) const = 0;
  virtual void fill_zero(void* dst, int64_t bytes) const = 0;
  // p itself where this backend's memory is host memory (the CPU's: the host may write its inputs
  // there directly), else null.
  virtual void* host_address(void* /*p*/) const { return nullptr; }

  // Order between backends whose work runs concurrently (a pipeline's stages: each on a CPU
  // thread, or a GPU stream of its own; make_cuda_backend's Stream::kOwn).
  // finish: blocks until all work issued to this backend so far is done (nothing to wait for on
  // the CPU, whose operations are done when they return).
  virtual void finish() const {}
  // The work issued to this backend from now on runs after all work issued to `other` so far (a
  // GPU backend waits on the device, without blocking the host).
  virtual void wait_for(const Backend& other) const { other.finish(); }
  // dst (this backend's memory) = src (src_backend's memory, another device's too), `bytes`,
  // after all work issued to src_backend so far, in order with this backend's later work.
  // Between backends of one name, a plain copy (device.cc); across memories through the host
  // unless the backend knows better (CUDA: a device-to-device copy between GPUs).
  virtual void copy_from(const Backend& src_backend, void* dst, const void* src,
                         int64_t bytes) const;
  // The CUDA stream a GPU backend's work runs on, for code that adds its own work in the same
  // order (the pipeline's CUDA transport); null for the CPU and for the legacy default stream.
  virtual CUstream_st* cuda_stream() const { return nullptr; }

  // c[m, n] = alpha * op(a) op(b) + beta * c, where op(a) is [m, k] and op(b) is [k, n];
  // a is stored [m, k] (or [k, m] when trans_a), b is stored [k, n] (or [n, k] when trans_b).
  virtual void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    const float* b, float beta, float* c) const = 0;

  // y[outer, channels, inner] += bias[channels].
  virtual void bias_forward(float* y, const float* bias, int64_t outer, int64_t channels,
                            int64_t inner) const = 0;
  // dbias[channels] = sum of dy[outer, channels, inner] over outer and inner.
  virtual void bias_backward(const float* dy, float* dbias, int64_t outer, int64_t channels,
                             int64_t inner) const = 0;

  // A linear layer: y[rows, out] = x[rows, in] w[out, in]^T + bias[out], then ReLU if relu
  // (y > 0 ? y : 0). The same values as gemm, bias_forward and relu_forward in turn (a backend
  // may apply the bias and ReLU while y is in registers).
  virtual void linear_forward(const float* x, const float* w, const float* bias, float* y, int rows,
                              int in, int out, bool relu) const {
    gemm(false, true, rows, out, in, 1.0f, x, w, 0.0f, y);
    bias_forward(y, bias, rows, out, 1);
    if (relu) relu_forward(y, y, int64_t{rows} * out);
  }
  // A linear layer's weight gradient and its SGD step: dw[out, in] = dy[rows, out]^T x[rows, in]
  // (gemm's chain), then sgd_update(w, dw, momentum, out * in, hp), with the same values of w and
  // momentum; dw's contents afterwards are unspecified (a backend may take the step while the
  // gradient is in registers and store none of it).
  virtual void linear_weight_sgd(const float* dy, const float* x, float* dw, float* w,
                                 float* momentum, int rows, int in, int out,
                                 const SgdParams& hp) const {
    gemm(true, false, out, in, rows, 1.0f, dy, x, 0.0f, dw);
    sgd_update(w, dw, momentum, int64_t{out} * in, hp);
  }
  // The gradient through a bias and, unless y is null, a ReLU before it: dy[outer, channels,
  // inner] (in place) = dy where y > 0, else 0; then dbias[channels] as bias_backward of it. The
  // same values as relu_backward and bias_backward in turn (a backend may do both in one pass).
  virtual void bias_relu_backward(const float* y, float* dy, float* dbias, int64_t outer,
                                  int64_t channels, int64_t inner) const {
    if (y) relu_backward(y, dy, dy, outer * channels * inner);
    bias_backward(dy, dbias, outer, channels, inner);
  }

  // Elementwise activations over n values; y may alias x, and dx may alias dy.
  virtual void relu_forward(const float* x, float* y, int64_t n) const = 0;
  // dx = dy where y > 0, else 0 (y is the ReLU's output).
  virtual void relu_backward(const float* y, const float* dy, float* dx, int64_t n) const = 0;
  // GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  virtual void gelu_forward(const float* x, float* y, int64_t n) const = 0;
  virtual void gelu_backward(const float* x, const float* dy, float* dx, int64_t n) const = 0;

  // Convolution, CNHW. x[Cin, B, H, W], w[Cout, Cin, k, k], bias[Cout] -> y[Cout, B, Ho, Wo].
  // col[conv2d_scratch_size(s)] is scratch that forward fills and backward reads (keep it between
  // them); the CPU backend needs none (it builds columns in its own per-thread buffers), the CUDA
  // backend asks for Cin*k*k x B*Ho*Wo floats (its im2col convolutions' column matrix; cuDNN's
  // leave them alone).
  virtual int64_t conv2d_scratch_size(const ConvShape& s) const {
    return s.col_rows() * s.col_cols();
  }
  // bias may be null (no bias; a caller may add it later, e.g. after pooling, where it is cheaper).
  virtual void conv2d_forward(const ConvShape& s, const float* x, const float* w, const float* bias,
                              float* col, float* y) const = 0;
  // From dy[Cout, B, Ho, Wo], forward's x and col: dw and dbias (overwritten; dbias may be null),
  // and dx[Cin, B, H, W] unless dx is null (the first layer needs no input gradient). dcol is
  // scratch of col's size.
  virtual void conv2d_backward(const ConvShape& s, const float* x, const float* col, const float* w,
                               const float* dy, float* dcol, float* dx, float* dw,
                               float* dbias) const = 0;

  // The cnn's convolution block, fused where a backend can: y[Cout, B, Ho/2, Wo/2] =
  // relu(maxpool(conv(x, w)) + bias), with a 2 x 2 max pooling of stride 2 (a last odd row or
  // column of the convolution dropped) and bias[Cout] (required): the same values as
  // conv2d_forward (no bias), maxpool_forward (k = 2), bias_forward and relu_forward in turn.
  // scratch[conv_block_scratch_size(s)] keeps, from forward to backward, what the backward needs:
  // here the convolution's output and the columns (a backend may keep less: the CPU's keeps which
  // window position was the first maximum).
  virtual int64_t conv_block_scratch_size(const ConvShape& s) const {
    return 2 * (int64_t{s.out_channels} * s.col_cols() + conv2d_scratch_size(s));
  }
  virtual void conv_block_forward(const ConvShape& s, const float* x, const float* w,
                                  const float* bias, float* scratch, float* y) const {
    float* z = scratch;  // [Cout, B, Ho, Wo], then col
    const int64_t pooled = int64_t{s.batch} * (s.out_height() / 2) * (s.out_width() / 2);
    conv2d_forward(s, x, w, nullptr, z + int64_t{s.out_channels} * s.col_cols(), z);
    maxpool_forward(z, y, int64_t{s.out_channels} * s.batch, s.out_height(), s.out_width(), 2);
    bias_forward(y, bias, 1, s.out_channels, pooled);
    relu_forward(y, y, s.out_channels * pooled);
  }
  // From forward's x, y and scratch and dy[Cout, B, Ho/2, Wo/2] (overwritten: the gradient before
  // the ReLU): dw and dbias (overwritten), and dx[Cin, B, H, W] unless dx is null. The same values
  // as bias_relu_backward, maxpool_backward and conv2d_backward in turn.
  virtual void conv_block_backward(const ConvShape& s, const float* x, const float* w,
                                   const float* y, float* dy, float* scratch, float* dx, float* dw,
                                   float* dbias) const {
    const int64_t n = int64_t{s.out_channels} * s.col_cols(), ncol = conv2d_scratch_size(s);
    float* z = scratch;  // z, col, then dz and dcol
    float* dz = z + n + ncol;
    bias_relu_backward(y, dy, dbias, 1, s.out_channels,
                       int64_t{s.batch} * (s.out_height() / 2) * (s.out_width() / 2));
    maxpool_backward(z, dy, dz, int64_t{s.out_channels} * s.batch, s.out_height(), s.out_width(),
                     2);
    conv2d_backward(s, x, z + n, w, dz, dz + n, dx, dw, nullptr);
  }

  // Pooling over `planes` independent planes x[planes, H, W] with a k x k window and stride k;
  // y[planes, H/k, W/k] (a remainder row or column is dropped). Max pooling routes the gradient to
  // the first maximum of each window of x in row-major order; dx is overwritten.
  virtual void maxpool_forward(const float* x, float* y, int64_t planes, int h, int w,
                               int k) const = 0;
  virtual void maxpool_backward(const float* x, const float* dy, float* dx, int64_t planes, int h,
                                int w, int k) const = 0;
  virtual void avgpool_forward(const float* x, float* y, int64_t planes, int h, int w,
                               int k) const = 0;
  virtual void avgpool_backward(const float* dy, float* dx, int64_t planes, int h, int w,
                                int k) const = 0;

  // Softmax cross-entropy of logits[batch, classes] against labels[batch] (each in [0, classes)).
  // Writes losses[batch] (per sample, natural log) and, when dlogits is not null,
  // dlogits[batch, classes] = grad_scale * (softmax - onehot).
  virtual void softmax_cross_entropy(const float* logits, const int32_t* labels, int batch,
                                     int classes, float* losses, float* dlogits,
                                     float grad_scale) const = 0;
  // Number of rows of logits[batch, classes] whose first maximum is at the row's label.
  virtual int64_t count_correct(const float* logits, const int32_t* labels, int batch,
                                int classes) const = 0;
  // Sum of x[n] in double, in a fixed order.
  virtual double sum(const float* x, int64_t n) const = 0;

  // y[b, a, inner] = x[a, b, inner]: swaps the two outer axes (CNHW <-> NCHW and back).
  virtual void swap_outer_axes(const float* x, float* y, int64_t a, int64_t b,
                               int64_t inner) const = 0;

  // Optimizer updates of params[n] with grads[n] (as in PyTorch's SGD, Adam and AdamW).
  // SGD: g += wd p; buf = momentum buf + g; p -= lr (nesterov ? g + momentum buf : buf).
  // With momentum 0, buf may be null.
  virtual void sgd_update(float* params, const float* grads, float* buf, int64_t n,
                          const SgdParams& hp) const = 0;
  // Adam: g += wd p (AdamW instead: p -= lr wd p); m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
  // p -= lr (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps).
  virtual void adam_update(float* params, const float* grads, float* m, float* v, int64_t n,
                           const AdamParams& hp) const = 0;

  // ---- Transformer operations (the gpt model) ------------------------------------------------
  // Shapes: B sequences of T positions, C channels, V vocabulary entries, NH heads of hs = C / NH
  // channels each (NH divides C). "Overwritten": every value of the output is written, its old
  // contents do not matter. "Accumulated": the result is added (+=) to what the caller put there.
  // Sums run in the order stated, the same for any thread count (no atomics).
  // The big products of a transformer (qkv, projections, MLP, output layer) are gemm calls above;
  // a linear layer is y[N, out] = x[N, in] w[out, in]^T + b (gemm with trans_b, bias_forward).

  // y[n] = a[n] + b[n], overwritten; y may alias a or b (residual connections, sums of gradients).
  virtual void add(const float* a, const float* b, float* y, int64_t n) const = 0;

  // Token and position embeddings: out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :] (overwritten).
  // tokens[B, T] (each in [0, V); the CPU backend throws std::invalid_argument otherwise),
  // wte[V, C], wpe[T, C] (the first T rows of a longer table), out[B, T, C].
  virtual void embedding_forward(const int32_t* tokens, const float* wte, const float* wpe,
                                 float* out, int B, int T, int C, int V) const = 0;
  // From dout[B, T, C]: dwte[V, C] and dwpe[T, C], both overwritten. Row v of dwte is the sum of
  // dout[b, t, :] over the positions whose token is v, added from 0 in ascending (b, t) order (0
  // for a token that does not occur); row t of dwpe is the sum of dout[b, t, :] over b ascending.
  virtual void embedding_backward(const int32_t* tokens, const float* dout, float* dwte,
                                  float* dwpe, int B, int T, int C, int V) const = 0;

  // Layer normalization of each row of x[N, C] over its C values, with eps = 1e-5:
  //   mean[r] = sum_c x[r, c] / C,  rstd[r] = 1 / sqrt(sum_c (x[r, c] - mean[r])^2 / C + eps),
  //   out[r, c] = (x[r, c] - mean[r]) rstd[r] weight[c] + bias[c].
  // weight[C], bias[C]; out[N, C], mean[N], rstd[N] overwritten (mean, rstd: for the backward).
  virtual void layernorm_forward(const float* x, const float* weight, const float* bias, float* out,
                                 float* mean, float* rstd, int64_t N, int C) const = 0;
  // From dout[N, C] and forward's x, weight, mean, rstd, with xhat = (x - mean) rstd and
  // g = dout weight (per row r):
  //   dx[r, c] += rstd[r] (g[r, c] - mean_c g[r, :] - xhat[r, c] mean_c (g[r, :] xhat[r, :]))
  //     (accumulated: in a pre-norm block dx is the residual stream's gradient, which already
  //     holds the gradient that passes around the block),
  //   dweight[c] = sum_r dout[r, c] xhat[r, c], dbias[c] = sum_r dout[r, c] (overwritten, r
  //   ascending).
  // dx must not alias dout.
  virtual void layernorm_backward(const float* dout, const float* x, const float* weight,
                                  const float* mean, const float* rstd, float* dx, float* dweight,
                                  float* dbias, int64_t N, int C) const = 0;

  // Causal multi-head self-attention (llm.c's layout). qkv[B, T, 3C] holds each position's query,
  // key and value: q = qkv[b, t, 0:C], k = qkv[b, t, C:2C], v = qkv[b, t, 2C:3C]; head h uses
  // channels [h hs, (h+1) hs) of each.
  //   att[b, h, t, u] = softmax over u <= t of q[b, t, h] . k[b, u, h] / sqrt(hs), 0 for u > t,
  //   out[b, t, h hs + i] = sum over u <= t, ascending, of att[b, h, t, u] v[b, u, h hs + i].
  // out[B, T, C] and att[B, NH, T, T] overwritten (att, the probabilities, is for the backward).
  virtual void attention_forward(const float* qkv, float* out, float* att, int B, int T, int C,
                                 int NH) const = 0;
  // From dout[B, T, C] and forward's qkv and att: dqkv[B, T, 3C], overwritten. With
  // datt[t, u] = dout[t, h] . v[u, h] and ds[t, u] = att[t, u] (datt[t, u] - sum_u' att[t, u']
  // datt[t, u']) per (b, h):
  //   dq[t] = sum over u <= t, ascending, of ds[t, u] k[u] / sqrt(hs),
  //   dk[u] = sum over t >= u, ascending, of ds[t, u] q[t] / sqrt(hs),
  //   dv[u] = sum over t >= u, ascending, of att[t, u] dout[t].
  // scratch[B, NH, T, T] is overwritten (room for ds); dqkv must not alias the inputs.
  virtual void attention_backward(const float* dout, const float* qkv, const float* att,
                                  float* scratch, float* dqkv, int B, int T, int C,
                                  int NH) const = 0;
};

// The CPU backend: hippo's own matrix-product kernels for the instruction set `isa` ("avx512",
// "avx2", "portable"; empty: the best this CPU supports), plain loops, split over `threads`
// threads. Throws std::invalid_argument for an unknown instruction set or one this CPU lacks.
std::unique_ptr<Backend> make_cpu_backend(int threads, const std::string& isa = "");

// Where a CUDA backend's work runs: the device's legacy default stream, which every such backend
// shares (all their work runs in the order it was issued), or a stream of its own, concurrent with
// the others and ordered with them only by wait_for and copy_from (a pipeline stage; several may
// share a GPU).
enum class Stream { kDefault, kOwn };

// How a CUDA backend computes fp32 convolutions; both are deterministic and agree with the CPU
// within fp32 rounding, but not bit for bit with each other (the worker's environment names the
// one it uses). kCudnn: cuDNN's deterministic algorithms in plain FMA arithmetic, on NCHW copies
// of the CNHW tensors (cuda_conv.cuh). kIm2col: hippo's own, a column matrix and cuBLAS products
// on the CNHW tensors themselves (im2col.h), in the column scratch the engine already keeps. bf16
// convolutions are cuDNN's either way.
enum class CudaConvolution { kCudnn, kIm2col };

// The CUDA backend on device `device` (cuda_backend.cu): cuBLAS products, CUDA kernels for the
// rest, on `stream`, deterministic (kernels/README.md). Its memory is device memory. Throws
// std::invalid_argument when the device is not there or hippo was built without CUDA,
// std::runtime_error when the device cannot be set up.
std::unique_ptr<Backend> make_cuda_backend(int device, Stream stream = Stream::kDefault,
                                           CudaConvolution conv = CudaConvolution::kCudnn);

// The number of CUDA devices this process can use: 0 when hippo was built without CUDA, when no
// driver is installed, or when there is no device. Never throws.
int cuda_device_count();

// Why cuda_device_count() is 0, in words (the CUDA runtime's error, no device, or a build without
// CUDA); "" when there are devices. Never throws.
std::string cuda_devices_unseen_reason();

// CUDA device `device`'s model, compute capability and multiprocessor count, e.g. "NVIDIA H100
// 80GB HBM3 (sm_90, 132 SMs)". Throws std::invalid_argument when the device is not there or hippo
// was built without CUDA.
std::string cuda_device_model(int device);
// What the bits of a CUDA backend's work on `device` depend on besides the program: its model and
// the versions of the CUDA runtime, cuBLAS and cuDNN loaded, e.g. "NVIDIA H100 80GB HBM3 (sm_90,
// 132 SMs), CUDA 13.0, cuBLAS 13.1.0, cuDNN 9.13.0" (worker/environment.h). Loads cuBLAS and
// cuDNN. Throws as cuda_device_model does, or std::runtime_error when a library cannot be loaded.
std::string cuda_device_environment(int device);

// A CUDA device's name, "cuda:N" or "cuda:N:im2col", read: its index and its convolutions;
// nullopt for any other name (make_backend says what is expected). The one place that reads it.
struct CudaDeviceName {
  int index;
  CudaConvolution conv;
};
std::optional<CudaDeviceName> parse_cuda_device(const std::string& device);

// The backend a device name asks for: "cpu" (with `threads` threads; "cpu:avx2" etc. names the
// kernels' instruction set, see make_cpu_backend) or "cuda:N" (threads is ignored; "cuda:N:im2col"
// computes fp32 convolutions with CudaConvolution::kIm2col). Fails at once
// with std::invalid_argument naming the problem: a malformed name, a device that is not there
// ("cuda:1 requested, this machine has 0 CUDA devices") or a build without CUDA.
std::unique_ptr<Backend> make_backend(const std::string& device, int threads);

}  // namespace hippo::kernels
