// The index arithmetic of the CUDA backend's im2col convolutions (kernels/im2col.h), run on the
// host where no GPU is: the column matrix, the gather back to the input, and the weight gradient's
// slices, composed as cuda_backend.cu composes them (with plain loops for cuBLAS's products),
// against the CPU backend's direct convolutions within fp32 rounding. The GPU run of the same path
// is cuda_kernels_test's Im2colConvolutionForwardAndBackward.
#include "kernels/im2col.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/kernels/random_vector.h"

namespace hippo::kernels {
namespace {

using test_data::random_vector;

// c[m, n] = a[m, k] b[k, n] for row-major a and b read through (row, col) -> index functions,
// summed in double (the reference for cuBLAS's products).
template <typename A, typename B>
std::vector<float> product(int64_t m, int64_t n, int64_t k, A a, B b) {
  std::vector<float> c(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t l = 0; l < k; ++l) s += double{a(i, l)} * b(l, j);
      c[static_cast<size_t>(i * n + j)] = static_cast<float>(s);
    }
  return c;
}

double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (double{got[i]} - want[i]) * (double{got[i]} - want[i]);
    norm += double{want[i]} * want[i];
  }
  return std::sqrt(diff / norm);
}

TEST(Im2colTest, ColumnsProductsAndGatherEqualTheDirectConvolution) {
  struct Case {
    int k, pad, batch, in, out, height, width;
  };
  const auto cpu = make_cpu_backend(1);
  for (const Case& c :
       {Case{3, 1, 4, 3, 8, 14, 11}, Case{3, 0, 3, 3, 8, 14, 11}, Case{1, 0, 2, 3, 8, 14, 11},
        Case{5, 2, 2, 3, 8, 14, 11}, Case{3, 1, 7, 1, 4, 28, 28}, Case{3, 1, 23, 2, 4, 14, 14},
        Case{3, 1, 3, 2, 4, 70, 70}}) {
    const ConvShape s{.batch = c.batch,
                      .in_channels = c.in,
                      .out_channels = c.out,
                      .height = c.height,
                      .width = c.width,
                      .kernel = c.k,
                      .pad = c.pad};
    const std::string what = std::to_string(c.in) + "->" + std::to_string(c.out) + " k" +
                             std::to_string(c.k) + " pad " + std::to_string(c.pad) + " batch " +
                             std::to_string(c.batch) + " " + std::to_string(c.height) + "x" +
                             std::to_string(c.width);
    const Im2col g = im2col_of(s);
    const int64_t rows = g.rows(), cols = g.cols(), cout = s.out_channels;
    ASSERT_EQ(rows, s.col_rows());
    ASSERT_EQ(cols, s.col_cols());
    const std::vector<float> x = random_vector(static_cast<size_t>(g.inputs()), 1),
                             w = random_vector(static_cast<size_t>(cout * rows), 2),
                             dy = random_vector(static_cast<size_t>(cout * cols), 3);

    // The CPU backend's direct convolution.
    std::vector<float> col(static_cast<size_t>(cpu->conv2d_scratch_size(s))), dcol(col.size());
    std::vector<float> y(static_cast<size_t>(cout * cols)), dx(x.size()), dw(w.size());
    cpu->conv2d_forward(s, x.data(), w.data(), nullptr, col.data(), y.data());
    cpu->conv2d_backward(s, x.data(), col.data(), w.data(), dy.data(), dcol.data(), dx.data(),
                         dw.data(), nullptr);

    // The im2col path: col, y = w col, dcol = w^T dy, dx gathered from dcol.
    std::vector<float> columns(static_cast<size_t>(rows * cols));
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < cols; ++j) columns[r * cols + j] = im2col_at(g, x.data(), r, j);
    const std::vector<float> y2 = product(
        cout, cols, rows, [&](int64_t i, int64_t l) { return w[i * rows + l]; },
        [&](int64_t l, int64_t j) { return columns[l * cols + j]; });
    EXPECT_LT(relative_error(y2, y), 1e-5) << what << ": forward";
    const std::vector<float> dcolumns = product(
        rows, cols, cout, [&](int64_t r, int64_t o) { return w[o * rows + r]; },
        [&](int64_t o, int64_t j) { return dy[o * cols + j]; });
    std::vector<float> dx2(x.size());
    const int positions = g.h * g.w;
    for (int64_t plane = 0; plane < int64_t{g.channels} * g.batch; ++plane)
      for (int p = 0; p < positions; ++p)
        dx2[plane * positions + p] = col2im_at(g, dcolumns.data(), plane, p);
    EXPECT_LT(relative_error(dx2, dx), 1e-5) << what << ": input gradient";

    // The weight gradient slice by slice, as CudaBackend::weight_gradient cuts the columns: the
    // full slices from column 0 on, then the rest; the partials added in slice order.
    const WeightGradientSlices slices = weight_gradient_slices(g);
    const int64_t plane = int64_t{g.ho} * g.wo, per_slice = slices.images * plane;
    const int64_t full = g.batch / slices.images;
    ASSERT_GE(slices.count, 1) << what;
    ASSERT_TRUE(full == slices.count || full + 1 == slices.count) << what;
    if (plane < 4096) {
      EXPECT_LE(per_slice, 4096) << what;
    }
    std::vector<float> dw2(w.size(), 0.0f);
    int64_t covered = 0;
    for (int64_t q = 0; q < slices.count; ++q) {
      const int64_t first = q * per_slice;
      const int64_t length = q < full ? per_slice : (g.batch - full * slices.images) * plane;
      ASSERT_EQ(first, covered) << what << ": slices leave a gap or overlap";
      ASSERT_GT(length, 0) << what;
      covered += length;
      const std::vector<float> partial = product(
          cout, rows, length, [&](int64_t o, int64_t l) { return dy[o * cols + first + l]; },
          [&](int64_t l, int64_t r) { return columns[r * cols + first + l]; });
      for (size_t i = 0; i < dw2.size(); ++i) dw2[i] += partial[i];
    }
    EXPECT_EQ(covered, cols) << what << ": the slices do not cover the columns";
    EXPECT_LT(relative_error(dw2, dw), 1e-5) << what << ": weight gradient";
  }
}

}  // namespace
}  // namespace hippo::kernels
