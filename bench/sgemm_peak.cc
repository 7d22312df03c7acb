// The machine's fp32 matrix-product peak, for the roofline of bench/engine_vs_pytorch.sh
// (bench/README.md, "How we measure"): a large single-precision product C[n, n] = A[n, n] B[n, n],
// with 1 and with T threads, through every library on this machine the engine could use: OpenBLAS
// (the system's, under this process's OPENBLAS_CORETYPE), oneDNN (dnnl_sgemm, when built with it)
// and hippo's own kernels (the CPU backend's gemm). Best of --reps timed runs after one untimed
// one. Prints one JSON line:
//   {"n": 2048, "threads": [1, 2], "gflops": {"openblas": [106.1, 205.3], "onednn": [...],
//    "hippo": [...]}, "peak": [214.6, 420.2], "peak_library": ["onednn", "onednn"],
//    "hippo_isa": "avx512"}
#include <cblas.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/cpu_gemm.h"
#include "kernels/kernels.h"

#ifdef HIPPO_HAVE_ONEDNN
#include <dnnl.h>
#include <omp.h>
#endif

namespace {

// GFLOP/s of the best of `reps` runs of fn (after one untimed run), for 2 n^3 flops.
double gflops(int n, int reps, const std::function<void()>& fn) {
  fn();
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return 2.0 * n * n * n / best / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  int n = 2048, max_threads = 2, reps = 5;
  CLI::App app{"fp32 matrix-product peak of this machine"};
  app.add_option("--n", n, "matrix size")->check(CLI::Range(64, 8192));
  app.add_option("--threads", max_threads, "also measure with this many threads")
      ->check(CLI::Range(1, 1024));
  app.add_option("--reps", reps, "timed runs per measurement")->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);

  std::vector<float> a(size_t(n) * n), b(a.size()), c(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = float(i % 17) / 17.0f - 0.5f;
    b[i] = float(i % 13) / 13.0f - 0.5f;
  }
  std::vector<int> counts = {1};
  if (max_threads > 1) counts.push_back(max_threads);
  nlohmann::json out = {{"n", n}, {"threads", counts}};
  std::map<std::string, std::vector<double>> results;
  for (int threads : counts) {
    openblas_set_num_threads(threads);
    results["openblas"].push_back(gflops(n, reps, [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(),
                  n, 0.0f, c.data(), n);
    }));
#ifdef HIPPO_HAVE_ONEDNN
    omp_set_num_threads(threads);
    results["onednn"].push_back(gflops(n, reps, [&] {
      dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    }));
#endif
    auto backend = hippo::kernels::make_cpu_backend(threads);
    results["hippo"].push_back(gflops(n, reps, [&] {
      backend->gemm(false, false, n, n, n, 1.0f, a.data(), b.data(), 0.0f, c.data());
    }));
  }
  std::vector<double> peak(counts.size(), 0);
  std::vector<std::string> peak_library(counts.size());
  for (const auto& [library, values] : results) {
    out["gflops"][library] = values;
    for (size_t i = 0; i < values.size(); ++i)
      if (values[i] > peak[i]) {
        peak[i] = values[i];
        peak_library[i] = library;
      }
  }
  out["peak"] = peak;
  out["peak_library"] = peak_library;
  out["hippo_isa"] = hippo::kernels::cpu::isa_name(hippo::kernels::cpu::best_isa());
  std::cout << out.dump() << std::endl;
}
