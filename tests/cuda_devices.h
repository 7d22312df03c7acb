// How a GPU test meets a machine with fewer CUDA devices than it needs. Everywhere it skips and
// says why (CI has no GPU). Under scripts/gpu-check on a machine whose nvidia-smi sees a GPU
// (HIPPO_GPU_REQUIRED=1), a test that needs one device and sees none fails instead, with the CUDA
// runtime's reason: a GPU check whose tests all skipped would otherwise pass. A test that needs
// two devices still skips on a one-GPU machine.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/kernels.h"

namespace hippo::testing {

inline bool gpu_required() {
  const char* value = std::getenv("HIPPO_GPU_REQUIRED");
  return value != nullptr && std::strcmp(value, "1") == 0;
}

inline std::string devices_missing(int need, int have) {
  std::string why = "needs " + std::to_string(need) + " CUDA device" + (need == 1 ? "" : "s") +
                    ", this process sees " + std::to_string(have);
  if (have == 0) why += " (" + kernels::cuda_devices_unseen_reason() + ")";
  return why;
}

}  // namespace hippo::testing

// In a test body or SetUp: skip (or fail, see above) unless `need` CUDA devices are seen.
#define HIPPO_NEED_CUDA_DEVICES(need)                                                    \
  do {                                                                                   \
    const int have_devices_ = ::hippo::kernels::cuda_device_count();                     \
    if (have_devices_ < (need)) {                                                        \
      const std::string why_ = ::hippo::testing::devices_missing((need), have_devices_); \
      if (have_devices_ == 0 && ::hippo::testing::gpu_required())                        \
        FAIL() << why_ << ", and HIPPO_GPU_REQUIRED=1 says this machine has a GPU";      \
      GTEST_SKIP() << why_;                                                              \
    }                                                                                    \
  } while (0)
