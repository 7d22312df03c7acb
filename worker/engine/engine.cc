#include "worker/engine/engine.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "stagetree/hash.h"
#include "worker/engine/device_group.h"
#include "worker/engine/network.h"
#include "worker/engine/step_settings.h"

namespace hippo::worker {
namespace {

// The device that holds the state: a pipelined config's group's first device, else `device`.
std::string state_device(const RunConfig& config, const std::string& device) {
  const bool pipelined = config.pipeline_stages > 1 || config.pipeline_chunks > 1;
  return pipelined && !config.pipeline_devices.empty()
             ? DeviceGroup::parse(config.pipeline_devices).home()
             : device;
}

int64_t opt_state_size(const std::string& optimizer, int64_t params) {
  if (optimizer.empty()) return 0;
  return optimizer == "sgd" ? params : 2 * params;
}

}  // namespace

Engine::Engine(const RunConfig& config, int threads, const std::string& device)
    : config_(config),
      config_hash_(
          fnv1a("hippo-engine/1|" + config.model.dump() + "|" + config.data + "|" +
                std::to_string(config.train_samples) + "|" + std::to_string(config.eval_samples) +
                "|" + std::to_string(config.seed) +
                (config.microbatches == 1 ? "" : "|m" + std::to_string(config.microbatches)) +
                (config.tokenizer.empty() ? "" : "|t" + config.tokenizer))),
      backend_(kernels::make_backend(state_device(config, device), threads)),
      network_(make_network(config, backend_)),
      order_(config.train_samples, config.seed) {
  if (config.microbatches < 1)
    throw std::invalid_argument("microbatches: " + std::to_string(config.microbatches) +
                                " is not >= 1");
}

Engine::~Engine() = default;

void Engine::set_threads(int threads) {
  if (config_.pipeline_stages <= 1) backend_->set_threads(threads);
}

int64_t Engine::param_count() const {
  return network_->param_count();
}

std::vector<int64_t> Engine::stage_peak_bytes() const {
  return network_->stage_peak_bytes();
}

TrainState Engine::initial_state() const {
  std::vector<float> params(param_count());
  network_->init(config_.seed, params.data());
  TrainState s;
  s.params = kernels::Buffer<float>::from_host(backend_, params.data(), param_count());
  return s;
}

CheckpointShape Engine::checkpoint_shape(int64_t step, const Hyperparams& hp,
                                         const nlohmann::json& fixed) const {
  if (step < 0) throw std::invalid_argument("step " + std::to_string(step) + " is negative");
  check_settings(hp, fixed);
  CheckpointShape shape;
  shape.config_hash = config_hash_;
  shape.step = step;
  for (int64_t i = 0; i < step; ++i)
    shape.data_position =
        next_position(config_.train_samples, shape.data_position, batch_size_at(hp, fixed, i));
  shape.rng_counter = 0;  // the built-in models draw no random numbers while training
  shape.optimizer = step == 0 ? "" : settings_at(hp, fixed, 0).optimizer;
  shape.param_count = param_count();
  shape.opt_state_count = opt_state_size(shape.optimizer, shape.param_count);
  return shape;
}

bool Engine::in_my_memory(const kernels::Buffer<float>& b) const {
  return b.backend() && std::string(b.backend()->name()) == backend_->name();
}

void Engine::check_state(const TrainState& s) const {
  if (s.params.size() != param_count() || !in_my_memory(s.params))
    throw std::invalid_argument(
        "state has " + std::to_string(s.params.size()) + " parameters, the model has " +
        std::to_string(param_count()) +
        (s.params.size() == param_count() ? " (but they are in another backend's memory)" : ""));
  if (s.step < 0 || (s.step > 0 && s.optimizer.empty()))
    throw std::invalid_argument("state at step " + std::to_string(s.step) +
                                " has no optimizer state");
  if (!s.optimizer.empty() && s.optimizer != "sgd" && s.optimizer != "adam" &&
      s.optimizer != "adamw")
    throw std::invalid_argument("state has an unknown optimizer \"" + s.optimizer + "\"");
  if (s.opt_state.size() != opt_state_size(s.optimizer, param_count()) ||
      (!s.opt_state.empty() && !in_my_memory(s.opt_state)))
    throw std::invalid_argument("state's optimizer state has " +
                                std::to_string(s.opt_state.size()) + " values, expected " +
                                std::to_string(opt_state_size(s.optimizer, param_count())) +
                                " for optimizer \"" + s.optimizer + "\"");
}

const TrainState& StepDone::state() const {
  if (holder_ && !assembled_) {
    holder_->assemble(s_);
    assembled_ = true;
  }
  return s_;
}

void Engine::train(TrainState& s, int64_t to, const Hyperparams& hp, const nlohmann::json& fixed,
                   const std::function<bool(const StepDone&)>& after_step) {
  check_settings(hp, fixed);
  check_state(s);
  try {
    train_steps(s, to, hp, fixed, after_step);
  } catch (...) {
    if (network_->holds_state()) {
      // Where a failed update lost the state, s stays without it (check_state refuses it) and
      // the step's error is the one reported.
      try {
        network_->assemble(s);
      } catch (...) {
      }
      network_->release();
    }
    throw;
  }
  if (network_->holds_state()) {
    network_->assemble(s);
    network_->release();
  }
}

void Engine::train_steps(TrainState& s, int64_t to, const Hyperparams& hp,
                         const nlohmann::json& fixed,
                         const std::function<bool(const StepDone&)>& after_step) {
  const kernels::Backend& be = *backend_;
  const int64_t nparams = param_count();
  while (s.step < to) {
    const StepSettings st = settings_at(hp, fixed, s.step);
    if (st.batch_size % config_.microbatches != 0)
      throw std::invalid_argument("setting batch_size: " + std::to_string(st.batch_size) +
                                  " at step " + std::to_string(s.step) + " is not a multiple of " +
                                  std::to_string(config_.microbatches) + " micro-batches");
    // bf16: the products' operands in bf16, everything else fp32 (the CPU backend refuses it).
    const kernels::Precision precision =
        st.precision == "bf16" ? kernels::Precision::kBf16 : kernels::Precision::kFp32;
    be.set_precision(precision);
    network_->set_precision(precision);
    if (s.optimizer.empty()) {
      s.optimizer = st.optimizer;
      s.opt_state = kernels::Buffer<float>(backend_, opt_state_size(st.optimizer, nparams));
    } else if (s.optimizer != st.optimizer) {
      throw std::invalid_argument("setting optimizer: step " + std::to_string(s.step) +
                                  " asks for " + st.optimizer + " but the state was trained with " +
                                  s.optimizer + "; the optimizer cannot change during training");
    }
    if (st.batch_size > config_.train_samples)
      throw std::invalid_argument("setting batch_size: " + std::to_string(st.batch_size) +
                                  " at step " + std::to_string(s.step) + " exceeds train_samples " +
                                  std::to_string(config_.train_samples));
    const int batch = static_cast<int>(st.batch_size);
    indices_.resize(batch);
    const int64_t next_position = order_.take(s.data_position, batch, indices_.data());
    if (s.step + 1 < to) prefetch(hp, fixed, s.step + 1, next_position);
    OptimizerUpdate update;
    if (s.optimizer == "sgd") {
      update.sgd = {.lr = float(st.lr),
                    .momentum = float(st.momentum),
                    .weight_decay = float(st.weight_decay),
                    .nesterov = st.nesterov};
    } else {
      update.adam = true;
      update.adam_params = {.lr = float(st.lr),
                            .beta1 = float(st.beta1),
                            .beta2 = float(st.beta2),
                            .eps = float(st.eps),
                            .weight_decay = float(st.weight_decay),
                            .decoupled = s.optimizer == "adamw",
                            .t = s.step + 1};
    }
    // A network whose state lives in buffers of its own (a pipeline's stages) takes the whole
    // step, taking s's parameters and optimizer state at the first step of this call.
    if (!network_->train_step(s, !network_->holds_state(), indices_.data(), batch,
                              config_.microbatches, update)) {
      // The gradient goes into grads_, sized at the first such step.
      if (grads_.empty()) grads_ = kernels::Buffer<float>(backend_, network_->grad_count());
      if (!update.adam) {
        // One micro-batch: the network may take the step layer by layer (the same bits).
        if (config_.microbatches > 1 ||
            !network_->sgd_step(s.params.data(), indices_.data(), batch, grads_.data(),
                                s.opt_state.data(), update.sgd)) {
          network_->gradients(s.params.data(), indices_.data(), batch, config_.microbatches,
                              grads_.data());
          be.sgd_update(s.params.data(), grads_.data(), s.opt_state.data(), nparams, update.sgd);
        }
      } else {
        network_->gradients(s.params.data(), indices_.data(), batch, config_.microbatches,
                            grads_.data());
        be.adam_update(s.params.data(), grads_.data(), s.opt_state.data(),
                       s.opt_state.data() + nparams, nparams, update.adam_params);
      }
    }
    s.data_position = next_position;
    ++s.step;
    if (!after_step) continue;
    const StepDone done(s, network_->holds_state() ? network_.get() : nullptr);
    const bool go_on = after_step(done);
    if (done.assembled_) {  // the stages hold the state still: no copy of it goes stale
      s.params = {};
      s.opt_state = {};
    }
    if (!go_on) break;
  }
}

void Engine::prefetch(const Hyperparams& hp, const nlohmann::json& fixed, int64_t step,
                      int64_t position) {
  int64_t batch = 0;
  try {
    batch = settings_at(hp, fixed, step).batch_size;
  } catch (const std::invalid_argument&) {  // reported when that step runs
    return;
  }
  if (batch < 1 || batch > config_.train_samples) return;
  next_indices_.resize(static_cast<size_t>(batch));
  order_.take(position, batch, next_indices_.data());
  network_->prefetch(next_indices_.data(), static_cast<int>(batch));
}

Metrics Engine::evaluate(const TrainState& s) {
  check_state(s);
  backend_->set_precision(kernels::Precision::kFp32);  // metrics do not depend on the training's
  Metrics m = network_->evaluate(s.params.data());
  // A model that diverged (its loss NaN or infinite: its outputs are) has no accuracy: the
  // argmax of NaN logits names some class, and would read as a poor model, not a diverged one.
  if (!std::isfinite(m.loss)) m.accuracy = std::nan("");
  return m;
}

}  // namespace hippo::worker
