// The training settings that the built-in engine understands: the names a spec may put under
// `fixed` or `hyperparameters` for a built-in model, their types, and their defaults. One table,
// read by the spec parser (to refuse unknown names and wrong types) and by the worker's engine
// (to read the values). External trainers accept any name.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hippo {

enum class SettingType {
  kNumber,   // any finite double; may follow a schedule
  kInteger,  // integral values only (batch_size); piecewise/multistep schedules of integers allowed
  kText,     // one of `choices`; constant over a trial
  kBool,     // true/false; constant over a trial
};

struct SettingInfo {
  std::string_view name;
  SettingType type;
  double min = 0;  // inclusive bounds for numbers and integers
  double max = 0;
  std::vector<std::string_view> choices;  // kText only
  // The value used when a spec gives none; nullopt means the spec must give it.
  std::optional<double> default_number;
  std::optional<std::string_view> default_text;
};

// All built-in settings, in a fixed order.
const std::vector<SettingInfo>& builtin_settings();
// nullptr when `name` is not a built-in setting.
const SettingInfo* find_setting(std::string_view name);

}  // namespace hippo
