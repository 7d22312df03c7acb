#include "worker/engine/network.h"

namespace hippo::worker {

std::unique_ptr<Network> make_network(const RunConfig& config,
                                      std::shared_ptr<const kernels::Backend> backend) {
  if (config.model.is_object() && config.model.value("type", "") == "gpt")
    return make_gpt_network(config, std::move(backend));
  return make_image_network(config, std::move(backend));
}

}  // namespace hippo::worker
