// The numerical operations of the training engine, on raw float buffers, behind one dispatch
// point: a Backend. The engine picks a backend once (make_cpu_backend today; a CUDA backend will
// implement the same interface) and calls every operation through it, so no call site branches on
// the device.
//
// Conventions:
//   - All matrices are row-major. Shapes are written next to pointers, outermost axis first.
//   - Convolution activations use the CNHW layout: x[C, B, H, W]. A whole batch then becomes one
//     matrix product (weights[Cout, Cin*k*k] x columns[Cin*k*k, B*Ho*Wo]) whose result is again
//     CNHW, and bias, ReLU and pooling work on contiguous planes.
//   - Determinism: every output element is computed by exactly one thread, in an order that does
//     not depend on the thread count, so results are bit-identical for any thread count (matrix
//     products too: the CPU backend cuts them into blocks by size alone and runs each block as
//     one single-threaded BLAS call; the tests check it). Bits do depend on the BLAS kernels, so
//     every process of one study must use the same machine type and OPENBLAS_CORETYPE.
//
// Kernels depend on nothing else of hippo's.
#pragma once

#include <cstdint>
#include <memory>

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

class Backend {
 public:
  virtual ~Backend() = default;
  // "cpu", or "cuda:N" for device N. Backends of one name share their memory: a buffer of one
  // may be used by another (the worker keeps states across engines).
  virtual const char* name() const = 0;
  virtual int threads() const = 0;

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

  // Elementwise activations over n values; y may alias x, and dx may alias dy.
  virtual void relu_forward(const float* x, float* y, int64_t n) const = 0;
  // dx = dy where y > 0, else 0 (y is the ReLU's output).
  virtual void relu_backward(const float* y, const float* dy, float* dx, int64_t n) const = 0;
  // GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  virtual void gelu_forward(const float* x, float* y, int64_t n) const = 0;
  virtual void gelu_backward(const float* x, const float* dy, float* dx, int64_t n) const = 0;

  // Convolution, CNHW. x[Cin, B, H, W], w[Cout, Cin, k, k], bias[Cout] -> y[Cout, B, Ho, Wo].
  // col[Cin*k*k, B*Ho*Wo] is scratch that forward fills and backward reads (keep it between them).
  // bias may be null (no bias; a caller may add it later, e.g. after pooling, where it is cheaper).
  virtual void conv2d_forward(const ConvShape& s, const float* x, const float* w, const float* bias,
                              float* col, float* y) const = 0;
  // From dy[Cout, B, Ho, Wo] and forward's col: dw and dbias (overwritten; dbias may be null), and
  // dx[Cin, B, H, W] unless dx is null (the first layer needs no input gradient). dcol is scratch
  // of col's size.
  virtual void conv2d_backward(const ConvShape& s, const float* col, const float* w,
                               const float* dy, float* dcol, float* dx, float* dw,
                               float* dbias) const = 0;

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
};

// The CPU backend: OpenBLAS for matrix products, plain loops split over `threads` threads.
// Sets OpenBLAS's thread count, which is process-wide: one backend's thread count per process.
std::unique_ptr<Backend> make_cpu_backend(int threads);

}  // namespace hippo::kernels
