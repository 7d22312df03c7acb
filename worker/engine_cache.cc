#include "worker/engine_cache.h"

#include <stdexcept>

namespace hippo::worker {

RunConfig run_config(const protocol::RunSpec& run) {
  RunConfig config;
  config.model = run.model;
  config.data = run.data;
  config.tokenizer = run.data_fields.value("tokenizer", "");  // the spec checked it
  config.train_samples = run.train_samples;
  config.eval_samples = run.eval_samples;
  config.seed = run.seed;
  config.microbatches = run.microbatches;
  config.pipeline_stages = run.pipeline_stages;
  config.pipeline_schedule = run.pipeline_schedule;
  config.pipeline_chunks = run.pipeline_chunks;
  config.pipeline_vocab_parallel = run.pipeline_vocab_parallel;
  return config;
}

Engine& EngineCache::engine_for(const protocol::RunSpec& run) {
  if (run.pipeline_stages > options_.device_count)
    throw std::runtime_error("the job's pipeline has " + std::to_string(run.pipeline_stages) +
                             " stages, this worker has " + std::to_string(options_.device_count) +
                             " devices (--devices " + options_.devices + ")");
  // Everything but the fixed settings, which train() takes at each call.
  protocol::json key = protocol::to_json(run);
  key.erase("fixed");
  auto it = engines_.find(key.dump());
  if (it == engines_.end()) {
    if (engines_.size() >= 4) engines_.clear();  // a worker serves few root keys at a time
    RunConfig config = run_config(run);
    config.pipeline_devices = options_.devices;  // the engine places a pipeline's stages on them
    it = engines_
             .emplace(key.dump(),
                      std::make_unique<Engine>(config, options_.threads, options_.device))
             .first;
  }
  return *it->second;
}

}  // namespace hippo::worker
