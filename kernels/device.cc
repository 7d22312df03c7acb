// make_backend: the device name of a worker or benchmark ("cpu", "cuda:N") to a backend. In a
// build without CUDA (HIPPO_HAVE_CUDA undefined), also the CUDA entry points: no devices, and a
// clear error for anyone who asks for one.
#include <stdexcept>
#include <string>

#include "kernels/kernels.h"

namespace hippo::kernels {

std::unique_ptr<Backend> make_backend(const std::string& device, int threads) {
  if (device == "cpu") return make_cpu_backend(threads);
  for (const char* isa : {"avx512", "avx2", "portable"})
    if (device == std::string("cpu:") + isa) return make_cpu_backend(threads, isa);
  const std::string prefix = "cuda:";
  const std::string index =
      device.substr(0, prefix.size()) == prefix ? device.substr(prefix.size()) : std::string();
  if (index.empty() || index.size() > 4 ||
      index.find_first_not_of("0123456789") != std::string::npos)
    throw std::invalid_argument(
        "device \"" + device +
        "\": expected cpu or cuda:N (N = 0, 1, ... a CUDA device), or cpu:avx512, "
        "cpu:avx2, cpu:portable (the CPU kernels' instruction set)");
  return make_cuda_backend(std::stoi(index));
}

#ifndef HIPPO_HAVE_CUDA
int cuda_device_count() {
  return 0;
}

std::unique_ptr<Backend> make_cuda_backend(int device) {
  throw std::invalid_argument("cuda:" + std::to_string(device) +
                              " requested, but this hippo was built without CUDA (nvcc was not "
                              "found when it was configured, or HIPPO_CUDA=OFF)");
}
#endif

}  // namespace hippo::kernels
