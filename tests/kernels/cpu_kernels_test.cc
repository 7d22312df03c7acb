// hippo's CPU matrix product (kernels/cpu_gemm.h) on every instruction set this CPU runs: against a
// double-precision reference, and bit for bit against the portable code (one fused multiply-add
// chain per value whatever the vector width, tile or blocking), for shapes that exercise partial
// tiles, narrow outputs, several slices of k and blocks of rows and columns, every operand
// orientation and every epilogue. The direct convolutions (kernels/cpu_conv.h) against a direct
// reference and bit for bit against the product of the weights and the im2col columns. Then the
// CPU backends of each instruction set against each other and across thread counts: products,
// fused layers and convolutions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu_conv.h"
#include "kernels/cpu_gemm.h"
#include "kernels/cpu_optimizer.h"
#include "kernels/kernels.h"
#include "tests/kernels/random_vector.h"

namespace hippo::kernels {
namespace {

using cpu::Isa;
using test_data::random_vector;

// The instruction sets this CPU can run, portable first.
std::vector<Isa> runnable_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512})
    if (isa <= cpu::best_isa()) out.push_back(isa);
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Shape {
  int m, n, k;
};

TEST(CpuGemmTest, EveryInstructionSetMatchesTheReferenceWithTheSameBits) {
  // Partial tiles everywhere; n <= 16 (the narrow tile); k over several slices (> kKc) and not a
  // multiple of 8; m over several row blocks (> kMc), n over several column blocks (> kNc).
  // Last panels of columns that fill part of a vector, or leave whole vectors of the tile empty
  // (the mlp's 784 = 24 x 32 + 16 on AVX-512): C's rows are ldc = n + 3 apart, and the values
  // between them must stay untouched. B read in place (rows 784 or 48 floats apart, an odd number
  // of cache lines), over one slice of k or two. Each also with C stored transposed, over several
  // slices of k and blocks of rows (k = 1100).
  const Shape shapes[] = {{1, 1, 1},     {7, 5, 3},      {37, 29, 53},   {16, 10, 130},
                          {8, 32, 600},  {200, 33, 17},  {9, 1100, 40},  {64, 96, 257},
                          {16, 784, 24}, {24, 44, 20},   {10, 128, 128}, {128, 10, 20},
                          {40, 48, 300}, {100, 40, 1100}};
  cpu::GemmBuffers buffers;
  for (const Shape s : shapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (int epilogue = 0; epilogue < 4; ++epilogue) {
          SCOPED_TRACE(std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) +
                       " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) +
                       " epilogue=" + std::to_string(epilogue));
          const auto a = random_vector(size_t(s.m) * s.k, 1),
                     b = random_vector(size_t(s.k) * s.n, 2);
          const int64_t ldc = s.n + 3;
          const auto c0 = random_vector(size_t(s.m) * ldc, 3);
          const auto row_bias = random_vector(s.m, 4), col_bias = random_vector(s.n, 5);
          const cpu::View va = ta ? cpu::View{a.data(), 1, s.m} : cpu::View{a.data(), s.k, 1};
          const cpu::View vb = tb ? cpu::View{b.data(), 1, s.k} : cpu::View{b.data(), s.n, 1};
          // 0: plain; 1: accumulate; 2: row bias + ReLU; 3: accumulate, column bias + ReLU.
          cpu::Epilogue e;
          e.accumulate = epilogue % 2 == 1;
          if (epilogue == 2) e.row_bias = row_bias.data();
          if (epilogue == 3) e.col_bias = col_bias.data();
          e.relu = epilogue >= 2;

          std::vector<float> portable;
          const float kSlack = -7.0f;
          for (Isa isa : runnable_isas()) {
            std::vector<float> c = c0;
            cpu::gemm(isa, s.m, s.n, s.k, va, vb, c.data(), ldc, e, buffers);
            for (int i = 0; i < s.m; ++i)
              for (int j = s.n; j < ldc; ++j)
                ASSERT_EQ(c[i * ldc + j], c0[i * ldc + j])
                    << cpu::isa_name(isa) << " wrote " << i << "," << j << " outside C";
            if (isa == Isa::kPortable) {
              portable = c;
              for (int i = 0; i < s.m; ++i)
                for (int j = 0; j < s.n; ++j) {
                  double ref = e.accumulate ? c0[i * ldc + j] : 0.0;
                  for (int p = 0; p < s.k; ++p)
                    ref += double{a[ta ? size_t(p) * s.m + i : size_t(i) * s.k + p]} *
                           b[tb ? size_t(j) * s.k + p : size_t(p) * s.n + j];
                  if (e.row_bias) ref += e.row_bias[i];
                  if (e.col_bias) ref += e.col_bias[j];
                  if (e.relu) ref = std::max(ref, 0.0);
                  ASSERT_NEAR(c[i * ldc + j], ref, 1e-5 * (s.k + 1)) << i << "," << j;
                }
            } else {
              EXPECT_TRUE(same_bits(c, portable)) << cpu::isa_name(isa) << " differs from portable";
            }
            // C stored transposed (rows m + 5 apart): the same values, nothing outside it written.
            const int64_t ldt = s.m + 5;
            std::vector<float> ct(size_t(s.n) * ldt, kSlack);
            for (int i = 0; i < s.m; ++i)
              for (int j = 0; j < s.n; ++j) ct[j * ldt + i] = c0[i * ldc + j];
            cpu::Epilogue et = e;
            et.transposed_c = true;
            cpu::gemm(isa, s.m, s.n, s.k, va, vb, ct.data(), ldt, et, buffers);
            for (int j = 0; j < s.n; ++j)
              for (int i = 0; i < ldt; ++i)
                ASSERT_EQ(std::memcmp(&ct[j * ldt + i], i < s.m ? &portable[i * ldc + j] : &kSlack,
                                      sizeof(float)),
                          0)
                    << cpu::isa_name(isa) << " transposed: " << i << "," << j;
          }
        }
}

// A product whose epilogue takes the SGD step of the parameters whose gradient C is: on every
// instruction set, the same parameters and momentum, bit for bit, as the portable product stored
// and then the portable sgd_update, for each variant; values between the parameters' rows stay.
TEST(CpuGemmTest, SgdStepInTheEpilogueEqualsTheProductThenSgdUpdate) {
  const Shape shapes[] = {{7, 5, 3},     {37, 29, 300}, {16, 784, 24},
                          {10, 128, 64}, {0, 4, 5},     {3, 4, 0}};
  const SgdParams kinds[] = {SgdParams{.lr = 0.1f, .weight_decay = 1e-3f},
                             SgdParams{.lr = 0.1f, .momentum = 0.9f, .weight_decay = 1e-3f},
                             SgdParams{.lr = 0.1f, .momentum = 0.9f, .nesterov = true}};
  cpu::GemmBuffers buffers;
  for (const Shape s : shapes)
    for (const SgdParams& hp : kinds) {
      SCOPED_TRACE(std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) +
                   " momentum=" + std::to_string(hp.momentum) +
                   " nesterov=" + std::to_string(hp.nesterov));
      const int64_t ld = s.n + 3;
      const auto a = random_vector(size_t(s.k) * s.m, 80), b = random_vector(size_t(s.k) * s.n, 81);
      const auto p0 = random_vector(size_t(s.m) * ld, 82), m0 = random_vector(size_t(s.m) * ld, 83);
      const cpu::View va{a.data(), 1, s.m}, vb{b.data(), s.n, 1};  // a weight gradient's operands
      float* no_momentum = nullptr;
      // The reference: the portable product stored, then the portable update row by row.
      std::vector<float> grad(size_t(s.m) * ld), p_ref = p0, m_ref = m0;
      cpu::gemm(Isa::kPortable, s.m, s.n, s.k, va, vb, grad.data(), ld, {}, buffers);
      for (int i = 0; i < s.m; ++i)
        cpu::sgd_update(Isa::kPortable, p_ref.data() + i * ld, grad.data() + i * ld,
                        hp.momentum != 0 ? m_ref.data() + i * ld : no_momentum, s.n, hp);
      for (Isa isa : runnable_isas()) {
        std::vector<float> c(size_t(s.m) * ld), p = p0, m = m0;
        const cpu::SgdStep step{.params = p.data(),
                                .momentum = hp.momentum != 0 ? m.data() : nullptr,
                                .ld = ld,
                                .hp = hp};
        cpu::gemm(isa, s.m, s.n, s.k, va, vb, c.data(), ld, {.sgd = &step}, buffers);
        EXPECT_TRUE(same_bits(p, p_ref)) << cpu::isa_name(isa) << ": parameters";
        EXPECT_TRUE(same_bits(m, m_ref)) << cpu::isa_name(isa) << ": momentum";
      }
    }
}

TEST(CpuGemmTest, EmptySumIsZeroOrKeepsC) {
  cpu::GemmBuffers buffers;
  const auto c0 = random_vector(6, 7);
  for (Isa isa : runnable_isas()) {
    std::vector<float> c = c0;
    cpu::gemm(isa, 2, 3, 0, {nullptr, 0, 1}, {nullptr, 3, 1}, c.data(), 3, {}, buffers);
    EXPECT_EQ(c, std::vector<float>(6, 0.0f));
    c = c0;
    cpu::gemm(isa, 2, 3, 0, {nullptr, 0, 1}, {nullptr, 3, 1}, c.data(), 3, {.accumulate = true},
              buffers);
    EXPECT_EQ(c, c0);
  }
}

// col[(c, ki, kj), (b, oy, ox)] = x[c, b, oy + ki - pad, ox + kj - pad], 0 outside the image.
std::vector<float> im2col(const ConvShape& s, const std::vector<float>& x) {
  const int ho = s.out_height(), wo = s.out_width(), k = s.kernel;
  std::vector<float> col(size_t(s.col_rows() * s.col_cols()));
  for (int64_t r = 0; r < s.col_rows(); ++r)
    for (int b = 0; b < s.batch; ++b)
      for (int oy = 0; oy < ho; ++oy)
        for (int ox = 0; ox < wo; ++ox) {
          const int c = int(r / (k * k)), iy = oy + int(r / k % k) - s.pad,
                    ix = ox + int(r % k) - s.pad;
          const bool inside = iy >= 0 && iy < s.height && ix >= 0 && ix < s.width;
          col[size_t(r * s.col_cols() + (int64_t{b} * ho + oy) * wo + ox)] =
              inside ? x[size_t(((int64_t{c} * s.batch + b) * s.height + iy) * s.width + ix)] : 0;
        }
  return col;
}

// Shapes with partial tiles of positions and channels, 1x1, 5x5 and even kernels, no padding,
// wide padding, and rows longer than a tile.
TEST(CpuConvTest, DirectConvolutionsMatchTheReferenceAndTheProductWithColumnsBitForBit) {
  const ConvShape shapes[] = {{.batch = 3,
                               .in_channels = 2,
                               .out_channels = 5,
                               .height = 7,
                               .width = 9,
                               .kernel = 3,
                               .pad = 1},
                              {.batch = 2,
                               .in_channels = 3,
                               .out_channels = 33,
                               .height = 5,
                               .width = 17,
                               .kernel = 1,
                               .pad = 0},
                              {.batch = 2,
                               .in_channels = 4,
                               .out_channels = 17,
                               .height = 6,
                               .width = 6,
                               .kernel = 5,
                               .pad = 2},
                              {.batch = 2,
                               .in_channels = 3,
                               .out_channels = 8,
                               .height = 8,
                               .width = 30,
                               .kernel = 3,
                               .pad = 0},
                              {.batch = 1,
                               .in_channels = 2,
                               .out_channels = 3,
                               .height = 5,
                               .width = 5,
                               .kernel = 2,
                               .pad = 3}};
  cpu::GemmBuffers buffers;
  for (const ConvShape& s : shapes) {
    SCOPED_TRACE("Cin " + std::to_string(s.in_channels) + " Cout " +
                 std::to_string(s.out_channels) + " " + std::to_string(s.height) + "x" +
                 std::to_string(s.width) + " k " + std::to_string(s.kernel) + " pad " +
                 std::to_string(s.pad));
    const int64_t rows = s.col_rows(), cols = s.col_cols();
    const auto x = random_vector(size_t(s.in_channels) * s.batch * s.height * s.width, 50);
    const auto w = random_vector(size_t(s.out_channels * rows), 51);
    const auto bias = random_vector(s.out_channels, 52);
    const auto dy = random_vector(size_t(s.out_channels * cols), 53);
    const auto col = im2col(s, x);
    for (Isa isa : runnable_isas()) {
      SCOPED_TRACE(cpu::isa_name(isa));
      auto be = make_backend(std::string("cpu:") + cpu::isa_name(isa), 2);
      std::vector<float> y(dy.size()), dx(x.size()), dw(w.size()), db(bias.size());
      be->conv2d_forward(s, x.data(), w.data(), bias.data(), nullptr, y.data());
      be->conv2d_backward(s, x.data(), nullptr, w.data(), dy.data(), nullptr, dx.data(), dw.data(),
                          db.data());
      // The same chains as the products with the columns.
      std::vector<float> y_product(y.size()), dw_product(dw.size());
      cpu::gemm(isa, s.out_channels, int(cols), int(rows), {w.data(), rows, 1},
                {col.data(), cols, 1}, y_product.data(), cols, {.row_bias = bias.data()}, buffers);
      cpu::gemm(isa, s.out_channels, int(rows), int(cols), {dy.data(), cols, 1},
                {col.data(), 1, cols}, dw_product.data(), rows, {}, buffers);
      EXPECT_TRUE(same_bits(y, y_product));
      EXPECT_TRUE(same_bits(dw, dw_product));
      // The input gradient against the direct sum.
      const int ho = s.out_height(), wo = s.out_width(), k = s.kernel;
      for (int c = 0; c < s.in_channels; ++c)
        for (int b = 0; b < s.batch; ++b)
          for (int iy = 0; iy < s.height; ++iy)
            for (int ix = 0; ix < s.width; ++ix) {
              double ref = 0;
              for (int co = 0; co < s.out_channels; ++co)
                for (int ki = 0; ki < k; ++ki)
                  for (int kj = 0; kj < k; ++kj) {
                    const int oy = iy + s.pad - ki, ox = ix + s.pad - kj;
                    if (oy < 0 || oy >= ho || ox < 0 || ox >= wo) continue;
                    ref += double{w[size_t(co * rows + (c * k + ki) * k + kj)]} *
                           dy[size_t((int64_t{co} * s.batch + b) * ho * wo + oy * wo + ox)];
                  }
              ASSERT_NEAR(dx[size_t(((int64_t{c} * s.batch + b) * s.height + iy) * s.width + ix)],
                          ref, 1e-4);
            }
    }
  }
}

TEST(CpuBackendIsaTest, NamesAreCheckedAndPicked) {
  EXPECT_STREQ(make_backend("cpu:portable", 1)->name(), "cpu");
  EXPECT_THROW(make_cpu_backend(1, "sse9"), std::invalid_argument);
  EXPECT_THROW(make_backend("cpu:sse9", 1), std::invalid_argument);
  if (cpu::best_isa() < Isa::kAvx512) {
    EXPECT_THROW(make_backend("cpu:avx512", 1), std::invalid_argument);
  }
}

// The convolution s, a linear layer and its gradients on every backend: the same bits.
void expect_same_bits_everywhere(const ConvShape& s) {
  const auto x = random_vector(size_t(s.in_channels) * s.batch * s.height * s.width, 10);
  const auto w = random_vector(size_t(s.out_channels) * s.col_rows(), 11);
  const auto bias = random_vector(s.out_channels, 12);
  const auto dy = random_vector(size_t(s.out_channels) * s.col_cols(), 13);
  const int rows = 50, in = 70, out = 40;
  const auto fx = random_vector(size_t(rows) * in, 14), fw = random_vector(size_t(out) * in, 15);
  const auto fb = random_vector(out, 16), fdy = random_vector(size_t(rows) * out, 17);
  const int wide_out = 90;
  const auto ww = random_vector(size_t(wide_out) * in, 18), wb = random_vector(wide_out, 19);
  auto run = [&](const std::string& device, int threads) {
    auto be = make_backend(device, threads);
    std::vector<float> col(be->conv2d_scratch_size(s)), dcol(col.size());
    std::vector<float> y(dy.size()), dx(x.size()), dw(w.size()), db(bias.size());
    be->conv2d_forward(s, x.data(), w.data(), bias.data(), col.data(), y.data());
    be->conv2d_backward(s, x.data(), col.data(), w.data(), dy.data(), dcol.data(), dx.data(),
                        dw.data(), db.data());
    std::vector<float> fy(size_t(rows) * out), g = fdy, fdb(out), fdw(fw.size()), fdx(fx.size());
    be->linear_forward(fx.data(), fw.data(), fb.data(), fy.data(), rows, in, out, true);
    be->bias_relu_backward(fy.data(), g.data(), fdb.data(), rows, out, 1);
    be->gemm(true, false, out, in, rows, 1.0f, g.data(), fx.data(), 0.0f, fdw.data());
    be->gemm(false, false, rows, in, out, 1.0f, g.data(), fw.data(), 0.0f, fdx.data());
    // A layer of more outputs than rows: y^T = w x^T stored transposed, split by outputs.
    std::vector<float> wide(size_t(rows) * wide_out);
    be->linear_forward(fx.data(), ww.data(), wb.data(), wide.data(), rows, in, wide_out, true);
    return std::vector<std::vector<float>>{y, dx, dw, db, fy, g, fdb, fdw, fdx, wide};
  };
  const auto reference = run("cpu:portable", 1);
  for (Isa isa : runnable_isas())
    for (int threads : {1, 3}) {
      const std::string device = std::string("cpu:") + cpu::isa_name(isa);
      const auto outputs = run(device, threads);
      for (size_t i = 0; i < outputs.size(); ++i)
        EXPECT_TRUE(same_bits(outputs[i], reference[i]))
            << "output " << i << " on " << device << " with " << threads << " threads";
    }
}

// Everything a model runs through the products, on each instruction set's backend and with 1 and 3
// threads: the same bits everywhere. The convolutions: one whose weight gradient is split over the
// threads by output channels, in one chunk of images; one split by rows, in several chunks.
TEST(CpuBackendIsaTest, ProductsFusedLayersAndConvolutionsHaveTheSameBitsEverywhere) {
  for (const ConvShape s :
       {ConvShape{.batch = 6, .in_channels = 5, .out_channels = 20, .height = 9, .width = 11},
        ConvShape{.batch = 8, .in_channels = 16, .out_channels = 20, .height = 28, .width = 28}})
    expect_same_bits_everywhere(s);
}

// The optimizer updates (cpu_optimizer.h) on every instruction set's backend, 1 and 3 threads:
// the same bits as the portable code, for each variant.
TEST(CpuBackendIsaTest, OptimizerUpdatesHaveTheSameBitsEverywhere) {
  const int n = 100003;  // not a multiple of any vector width
  const auto p0 = random_vector(n, 60), g = random_vector(n, 61), s0 = random_vector(n, 62);
  const auto v0 = random_vector(n, 63, 0, 1);
  auto run = [&](const std::string& device, int threads) {
    auto be = make_backend(device, threads);
    std::vector<std::vector<float>> out;
    for (const SgdParams hp : {SgdParams{.lr = 0.1f, .weight_decay = 1e-3f},
                               SgdParams{.lr = 0.1f, .momentum = 0.9f, .weight_decay = 1e-3f},
                               SgdParams{.lr = 0.1f, .momentum = 0.9f, .nesterov = true}}) {
      std::vector<float> p = p0, buf = s0;
      be->sgd_update(p.data(), g.data(), hp.momentum != 0 ? buf.data() : nullptr, n, hp);
      out.push_back(p);
      out.push_back(buf);
    }
    for (bool decoupled : {false, true}) {
      std::vector<float> p = p0, m = s0, v = v0;
      be->adam_update(p.data(), g.data(), m.data(), v.data(), n,
                      {.lr = 1e-3f, .weight_decay = 0.01f, .decoupled = decoupled, .t = 7});
      out.insert(out.end(), {p, m, v});
    }
    return out;
  };
  const auto reference = run("cpu:portable", 1);
  for (Isa isa : runnable_isas())
    for (int threads : {1, 3}) {
      const std::string device = std::string("cpu:") + cpu::isa_name(isa);
      const auto outputs = run(device, threads);
      for (size_t i = 0; i < outputs.size(); ++i)
        EXPECT_TRUE(same_bits(outputs[i], reference[i]))
            << "output " << i << " on " << device << " with " << threads << " threads";
    }
}

// The fused convolution block (conv_block_forward/backward) gives the values of its parts, bit for
// bit, on every instruction set and thread count: an odd size (a dropped last row and column),
// ties in the pooling windows (a zero image: the gradient goes to each window's first maximum),
// and several chunks of images.
TEST(CpuBackendIsaTest, ConvolutionBlockEqualsItsParts) {
  for (const ConvShape s :
       {ConvShape{.batch = 5, .in_channels = 3, .out_channels = 20, .height = 7, .width = 9},
        ConvShape{.batch = 12, .in_channels = 8, .out_channels = 40, .height = 28, .width = 28}}) {
    SCOPED_TRACE(std::to_string(s.height) + "x" + std::to_string(s.width));
    // Image 1 is zero: its convolution is 0 everywhere, four-way ties in every window.
    auto x = random_vector(size_t(s.in_channels) * s.batch * s.height * s.width, 70);
    const int64_t image = int64_t{s.height} * s.width;
    for (int c = 0; c < s.in_channels; ++c)
      std::fill_n(x.begin() + (int64_t{c} * s.batch + 1) * image, image, 0.0f);
    const auto w = random_vector(size_t(s.out_channels * s.col_rows()), 71);
    const auto bias = random_vector(s.out_channels, 72);
    const int64_t pooled =
        int64_t{s.out_channels} * s.batch * (s.out_height() / 2) * (s.out_width() / 2);
    const auto dy0 = random_vector(size_t(pooled), 73);
    for (Isa isa : runnable_isas())
      for (int threads : {1, 3}) {
        const std::string device = std::string("cpu:") + cpu::isa_name(isa);
        SCOPED_TRACE(device + " with " + std::to_string(threads) + " threads");
        auto be = make_backend(device, threads);
        std::vector<float> scratch(be->conv_block_scratch_size(s)), y(pooled), dy = dy0;
        std::vector<float> dx(x.size()), dw(w.size()), db(bias.size());
        be->conv_block_forward(s, x.data(), w.data(), bias.data(), scratch.data(), y.data());
        be->conv_block_backward(s, x.data(), w.data(), y.data(), dy.data(), scratch.data(),
                                dx.data(), dw.data(), db.data());
        // The parts.
        std::vector<float> z(size_t(s.out_channels * s.col_cols())), py(pooled), pdy = dy0;
        std::vector<float> dz(z.size()), pdx(x.size()), pdw(w.size()), pdb(bias.size());
        std::vector<float> col(be->conv2d_scratch_size(s)), dcol(col.size());
        const int64_t planes = int64_t{s.out_channels} * s.batch;
        be->conv2d_forward(s, x.data(), w.data(), nullptr, col.data(), z.data());
        be->maxpool_forward(z.data(), py.data(), planes, s.out_height(), s.out_width(), 2);
        be->bias_forward(py.data(), bias.data(), 1, s.out_channels, pooled / s.out_channels);
        be->relu_forward(py.data(), py.data(), pooled);
        be->bias_relu_backward(py.data(), pdy.data(), pdb.data(), 1, s.out_channels,
                               pooled / s.out_channels);
        be->maxpool_backward(z.data(), pdy.data(), dz.data(), planes, s.out_height(), s.out_width(),
                             2);
        be->conv2d_backward(s, x.data(), col.data(), w.data(), dz.data(), dcol.data(), pdx.data(),
                            pdw.data(), nullptr);
        EXPECT_TRUE(same_bits(y, py));
        EXPECT_TRUE(same_bits(dy, pdy));
        EXPECT_TRUE(same_bits(db, pdb));
        EXPECT_TRUE(same_bits(dw, pdw));
        EXPECT_TRUE(same_bits(dx, pdx));
      }
  }
}

// A linear layer's weight gradient with its SGD step (linear_weight_sgd) gives the parameters and
// momentum of gemm then sgd_update, bit for bit, on every instruction set and thread count: split
// over the threads by columns (in >= out) and by rows, for each variant of the step.
TEST(CpuBackendIsaTest, LinearWeightSgdEqualsItsParts) {
  struct Layer {
    int rows, in, out;
  };
  for (const Layer l : {Layer{50, 70, 40}, Layer{20, 40, 600}})
    for (const SgdParams hp : {SgdParams{.lr = 0.1f, .weight_decay = 1e-3f},
                               SgdParams{.lr = 0.1f, .momentum = 0.9f, .weight_decay = 1e-3f},
                               SgdParams{.lr = 0.1f, .momentum = 0.9f, .nesterov = true}}) {
      const size_t n = size_t(l.out) * l.in;
      const auto x = random_vector(size_t(l.rows) * l.in, 90);
      const auto dy = random_vector(size_t(l.rows) * l.out, 91);
      const auto w0 = random_vector(n, 92), m0 = random_vector(n, 93);
      auto reference = make_backend("cpu:portable", 1);
      std::vector<float> dw(n), w_ref = w0, m_ref = m0;
      reference->gemm(true, false, l.out, l.in, l.rows, 1.0f, dy.data(), x.data(), 0.0f, dw.data());
      reference->sgd_update(w_ref.data(), dw.data(), m_ref.data(), int64_t(n), hp);
      for (Isa isa : runnable_isas())
        for (int threads : {1, 3}) {
          const std::string device = std::string("cpu:") + cpu::isa_name(isa);
          SCOPED_TRACE(device + " with " + std::to_string(threads) + " threads, " +
                       std::to_string(l.out) + "x" + std::to_string(l.in) +
                       " momentum=" + std::to_string(hp.momentum));
          auto be = make_backend(device, threads);
          std::vector<float> scratch(n), w = w0, m = m0;
          be->linear_weight_sgd(dy.data(), x.data(), scratch.data(), w.data(), m.data(), l.rows,
                                l.in, l.out, hp);
          EXPECT_TRUE(same_bits(w, w_ref));
          EXPECT_TRUE(same_bits(m, m_ref));
        }
    }
}

// The fused layers give the values of the operations they stand for, bit for bit.
TEST(CpuBackendIsaTest, FusedLayersEqualTheirParts) {
  auto be = make_cpu_backend(2);
  const int rows = 33, in = 45, out = 27;
  const auto x = random_vector(size_t(rows) * in, 20), w = random_vector(size_t(out) * in, 21);
  const auto b = random_vector(out, 22), dy = random_vector(size_t(rows) * out, 23);
  // Fewer outputs than rows, and more (computed as y^T = w x^T stored transposed).
  for (int layer_out : {out, 70})
    for (bool relu : {false, true}) {
      std::vector<float> fused(size_t(rows) * layer_out), parts(fused.size());
      const auto lw = random_vector(size_t(layer_out) * in, 25), lb = random_vector(layer_out, 26);
      be->linear_forward(x.data(), lw.data(), lb.data(), fused.data(), rows, in, layer_out, relu);
      be->gemm(false, true, rows, layer_out, in, 1.0f, x.data(), lw.data(), 0.0f, parts.data());
      be->bias_forward(parts.data(), lb.data(), rows, layer_out, 1);
      if (relu) be->relu_forward(parts.data(), parts.data(), int64_t{rows} * layer_out);
      EXPECT_TRUE(same_bits(fused, parts)) << "relu=" << relu << " out=" << layer_out;
    }
  const auto y = random_vector(size_t(rows) * out, 24);  // about half of it > 0
  for (int64_t inner : {1, 7}) {
    const int64_t outer = 3, channels = 11, n = outer * channels * inner;
    std::vector<float> g_fused(dy.begin(), dy.begin() + n), g_parts = g_fused;
    std::vector<float> db_fused(channels), db_parts(channels);
    be->bias_relu_backward(y.data(), g_fused.data(), db_fused.data(), outer, channels, inner);
    be->relu_backward(y.data(), g_parts.data(), g_parts.data(), n);
    be->bias_backward(g_parts.data(), db_parts.data(), outer, channels, inner);
    EXPECT_TRUE(same_bits(g_fused, g_parts)) << "inner=" << inner;
    EXPECT_TRUE(same_bits(db_fused, db_parts)) << "inner=" << inner;
  }
}

}  // namespace
}  // namespace hippo::kernels
