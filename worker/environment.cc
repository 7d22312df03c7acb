#include "worker/environment.h"

#include "kernels/kernels.h"
#include "protocol/version.h"

namespace hippo::worker {

WorkerEnvironment worker_environment(const std::string& device, int threads) {
  const std::string hippo = std::string("hippo ") + kVersion;
  const std::string thread_count =
      std::to_string(threads) + (threads == 1 ? " thread" : " threads");
  if (device.rfind("cuda:", 0) != 0) return {"cpu, " + hippo, "cpu, " + thread_count};
  const int index = std::stoi(device.substr(5));  // the worker checked the name (options.h)
  const bool own_convolutions = device.find(":im2col") != std::string::npos;
  return {kernels::cuda_device_environment(index) + ", " + hippo +
              (own_convolutions ? ", im2col convolutions" : ""),
          kernels::cuda_device_model(index) + ", " + thread_count};
}

}  // namespace hippo::worker
