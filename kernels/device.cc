// make_backend: the device name of a worker or benchmark ("cpu", "cuda:N") to a backend; the
// Backend's default copy between backends. In a build without CUDA (HIPPO_HAVE_CUDA undefined),
// also the CUDA entry points: no devices, and a clear error for anyone who asks for one.
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/kernels.h"

namespace hippo::kernels {

std::optional<CudaDeviceName> parse_cuda_device(const std::string& device) {
  const std::string prefix = "cuda:", im2col = ":im2col";
  if (device.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  std::string index = device.substr(prefix.size());
  const bool own_convolutions =
      index.size() > im2col.size() &&
      index.compare(index.size() - im2col.size(), im2col.size(), im2col) == 0;
  if (own_convolutions) index.resize(index.size() - im2col.size());
  if (index.empty() || index.size() > 4 ||
      index.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return CudaDeviceName{std::stoi(index),
                        own_convolutions ? CudaConvolution::kIm2col : CudaConvolution::kCudnn};
}

std::unique_ptr<Backend> make_backend(const std::string& device, int threads) {
  if (device == "cpu") return make_cpu_backend(threads);
  for (const char* isa : {"avx512", "avx2", "portable"})
    if (device == std::string("cpu:") + isa) return make_cpu_backend(threads, isa);
  const std::optional<CudaDeviceName> cuda = parse_cuda_device(device);
  if (!cuda)
    throw std::invalid_argument(
        "device \"" + device +
        "\": expected cpu or cuda:N (N = 0, 1, ... a CUDA device; cuda:N:im2col for hippo's own "
        "fp32 convolutions), or cpu:avx512, cpu:avx2, cpu:portable (the CPU kernels' "
        "instruction set)");
  return make_cuda_backend(cuda->index, Stream::kDefault, cuda->conv);
}

void Backend::copy_from(const Backend& src_backend, void* dst, const void* src,
                        int64_t bytes) const {
  if (bytes <= 0) return;
  if (std::strcmp(name(), src_backend.name()) == 0) {  // one memory
    wait_for(src_backend);
    copy(dst, src, bytes);
    return;
  }
  std::vector<unsigned char> host(static_cast<size_t>(bytes));
  src_backend.copy_to_host(host.data(), src, bytes);  // waits for src_backend's work
  copy_from_host(dst, host.data(), bytes);
}

#ifndef HIPPO_HAVE_CUDA
int cuda_device_count() {
  return 0;
}

std::string cuda_devices_unseen_reason() {
  return "this hippo was built without CUDA (nvcc was not found when it was configured, or "
         "HIPPO_CUDA=OFF)";
}

std::string cuda_device_model(int device) {
  throw std::invalid_argument("cuda:" + std::to_string(device) +
                              " requested, but this hippo was built without CUDA");
}

std::string cuda_device_environment(int device) {
  return cuda_device_model(device);  // throws
}

std::unique_ptr<Backend> make_cuda_backend(int device, Stream, CudaConvolution) {
  throw std::invalid_argument("cuda:" + std::to_string(device) +
                              " requested, but this hippo was built without CUDA (nvcc was not "
                              "found when it was configured, or HIPPO_CUDA=OFF)");
}
#endif

}  // namespace hippo::kernels
