// The engines of the root keys this worker trains, kept between jobs: building one loads its data
// set and its model, and a worker serves few root keys at a time.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "protocol/message.h"
#include "worker/engine/engine.h"
#include "worker/options.h"

namespace hippo::worker {

// The engine's view of a job's run spec.
RunConfig run_config(const protocol::RunSpec& run);

class EngineCache {
 public:
  explicit EngineCache(const Options& options) : options_(options) {}
  // The engine for a job's run spec, built on first use. std::runtime_error when this worker
  // cannot run it (a pipeline with more stages than its devices), and the engine's own errors
  // (a bad model, unreadable data).
  Engine& engine_for(const protocol::RunSpec& run);

 private:
  const Options& options_;
  std::map<std::string, std::unique_ptr<Engine>> engines_;  // by the run spec's JSON
};

}  // namespace hippo::worker
