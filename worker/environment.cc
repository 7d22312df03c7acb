#include "worker/environment.h"

#include "kernels/kernels.h"
#include "protocol/version.h"

namespace hippo::worker {

WorkerEnvironment worker_environment(const std::string& device, int threads) {
  const std::string hippo = std::string("hippo ") + kVersion;
  const std::string thread_count =
      std::to_string(threads) + (threads == 1 ? " thread" : " threads");
  // The worker checked the name (kernels::make_backend): anything but a CUDA device is a CPU.
  const std::optional<kernels::CudaDeviceName> cuda = kernels::parse_cuda_device(device);
  if (!cuda) return {"cpu, " + hippo, "cpu, " + thread_count};
  const bool own_convolutions = cuda->conv == kernels::CudaConvolution::kIm2col;
  return {kernels::cuda_device_environment(cuda->index) + ", " + hippo +
              (own_convolutions ? ", im2col convolutions" : ""),
          kernels::cuda_device_model(cuda->index) + ", " + thread_count};
}

}  // namespace hippo::worker
