#include "kernels/blas_env.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace hippo::kernels {

const char* native_blas_core_type() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "SkylakeX";
  if (__builtin_cpu_supports("avx2")) return "Haswell";
  return nullptr;
}

void use_native_blas_kernels(char** argv) {
  const char* core = native_blas_core_type();
  if (std::getenv("OPENBLAS_CORETYPE") || !core) return;
  setenv("OPENBLAS_CORETYPE", core, 1);
  setenv("HIPPO_SET_OPENBLAS_CORETYPE", "1", 1);  // trainers do not inherit it (external_trainer.h)
  execv("/proc/self/exe", argv);
  std::perror("cannot re-execute with OPENBLAS_CORETYPE set; going on with OpenBLAS's choice");
}

}  // namespace hippo::kernels
