// The state of a training run between steps: everything needed to continue it bit for bit.
// A fork is a copy of a TrainState (one copy per buffer, in the engine backend's memory: on a GPU
// device to device); a checkpoint is its serialization (checkpoint.h).
#pragma once

#include <cstdint>
#include <string>

#include "kernels/buffer.h"

namespace hippo::worker {

struct TrainState {
  int64_t step = 0;           // steps done
  int64_t data_position = 0;  // in samples, as data.h defines it
  // Draws made by stochastic layers. The built-in models have none (initialization and the data
  // order are keyed by index and epoch), so it stays 0; it is saved so a layer with dropout or
  // augmentation can continue its stream exactly.
  uint64_t rng_counter = 0;
  kernels::Buffer<float> params;  // [param_count], in the backend's memory
  // The optimizer that made opt_state ("sgd", "adam" or "adamw"; empty before the first step),
  // and the state itself: sgd: momentum buffer [param_count]; adam/adamw: m then v,
  // [2 * param_count]. The optimizer cannot change once training has begun.
  std::string optimizer;
  kernels::Buffer<float> opt_state;

  bool operator==(const TrainState&) const = default;  // bit for bit
};

// One step's update by the optimizer that made opt_state, with its settings at that step (the
// engine's step loop, engine.cc): sgd's, or adam's (adamw: decoupled weight decay).
struct OptimizerUpdate {
  bool adam = false;
  kernels::SgdParams sgd;
  kernels::AdamParams adam_params;
};

}  // namespace hippo::worker
