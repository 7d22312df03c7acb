// The values of the built-in training settings (stagetree/settings.h) at one step: from the
// trial's sequences if it has one for the name, else from the study's fixed settings, else the
// table's default.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "stagetree/sequence.h"

namespace hippo::worker {

struct StepSettings {
  double lr = 0;
  int64_t batch_size = 0;
  std::string optimizer;  // sgd | adam | adamw
  double momentum = 0;
  bool nesterov = false;
  double weight_decay = 0, beta1 = 0, beta2 = 0, eps = 0;
  std::string precision;  // fp32 | bf16
};

// Throws std::invalid_argument naming the setting if a name is not a built-in setting, a fixed
// value has the wrong type, or a required setting (lr, batch_size) is given nowhere.
void check_settings(const Hyperparams& hp, const nlohmann::json& fixed);
// The values at `step`; throws std::invalid_argument naming the setting and the step when a value
// is out of its range or of the wrong kind (e.g. batch_size 12.5).
StepSettings settings_at(const Hyperparams& hp, const nlohmann::json& fixed, int64_t step);
// settings_at(...).batch_size alone (checking a checkpoint's data position reads every step's).
int64_t batch_size_at(const Hyperparams& hp, const nlohmann::json& fixed, int64_t step);

}  // namespace hippo::worker
