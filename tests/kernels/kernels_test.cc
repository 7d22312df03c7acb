// Every kernel against a naive reference on random inputs; gradients of convolution, pooling and
// softmax cross-entropy by central finite differences; bit-identical results for 1 and 2 threads.
#include "kernels/kernels.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <random>
#include <tuple>
#include <vector>

#include "kernels/parallel.h"
#include "tests/kernels/random_vector.h"

namespace hippo::kernels {
namespace {

using test_data::random_vector;

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double{a[i]} * b[i];
  return s;
}

// Checks analytic[i] against (f(x + e) - f(x - e)) / 2e at every `stride`-th entry of x.
void check_gradient(std::vector<float>& x, const std::vector<float>& analytic,
                    const std::function<double()>& f, float e, double tol, size_t stride = 1) {
  ASSERT_EQ(x.size(), analytic.size());
  for (size_t i = 0; i < x.size(); i += stride) {
    const float saved = x[i];
    x[i] = saved + e;
    const double up = f();
    x[i] = saved - e;
    const double down = f();
    x[i] = saved;
    const double numeric = (up - down) / (2.0 * e);
    EXPECT_NEAR(analytic[i], numeric, tol * (1 + std::abs(numeric))) << "at index " << i;
  }
}

class KernelsTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be = make_cpu_backend(2);
};

// Also after resize (a worker lends a job the cores of its idle neighbours between two steps):
// the new threads take only the jobs that come after.
TEST(ThreadPoolTest, CoversEveryIndexOnce) {
  ThreadPool pool(3);
  for (int threads : {3, 1, 4, 2}) {
    pool.resize(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (int64_t n : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for(n, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i]++;
      });
      for (int64_t i = 0; i < n; ++i)
        EXPECT_EQ(hits[i].load(), 1) << threads << " threads, n=" << n << " i=" << i;
    }
  }
  EXPECT_THROW(ThreadPool(0), std::invalid_argument);
  EXPECT_THROW(pool.resize(0), std::invalid_argument);
}

TEST_F(KernelsTest, GemmMatchesNaiveForAllTransposes) {
  const int m = 37, n = 29, k = 53;
  auto a = random_vector(m * k, 1), b = random_vector(k * n, 2), c0 = random_vector(m * n, 3);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      std::vector<float> c = c0;
      be->gemm(ta, tb, m, n, k, 0.5f, a.data(), b.data(), 2.0f, c.data());
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
          double s = 0;
          for (int p = 0; p < k; ++p)
            s += double{ta ? a[p * m + i] : a[i * k + p]} * (tb ? b[j * k + p] : b[p * n + j]);
          EXPECT_NEAR(c[i * n + j], 0.5 * s + 2.0 * c0[i * n + j], 1e-4)
              << "ta=" << ta << " tb=" << tb;
        }
    }
}

// Products large enough to be cut into blocks along n, along m, and along k (partial sums).
TEST_F(KernelsTest, BlockedGemmMatchesNaive) {
  struct Shape {
    int m, n, k;
    bool ta, tb;
  };
  for (Shape s : {Shape{64, 4096, 288, false, false}, Shape{4096, 48, 288, true, false},
                  Shape{32, 40, 30000, false, true}, Shape{40, 32, 30000, true, false}}) {
    auto a = random_vector(size_t(s.m) * s.k, 40), b = random_vector(size_t(s.k) * s.n, 41);
    auto c = random_vector(size_t(s.m) * s.n, 42);
    const auto c0 = c;
    be->gemm(s.ta, s.tb, s.m, s.n, s.k, 0.5f, a.data(), b.data(), 1.0f, c.data());
    for (int i = 0; i < s.m; i += 7)
      for (int j = 0; j < s.n; j += 5) {
        double sum = 0;
        for (int p = 0; p < s.k; ++p)
          sum += double{s.ta ? a[size_t(p) * s.m + i] : a[size_t(i) * s.k + p]} *
                 (s.tb ? b[size_t(j) * s.k + p] : b[size_t(p) * s.n + j]);
        ASSERT_NEAR(c[size_t(i) * s.n + j], 0.5 * sum + c0[size_t(i) * s.n + j], 2e-3)
            << s.m << "x" << s.n << "x" << s.k << " at " << i << "," << j;
      }
  }
}

TEST_F(KernelsTest, BiasForwardAndBackward) {
  const int outer = 3, ch = 5, inner = 7;
  auto y = random_vector(outer * ch * inner, 4), bias = random_vector(ch, 5);
  auto y0 = y;
  be->bias_forward(y.data(), bias.data(), outer, ch, inner);
  std::vector<float> db(ch);
  be->bias_backward(y0.data(), db.data(), outer, ch, inner);
  for (int o = 0; o < outer; ++o)
    for (int c = 0; c < ch; ++c)
      for (int i = 0; i < inner; ++i) {
        const int at = (o * ch + c) * inner + i;
        EXPECT_FLOAT_EQ(y[at], y0[at] + bias[c]);
      }
  for (int c = 0; c < ch; ++c) {
    double s = 0;
    for (int o = 0; o < outer; ++o)
      for (int i = 0; i < inner; ++i) s += y0[(o * ch + c) * inner + i];
    EXPECT_NEAR(db[c], s, 1e-5);
  }
}

TEST_F(KernelsTest, ReluAndGelu) {
  const int n = 1000;
  auto x = random_vector(n, 6, -3, 3), dy = random_vector(n, 7);
  std::vector<float> y(n), dx(n);
  be->relu_forward(x.data(), y.data(), n);
  be->relu_backward(y.data(), dy.data(), dx.data(), n);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(y[i], std::max(x[i], 0.0f));
    EXPECT_EQ(dx[i], x[i] > 0 ? dy[i] : 0.0f);
  }
  be->gelu_forward(x.data(), y.data(), n);
  for (int i = 0; i < n; ++i) {
    const double v = x[i];
    EXPECT_NEAR(y[i], 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))),
                1e-5);
  }
  be->gelu_backward(x.data(), dy.data(), dx.data(), n);
  auto loss = [&] {
    be->gelu_forward(x.data(), y.data(), n);
    return dot(y, dy);
  };
  check_gradient(x, dx, loss, 1e-2f, 2e-3, 7);
}

// Direct convolution, CNHW, in double.
std::vector<double> naive_conv(const ConvShape& s, const std::vector<float>& x,
                               const std::vector<float>& w, const std::vector<float>& b) {
  const int ho = s.out_height(), wo = s.out_width(), k = s.kernel;
  std::vector<double> y(size_t(s.out_channels) * s.batch * ho * wo);
  for (int co = 0; co < s.out_channels; ++co)
    for (int n = 0; n < s.batch; ++n)
      for (int oy = 0; oy < ho; ++oy)
        for (int ox = 0; ox < wo; ++ox) {
          double acc = b[co];
          for (int ci = 0; ci < s.in_channels; ++ci)
            for (int i = 0; i < k; ++i)
              for (int j = 0; j < k; ++j) {
                const int iy = oy + i - s.pad, ix = ox + j - s.pad;
                if (iy < 0 || iy >= s.height || ix < 0 || ix >= s.width) continue;
                acc += double{w[((co * s.in_channels + ci) * k + i) * k + j]} *
                       x[((ci * s.batch + n) * s.height + iy) * s.width + ix];
              }
          y[((co * s.batch + n) * ho + oy) * wo + ox] = acc;
        }
  return y;
}

TEST_F(KernelsTest, ConvForwardMatchesNaiveAndGradientsMatchFiniteDifferences) {
  for (auto [k, pad] : {std::pair{3, 1}, std::pair{3, 0}, std::pair{1, 0}, std::pair{5, 2}}) {
    ConvShape s{.batch = 2,
                .in_channels = 3,
                .out_channels = 4,
                .height = 6,
                .width = 5,
                .kernel = k,
                .pad = pad};
    auto x = random_vector(size_t(s.in_channels) * s.batch * s.height * s.width, 8);
    auto w = random_vector(size_t(s.out_channels) * s.col_rows(), 9);
    auto b = random_vector(s.out_channels, 10);
    std::vector<float> col(s.col_rows() * s.col_cols()), dcol(col.size());
    std::vector<float> y(size_t(s.out_channels) * s.col_cols());
    be->conv2d_forward(s, x.data(), w.data(), b.data(), col.data(), y.data());
    auto ref = naive_conv(s, x, w, b);
    for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], ref[i], 1e-4) << "k=" << k;

    auto r = random_vector(y.size(), 11);  // loss = sum(y * r), so dy = r
    std::vector<float> dx(x.size()), dw(w.size()), db(b.size());
    be->conv2d_backward(s, x.data(), col.data(), w.data(), r.data(), dcol.data(), dx.data(),
                        dw.data(), db.data());
    auto loss = [&] {
      be->conv2d_forward(s, x.data(), w.data(), b.data(), col.data(), y.data());
      return dot(y, r);
    };
    check_gradient(x, dx, loss, 1e-2f, 1e-3);
    check_gradient(w, dw, loss, 1e-2f, 1e-3);
    check_gradient(b, db, loss, 1e-2f, 1e-3);
  }
}

TEST_F(KernelsTest, PoolingMatchesNaiveAndFiniteDifferences) {
  // Even and odd sizes, the 2x2 fast path and the general one.
  for (auto [h, w, k] :
       {std::tuple{6, 8, 2}, std::tuple{7, 6, 2}, std::tuple{6, 7, 2}, std::tuple{7, 9, 3}}) {
    const int planes = 3, ho = h / k, wo = w / k;
    // Distinct values at least 1e-2 apart, so each window has one clear maximum.
    std::vector<float> x(planes * h * w);
    for (size_t i = 0; i < x.size(); ++i) x[i] = float((i * 37) % x.size()) * 1e-2f;
    auto dy = random_vector(planes * ho * wo, 12);
    std::vector<float> y(dy.size()), dx(x.size());
    be->maxpool_forward(x.data(), y.data(), planes, h, w, k);
    for (int p = 0; p < planes; ++p)
      for (int oy = 0; oy < ho; ++oy)
        for (int ox = 0; ox < wo; ++ox) {
          float m = -1e30f;
          for (int i = 0; i < k; ++i)
            for (int j = 0; j < k; ++j) m = std::max(m, x[(p * h + oy * k + i) * w + ox * k + j]);
          EXPECT_EQ(y[(p * ho + oy) * wo + ox], m);
        }
    std::fill(dx.begin(), dx.end(), 7.0f);  // must be overwritten everywhere
    be->maxpool_backward(x.data(), dy.data(), dx.data(), planes, h, w, k);
    auto max_loss = [&] {
      be->maxpool_forward(x.data(), y.data(), planes, h, w, k);
      return dot(y, dy);
    };
    check_gradient(x, dx, max_loss, 1e-3f, 1e-2);

    be->avgpool_forward(x.data(), y.data(), planes, h, w, k);
    double first = 0;
    for (int i = 0; i < k; ++i)
      for (int j = 0; j < k; ++j) first += x[i * w + j];
    EXPECT_NEAR(y[0], first / (k * k), 1e-6);
    std::fill(dx.begin(), dx.end(), 7.0f);
    be->avgpool_backward(dy.data(), dx.data(), planes, h, w, k);
    auto avg_loss = [&] {
      be->avgpool_forward(x.data(), y.data(), planes, h, w, k);
      return dot(y, dy);
    };
    check_gradient(x, dx, avg_loss, 1e-2f, 1e-3);
  }
}

TEST_F(KernelsTest, MaxpoolGradientGoesToFirstOfTiedMaxima) {
  for (int w : {2, 3}) {  // the 2x2 fast path and the general one
    std::vector<float> x(2 * w, 1.0f), dy = {5}, dx(2 * w);
    x[1] = x[w] = x[w + 1] = 2;
    be->maxpool_backward(x.data(), dy.data(), dx.data(), 1, 2, w, 2);
    std::vector<float> expect(2 * w, 0.0f);
    expect[1] = 5;
    EXPECT_EQ(dx, expect) << "w=" << w;
  }
}

TEST_F(KernelsTest, SoftmaxCrossEntropy) {
  const int batch = 6, classes = 5;
  auto z = random_vector(batch * classes, 13, -4, 4);
  std::vector<int32_t> labels = {0, 4, 2, 2, 1, 3};
  std::vector<float> losses(batch), dz(z.size());
  be->softmax_cross_entropy(z.data(), labels.data(), batch, classes, losses.data(), dz.data(),
                            1.0f / batch);
  for (int r = 0; r < batch; ++r) {
    double total = 0;
    for (int j = 0; j < classes; ++j) total += std::exp(double{z[r * classes + j]});
    EXPECT_NEAR(losses[r], std::log(total) - z[r * classes + labels[r]], 1e-5);
  }
  auto mean_loss = [&] {
    be->softmax_cross_entropy(z.data(), labels.data(), batch, classes, losses.data(), nullptr, 0);
    return be->sum(losses.data(), batch) / batch;
  };
  check_gradient(z, dz, mean_loss, 1e-2f, 2e-3);

  labels[2] = 5;
  EXPECT_THROW(
      be->softmax_cross_entropy(z.data(), labels.data(), batch, classes, losses.data(), nullptr, 0),
      std::invalid_argument);
}

TEST_F(KernelsTest, CountCorrectSumAndSwapAxes) {
  std::vector<float> z = {0, 2, 1, 3, 3, 0};  // rows: argmax 1, then 0 (first of the tie)
  std::vector<int32_t> labels = {1, 1};
  EXPECT_EQ(be->count_correct(z.data(), labels.data(), 2, 3), 1);
  EXPECT_EQ(be->sum(z.data(), 6), 9.0);

  const int a = 3, b = 4, inner = 5;
  auto x = random_vector(a * b * inner, 14);
  std::vector<float> y(x.size()), back(x.size());
  be->swap_outer_axes(x.data(), y.data(), a, b, inner);
  for (int i = 0; i < a; ++i)
    for (int j = 0; j < b; ++j)
      for (int q = 0; q < inner; ++q)
        EXPECT_EQ(y[(j * a + i) * inner + q], x[(i * b + j) * inner + q]);
  be->swap_outer_axes(y.data(), back.data(), b, a, inner);
  EXPECT_EQ(back, x);
}

TEST_F(KernelsTest, SgdMatchesReference) {
  for (bool nesterov : {false, true}) {
    const int n = 100;
    auto p = random_vector(n, 15), buf = std::vector<float>(n, 0);
    std::vector<double> rp(p.begin(), p.end()), rbuf(n, 0);
    SgdParams hp{.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f, .nesterov = nesterov};
    for (int t = 0; t < 3; ++t) {
      auto g = random_vector(n, 16 + t);
      be->sgd_update(p.data(), g.data(), buf.data(), n, hp);
      for (int i = 0; i < n; ++i) {
        double d = g[i] + 0.01 * rp[i];
        rbuf[i] = 0.9 * rbuf[i] + d;
        d = nesterov ? d + 0.9 * rbuf[i] : rbuf[i];
        rp[i] -= 0.1 * d;
      }
    }
    for (int i = 0; i < n; ++i) EXPECT_NEAR(p[i], rp[i], 1e-5);
  }
  std::vector<float> p = {1}, g = {2};
  be->sgd_update(p.data(), g.data(), nullptr, 1, SgdParams{.lr = 0.5f});
  EXPECT_EQ(p[0], 0.0f);
}

TEST_F(KernelsTest, AdamAndAdamWMatchReference) {
  for (bool decoupled : {false, true}) {
    const int n = 100;
    auto p = random_vector(n, 20);
    std::vector<float> m(n, 0), v(n, 0);
    std::vector<double> rp(p.begin(), p.end()), rm(n, 0), rv(n, 0);
    const double lr = 0.01, b1 = 0.9, b2 = 0.99, eps = 1e-8, wd = 0.1;
    for (int t = 1; t <= 4; ++t) {
      auto g = random_vector(n, 21 + t);
      be->adam_update(p.data(), g.data(), m.data(), v.data(), n,
                      AdamParams{.lr = float(lr),
                                 .beta1 = float(b1),
                                 .beta2 = float(b2),
                                 .eps = float(eps),
                                 .weight_decay = float(wd),
                                 .decoupled = decoupled,
                                 .t = t});
      for (int i = 0; i < n; ++i) {
        double grad = g[i];
        if (decoupled)
          rp[i] -= lr * wd * rp[i];
        else
          grad += wd * rp[i];
        rm[i] = b1 * rm[i] + (1 - b1) * grad;
        rv[i] = b2 * rv[i] + (1 - b2) * grad * grad;
        const double mh = rm[i] / (1 - std::pow(b1, t)), vh = rv[i] / (1 - std::pow(b2, t));
        rp[i] -= lr * mh / (std::sqrt(vh) + eps);
      }
    }
    for (int i = 0; i < n; ++i) EXPECT_NEAR(p[i], rp[i], 1e-5) << "decoupled=" << decoupled;
  }
}

// The engine's bit-for-bit guarantees rest on this: the same inputs give the same bits with 1 and
// 2 threads, for the product shapes of the models (large k included).
TEST(KernelsThreadsTest, ResultsAreBitIdenticalAcrossThreadCounts) {
  ConvShape s{.batch = 16, .in_channels = 32, .out_channels = 64, .height = 14, .width = 14};
  auto x = random_vector(size_t(s.in_channels) * s.batch * s.height * s.width, 30);
  auto w = random_vector(size_t(s.out_channels) * s.col_rows(), 31);
  auto b = random_vector(s.out_channels, 32);
  auto dy = random_vector(size_t(s.out_channels) * s.col_cols(), 33);
  auto a = random_vector(128 * 784, 34), wl = random_vector(256 * 784, 35);
  auto run = [&](int threads) {
    auto be = make_cpu_backend(threads);
    std::vector<float> col(s.col_rows() * s.col_cols()), dcol(col.size()), y(dy.size());
    std::vector<float> dx(x.size()), dw(w.size()), db(b.size()), fc(128 * 256), dwl(wl.size());
    be->conv2d_forward(s, x.data(), w.data(), b.data(), col.data(), y.data());
    be->conv2d_backward(s, x.data(), col.data(), w.data(), dy.data(), dcol.data(), dx.data(),
                        dw.data(), db.data());
    be->gemm(false, true, 128, 256, 784, 1, a.data(), wl.data(), 0, fc.data());
    be->gemm(true, false, 256, 784, 128, 1, fc.data(), a.data(), 0, dwl.data());
    return std::vector<std::vector<float>>{y, dx, dw, db, fc, dwl};
  };
  EXPECT_EQ(run(1), run(2));
}

// ---- Transformer operations ----

TEST_F(KernelsTest, AddAllowsAliasing) {
  const int n = 1000;
  auto a = random_vector(n, 40), b = random_vector(n, 41);
  std::vector<float> y(n);
  be->add(a.data(), b.data(), y.data(), n);
  for (int i = 0; i < n; ++i) EXPECT_EQ(y[i], a[i] + b[i]);
  be->add(a.data(), b.data(), a.data(), n);
  EXPECT_EQ(a, y);
}

// Embedding sums are exact to reproduce: the reference adds in the order kernels.h states.
TEST_F(KernelsTest, EmbeddingForwardAndBackward) {
  const int B = 3, T = 5, C = 7, V = 11;
  std::vector<int32_t> tokens(B * T);
  for (int i = 0; i < B * T; ++i) tokens[i] = i * 4 % 9;  // repeats, and 9 and 10 never occur
  auto wte = random_vector(V * C, 42), wpe = random_vector(T * C, 43);
  std::vector<float> out(B * T * C);
  be->embedding_forward(tokens.data(), wte.data(), wpe.data(), out.data(), B, T, C, V);
  for (int r = 0; r < B * T; ++r)
    for (int c = 0; c < C; ++c)
      EXPECT_EQ(out[r * C + c], wte[tokens[r] * C + c] + wpe[r % T * C + c]) << r << "," << c;

  auto dout = random_vector(B * T * C, 44);
  std::vector<float> dwte(V * C, NAN), dwpe(T * C, NAN);  // overwritten, whatever was there
  be->embedding_backward(tokens.data(), dout.data(), dwte.data(), dwpe.data(), B, T, C, V);
  std::vector<float> ref_wte(V * C, 0), ref_wpe(T * C, 0);
  for (int r = 0; r < B * T; ++r)
    for (int c = 0; c < C; ++c) ref_wte[tokens[r] * C + c] += dout[r * C + c];
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c) ref_wpe[t * C + c] += dout[(b * T + t) * C + c];
  EXPECT_EQ(dwte, ref_wte);
  EXPECT_EQ(dwpe, ref_wpe);

  tokens[7] = V;
  EXPECT_THROW(be->embedding_forward(tokens.data(), wte.data(), wpe.data(), out.data(), B, T, C, V),
               std::invalid_argument);
}

TEST_F(KernelsTest, LayerNormMatchesReferenceAndFiniteDifferences) {
  const int N = 6, C = 10;
  auto x = random_vector(N * C, 45, -1, 3), weight = random_vector(C, 46, 0.5f, 1.5f),
       bias = random_vector(C, 47), probe = random_vector(N * C, 48, -100, 100);
  std::vector<float> out(N * C), mean(N), rstd(N);
  be->layernorm_forward(x.data(), weight.data(), bias.data(), out.data(), mean.data(), rstd.data(),
                        N, C);
  for (int r = 0; r < N; ++r) {
    double m = 0, var = 0;
    for (int c = 0; c < C; ++c) m += x[r * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) var += (x[r * C + c] - m) * (x[r * C + c] - m);
    const double s = 1 / std::sqrt(var / C + 1e-5);
    EXPECT_NEAR(mean[r], m, 1e-6);
    EXPECT_NEAR(rstd[r], s, 1e-5 * s);
    for (int c = 0; c < C; ++c)
      EXPECT_NEAR(out[r * C + c], (x[r * C + c] - m) * s * weight[c] + bias[c], 1e-5);
  }

  // Loss = sum(out * probe), so dout = probe (large, so that check_gradient's tolerance is
  // relative). dx accumulates onto what is there.
  const auto dx0 = random_vector(N * C, 49);
  std::vector<float> dx = dx0, dweight(C, NAN), dbias(C, NAN);
  be->layernorm_backward(probe.data(), x.data(), weight.data(), mean.data(), rstd.data(), dx.data(),
                         dweight.data(), dbias.data(), N, C);
  std::vector<float> dx_added(N * C);
  for (int i = 0; i < N * C; ++i) dx_added[i] = dx[i] - dx0[i];
  auto loss = [&] {
    be->layernorm_forward(x.data(), weight.data(), bias.data(), out.data(), mean.data(),
                          rstd.data(), N, C);
    return dot(out, probe);
  };
  check_gradient(x, dx_added, loss, 1e-2f, 2e-3);
  check_gradient(weight, dweight, loss, 1e-2f, 2e-3);
  check_gradient(bias, dbias, loss, 1e-2f, 2e-3);
}

TEST_F(KernelsTest, CausalAttentionMatchesReferenceAndFiniteDifferences) {
  const int B = 2, T = 5, C = 8, NH = 2, hs = C / NH;
  auto qkv = random_vector(B * T * 3 * C, 50), probe = random_vector(B * T * C, 51, -100, 100);
  std::vector<float> out(B * T * C), att(B * NH * T * T);
  be->attention_forward(qkv.data(), out.data(), att.data(), B, T, C, NH);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        std::vector<double> p(T, 0);
        double total = 0;
        for (int u = 0; u <= t; ++u) {
          double s = 0;
          for (int i = 0; i < hs; ++i)
            s += double{qkv[(b * T + t) * 3 * C + h * hs + i]} *
                 qkv[(b * T + u) * 3 * C + C + h * hs + i];
          p[u] = std::exp(s / std::sqrt(double{hs}));
          total += p[u];
        }
        for (int u = 0; u < T; ++u) {
          p[u] /= total;
          EXPECT_NEAR(att[((b * NH + h) * T + t) * T + u], p[u], 1e-6);
          if (u > t) {
            EXPECT_EQ(att[((b * NH + h) * T + t) * T + u], 0.0f);
          }
        }
        for (int i = 0; i < hs; ++i) {
          double o = 0;
          for (int u = 0; u <= t; ++u) o += p[u] * qkv[(b * T + u) * 3 * C + 2 * C + h * hs + i];
          EXPECT_NEAR(out[(b * T + t) * C + h * hs + i], o, 1e-5);
        }
      }

  std::vector<float> dqkv(qkv.size(), NAN), scratch(att.size());
  be->attention_backward(probe.data(), qkv.data(), att.data(), scratch.data(), dqkv.data(), B, T, C,
                         NH);
  auto loss = [&] {
    be->attention_forward(qkv.data(), out.data(), att.data(), B, T, C, NH);
    return dot(out, probe);
  };
  check_gradient(qkv, dqkv, loss, 1e-2f, 2e-3);
}

// The transformer operations at sizes where the pool splits each of them: the same bits for 1, 2
// and 3 threads.
TEST(KernelsThreadsTest, TransformerOperationsAreBitIdenticalAcrossThreadCounts) {
  const int B = 8, T = 64, C = 128, V = 96, NH = 4, N = B * T;
  std::vector<int32_t> tokens(N);
  for (int i = 0; i < N; ++i) tokens[i] = (i * 37 + i / 5) % V;
  auto wte = random_vector(V * C, 60), wpe = random_vector(T * C, 61);
  auto weight = random_vector(C, 62), bias = random_vector(C, 63);
  auto qkv = random_vector(size_t{N} * 3 * C, 64), dy = random_vector(size_t{N} * C, 65);
  auto run = [&](int threads) {
    auto be = make_cpu_backend(threads);
    std::vector<float> emb(N * C), dwte(V * C), dwpe(T * C), sum(N * C);
    be->embedding_forward(tokens.data(), wte.data(), wpe.data(), emb.data(), B, T, C, V);
    be->embedding_backward(tokens.data(), dy.data(), dwte.data(), dwpe.data(), B, T, C, V);
    be->add(emb.data(), dy.data(), sum.data(), N * C);
    std::vector<float> ln(N * C), mean(N), rstd(N), dx = dy, dw(C), db(C);
    be->layernorm_forward(emb.data(), weight.data(), bias.data(), ln.data(), mean.data(),
                          rstd.data(), N, C);
    be->layernorm_backward(dy.data(), emb.data(), weight.data(), mean.data(), rstd.data(),
                           dx.data(), dw.data(), db.data(), N, C);
    std::vector<float> att(size_t{B} * NH * T * T), out(N * C), scratch(att.size()),
        dqkv(qkv.size());
    be->attention_forward(qkv.data(), out.data(), att.data(), B, T, C, NH);
    be->attention_backward(dy.data(), qkv.data(), att.data(), scratch.data(), dqkv.data(), B, T, C,
                           NH);
    return std::vector<std::vector<float>>{emb, dwte, dwpe, sum, ln,  mean, rstd,
                                           dx,  dw,   db,   att, out, dqkv};
  };
  const auto one = run(1);
  EXPECT_EQ(one, run(2));
  EXPECT_EQ(one, run(3));
}

}  // namespace
}  // namespace hippo::kernels
