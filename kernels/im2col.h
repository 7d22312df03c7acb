// The column matrix of a convolution and its inverse, one element at a time, for the CUDA
// backend's im2col convolutions (kernels.h, CudaConvolution::kIm2col) and for the CPU test that
// checks this index arithmetic where no GPU is (tests/kernels/im2col_test.cc).
//
// In the CNHW layout (kernels.h), x[Cin, B, H, W] and the output y[Cout, B, Ho, Wo] is the product
// w[Cout, R] col[R, N] with R = Cin*k*k rows r = (c, ki, kj) and N = B*Ho*Wo columns j = (b, oy,
// ox): col[r, j] = x[c, b, oy + ki - pad, ox + kj - pad], 0 outside the image. No transposes: the
// product's output is y itself. Backward, dcol = w^T dy, and dx is the sum, for each input value,
// of the dcol entries that copied it: a gather (one thread per input value, its at most k*k terms
// added in (ki, kj) order), so no atomics and no dependence on timing.
#pragma once

#include <cstdint>

#include "kernels/kernels.h"

#ifdef __CUDACC__
#define HIPPO_HOST_DEVICE __host__ __device__
#else
#define HIPPO_HOST_DEVICE
#endif

namespace hippo::kernels {

// A ConvShape's sizes as plain values (ConvShape's methods are host code).
struct Im2col {
  int64_t batch;
  int channels, k, pad, h, w, ho, wo;
  HIPPO_HOST_DEVICE int64_t rows() const { return int64_t{channels} * k * k; }
  HIPPO_HOST_DEVICE int64_t cols() const { return batch * ho * wo; }
  HIPPO_HOST_DEVICE int64_t inputs() const { return int64_t{channels} * batch * h * w; }
};

inline Im2col im2col_of(const ConvShape& s) {
  return {s.batch,  s.in_channels, s.kernel,       s.pad,
          s.height, s.width,       s.out_height(), s.out_width()};
}

// col[r, j] from x: row r = (c, ki, kj), column j = (b, oy, ox). r and j fit an int (the backend
// sends larger shapes to cuDNN), so only x's offset needs 64 bits.
HIPPO_HOST_DEVICE inline float im2col_at(const Im2col& g, const float* x, int r, int j) {
  const int ox = j % g.wo, oy = j / g.wo % g.ho, b = j / (g.wo * g.ho);
  const int kj = r % g.k, ki = r / g.k % g.k, c = r / (g.k * g.k);
  const int iy = oy + ki - g.pad, ix = ox + kj - g.pad;
  if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) return 0.0f;
  return x[((int64_t{c} * g.batch + b) * g.h + iy) * g.w + ix];
}

// dx[plane, p] from dcol[R, N]: plane = c * B + b of x's C * B planes, p = iy * W + ix within it;
// the (ki, kj) terms added in that order.
HIPPO_HOST_DEVICE inline float col2im_at(const Im2col& g, const float* dcol, int64_t plane, int p) {
  const int64_t n = g.cols();
  const int ix = p % g.w, iy = p / g.w;
  const int64_t c = plane / g.batch, b = plane % g.batch;
  float sum = 0.0f;
  for (int ki = 0; ki < g.k; ++ki) {
    const int oy = iy + g.pad - ki;
    if (oy < 0 || oy >= g.ho) continue;
    for (int kj = 0; kj < g.k; ++kj) {
      const int ox = ix + g.pad - kj;
      if (ox < 0 || ox >= g.wo) continue;
      const int64_t r = (c * g.k + ki) * g.k + kj;
      sum += dcol[r * n + (b * g.ho + oy) * g.wo + ox];
    }
  }
  return sum;
}

// The weight gradient dw[Cout, R] = dy[Cout, N] col[R, N]^T sums over N = B*Ho*Wo columns, far
// more than Cout*R outputs: one product would leave most of a GPU idle. It is cut into slices of
// whole images, each slice's product a partial dw, and the partials added in slice order, so that
// the sum's order depends on the shape only.
struct WeightGradientSlices {
  int64_t images;  // per slice (the last may have fewer)
  int64_t count;   // slices
};
inline WeightGradientSlices weight_gradient_slices(const Im2col& g) {
  constexpr int64_t kColumnsPerSlice = 4096;
  const int64_t plane = int64_t{g.ho} * g.wo;
  const int64_t images = plane == 0 || plane >= kColumnsPerSlice ? 1 : kColumnsPerSlice / plane;
  return {images, (g.batch + images - 1) / images};
}

}  // namespace hippo::kernels
