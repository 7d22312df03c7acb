#include "worker/engine.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "worker/step_settings.h"

namespace hippo::worker {
namespace {

// Evaluation reads the evaluation prefix in batches of this many samples, in order.
constexpr int kEvalBatch = 128;
constexpr int kClasses = 10;

uint64_t fnv1a(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// The training or evaluation set, checked against the requested prefix length.
std::shared_ptr<const Dataset> load_set(const RunConfig& c, const std::string& split,
                                        int64_t samples, const char* field) {
  if (c.data != "fashion-mnist")
    throw std::invalid_argument("data: unknown data set \"" + c.data +
                                "\" (the engine reads fashion-mnist)");
  std::shared_ptr<const Dataset> set = load_fashion_mnist(c.data_dir, split);
  if (samples < 1 || samples > set->count)
    throw std::invalid_argument(std::string(field) + ": " + std::to_string(samples) +
                                " is not in [1, " + std::to_string(set->count) + "]");
  return set;
}

int64_t opt_state_size(const std::string& optimizer, int64_t params) {
  if (optimizer.empty()) return 0;
  return optimizer == "sgd" ? params : 2 * params;
}

}  // namespace

Engine::Engine(const RunConfig& config, int threads)
    : config_(config),
      config_hash_(fnv1a("hippo-engine/1|" + config.model.dump() + "|" + config.data + "|" +
                         std::to_string(config.train_samples) + "|" +
                         std::to_string(config.eval_samples) + "|" + std::to_string(config.seed))),
      backend_(kernels::make_cpu_backend(threads)),
      train_set_(load_set(config, "train", config.train_samples, "train_samples")),
      eval_set_(load_set(config, "t10k", config.eval_samples, "eval_samples")),
      model_(config.model, 1, train_set_->rows, train_set_->cols, kClasses),
      order_(config.train_samples, config.seed),
      grads_(backend_, model_.param_count()) {}

TrainState Engine::initial_state() const {
  std::vector<float> params(model_.param_count());
  model_.init(config_.seed, params.data());
  TrainState s;
  s.params = kernels::Buffer<float>::from_host(backend_, params.data(), model_.param_count());
  return s;
}

bool Engine::in_my_memory(const kernels::Buffer<float>& b) const {
  return b.backend() && std::string(b.backend()->name()) == backend_->name();
}

void Engine::check_state(const TrainState& s) const {
  if (s.params.size() != model_.param_count() || !in_my_memory(s.params))
    throw std::invalid_argument(
        "state has " + std::to_string(s.params.size()) + " parameters, the model has " +
        std::to_string(model_.param_count()) +
        (s.params.size() == model_.param_count() ? " (but they are in another backend's memory)"
                                                 : ""));
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

void Engine::reserve(int batch) {
  if (batch <= reserved_) return;
  reserved_ = batch;
  const auto& layers = model_.layers();
  // act_offsets_[l] is where layer l's input starts, act_offsets_[l + 1] its output.
  act_offsets_ = {0, int64_t{batch} * model_.input_size()};
  scratch_offsets_ = {0};
  int64_t widest = model_.input_size();
  for (const auto& layer : layers) {
    act_offsets_.push_back(act_offsets_.back() + int64_t{batch} * layer->out_size());
    scratch_offsets_.push_back(scratch_offsets_.back() + layer->scratch_size(batch));
    widest = std::max(widest, layer->out_size());
  }
  activations_ = kernels::Buffer<float>(backend_, act_offsets_.back());
  scratch_ = kernels::Buffer<float>(backend_, scratch_offsets_.back());
  for (auto& d : dact_) d = kernels::Buffer<float>(backend_, int64_t{batch} * widest);
  labels_ = kernels::Buffer<int32_t>(backend_, batch);
  losses_ = kernels::Buffer<float>(backend_, batch);
  host_input_.resize(static_cast<size_t>(batch * model_.input_size()));
  host_labels_.resize(batch);
  indices_.resize(batch);
}

void Engine::load_batch(const Dataset& set, const int32_t* indices, int batch) {
  // Pixels scaled to [0, 1], then standardized with the training set's mean and deviation (as
  // torchvision's usual Normalize((0.2860,), (0.3530,)) for Fashion-MNIST).
  constexpr float kMean = 0.2860f, kInvStd = 1.0f / 0.3530f;
  const int64_t size = set.image_size();
  float* x = host_input_.data();  // [batch, rows * cols]
  for (int b = 0; b < batch; ++b) {
    const uint8_t* pixels = set.pixels.data() + indices[b] * size;
    for (int64_t i = 0; i < size; ++i)
      x[b * size + i] = (pixels[i] * (1.0f / 255.0f) - kMean) * kInvStd;
    host_labels_[b] = set.labels[indices[b]];
  }
  backend_->copy_from_host(input(), x, batch * size * int64_t{sizeof(float)});
  backend_->copy_from_host(labels_.data(), host_labels_.data(), batch * int64_t{sizeof(int32_t)});
}

float* Engine::forward(const float* params, int batch) {
  const auto& layers = model_.layers();
  for (size_t l = 0; l < layers.size(); ++l)
    layers[l]->forward(
        *backend_, batch, params + model_.param_offset(l), activations_.data() + act_offsets_[l],
        activations_.data() + act_offsets_[l + 1], scratch_.data() + scratch_offsets_[l]);
  return activations_.data() + act_offsets_[layers.size()];
}

void Engine::train(TrainState& s, int64_t to, const Hyperparams& hp, const nlohmann::json& fixed,
                   const std::function<bool(const TrainState&)>& after_step) {
  check_settings(hp, fixed);
  check_state(s);
  const kernels::Backend& be = *backend_;
  const auto& layers = model_.layers();
  const int64_t nparams = model_.param_count();
  while (s.step < to) {
    const StepSettings st = settings_at(hp, fixed, s.step);
    if (st.precision != "fp32")
      throw std::invalid_argument("setting precision: the CPU engine trains in fp32, got " +
                                  st.precision);
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
    reserve(batch);
    const int64_t next_position = order_.take(s.data_position, batch, indices_.data());
    load_batch(*train_set_, indices_.data(), batch);

    const float* logits = forward(s.params.data(), batch);
    float* dy = dact_[0].data();  // [batch, classes]: d(mean loss)/d(logits)
    be.softmax_cross_entropy(logits, labels_.data(), batch, kClasses, losses_.data(), dy,
                             1.0f / static_cast<float>(batch));
    for (size_t l = layers.size(); l-- > 0;) {
      float* dx = l > 0 ? dact_[(layers.size() - l) % 2].data() : nullptr;
      layers[l]->backward(
          be, batch, s.params.data() + model_.param_offset(l),
          activations_.data() + act_offsets_[l], activations_.data() + act_offsets_[l + 1], dy, dx,
          grads_.data() + model_.param_offset(l), scratch_.data() + scratch_offsets_[l]);
      dy = dx;
    }

    if (s.optimizer == "sgd") {
      be.sgd_update(s.params.data(), grads_.data(), s.opt_state.data(), nparams,
                    kernels::SgdParams{.lr = float(st.lr),
                                       .momentum = float(st.momentum),
                                       .weight_decay = float(st.weight_decay),
                                       .nesterov = st.nesterov});
    } else {
      be.adam_update(s.params.data(), grads_.data(), s.opt_state.data(),
                     s.opt_state.data() + nparams, nparams,
                     kernels::AdamParams{.lr = float(st.lr),
                                         .beta1 = float(st.beta1),
                                         .beta2 = float(st.beta2),
                                         .eps = float(st.eps),
                                         .weight_decay = float(st.weight_decay),
                                         .decoupled = s.optimizer == "adamw",
                                         .t = s.step + 1});
    }
    s.data_position = next_position;
    ++s.step;
    if (after_step && !after_step(s)) break;
  }
}

Metrics Engine::evaluate(const TrainState& s) {
  check_state(s);
  reserve(kEvalBatch);
  double loss = 0;
  int64_t correct = 0;
  for (int64_t start = 0; start < config_.eval_samples; start += kEvalBatch) {
    const int batch = static_cast<int>(std::min<int64_t>(kEvalBatch, config_.eval_samples - start));
    for (int b = 0; b < batch; ++b) indices_[b] = static_cast<int32_t>(start + b);
    load_batch(*eval_set_, indices_.data(), batch);
    const float* logits = forward(s.params.data(), batch);
    backend_->softmax_cross_entropy(logits, labels_.data(), batch, kClasses, losses_.data(),
                                    nullptr, 0);
    loss += backend_->sum(losses_.data(), batch);
    correct += backend_->count_correct(logits, labels_.data(), batch, kClasses);
  }
  const double n = static_cast<double>(config_.eval_samples);
  return {static_cast<double>(correct) / n, loss / n};
}

}  // namespace hippo::worker
