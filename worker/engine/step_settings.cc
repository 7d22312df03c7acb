#include "worker/engine/step_settings.h"

#include <cmath>
#include <stdexcept>

#include "stagetree/settings.h"

namespace hippo::worker {
namespace {

// A value of one setting, numeric or text.
struct Value {
  double number = 0;
  std::string text;
};

[[noreturn]] void bad(const SettingInfo& info, const std::string& what) {
  throw std::invalid_argument("setting " + std::string(info.name) + ": " + what);
}

Value from_json(const SettingInfo& info, const nlohmann::json& j) {
  switch (info.type) {
    case SettingType::kText:
      if (!j.is_string()) bad(info, "expected a string, got " + j.dump());
      return {0, j.get<std::string>()};
    case SettingType::kBool:
      if (j.is_boolean()) return {j.get<bool>() ? 1.0 : 0.0, ""};
      break;
    case SettingType::kNumber:
    case SettingType::kInteger:
      break;
  }
  if (!j.is_number()) bad(info, "expected a number, got " + j.dump());
  return {j.get<double>(), ""};
}

Value lookup(const SettingInfo& info, const Hyperparams& hp, const nlohmann::json& fixed,
             int64_t step) {
  const std::string name(info.name);
  if (auto it = hp.find(name); it != hp.end()) {
    const Sequence& seq = it->second;
    if (seq.is_text() != (info.type == SettingType::kText))
      bad(info, seq.is_text() ? "expected numbers, got the text \"" + seq.text_value() + "\""
                              : "expected a text value, got a numeric sequence");
    return seq.is_text() ? Value{0, seq.text_value()} : Value{seq.value_at(step), ""};
  }
  if (fixed.is_object() && fixed.contains(name)) return from_json(info, fixed[name]);
  if (info.default_number) return {*info.default_number, ""};
  if (info.default_text) return {0, std::string(*info.default_text)};
  bad(info, "required but given neither as a hyper-parameter nor as a fixed setting");
}

// The checked value of `name` at `step`.
Value value_at(std::string_view name, const Hyperparams& hp, const nlohmann::json& fixed,
               int64_t step) {
  const SettingInfo& info = *find_setting(name);
  Value v = lookup(info, hp, fixed, step);
  const std::string at = " at step " + std::to_string(step);
  switch (info.type) {
    case SettingType::kText:
      for (std::string_view c : info.choices)
        if (v.text == c) return v;
      bad(info, "unknown value \"" + v.text + "\"" + at);
    case SettingType::kInteger:
      if (v.number != std::floor(v.number)) bad(info, "expected an integer" + at);
      [[fallthrough]];
    case SettingType::kNumber:
    case SettingType::kBool:
      if (!(v.number >= info.min && v.number <= info.max))
        bad(info, std::to_string(v.number) + at + " is outside [" + std::to_string(info.min) +
                      ", " + std::to_string(info.max) + "]");
      if (info.type == SettingType::kBool && v.number != 0 && v.number != 1)
        bad(info, "expected true or false" + at);
      return v;
  }
  return v;
}

}  // namespace

void check_settings(const Hyperparams& hp, const nlohmann::json& fixed) {
  if (!fixed.is_null() && !fixed.is_object())
    throw std::invalid_argument("fixed settings: expected an object, got " + fixed.dump());
  for (const auto& [name, seq] : hp)
    if (!find_setting(name))
      throw std::invalid_argument("hyper-parameter " + name + ": not a setting of the engine");
  if (fixed.is_object())
    for (const auto& [name, value] : fixed.items()) {
      const SettingInfo* info = find_setting(name);
      if (!info) throw std::invalid_argument("fixed." + name + ": not a setting of the engine");
      from_json(*info, value);
    }
  settings_at(hp, fixed, 0);
}

int64_t batch_size_at(const Hyperparams& hp, const nlohmann::json& fixed, int64_t step) {
  return static_cast<int64_t>(value_at("batch_size", hp, fixed, step).number);
}

StepSettings settings_at(const Hyperparams& hp, const nlohmann::json& fixed, int64_t step) {
  auto number = [&](std::string_view name) { return value_at(name, hp, fixed, step).number; };
  auto text = [&](std::string_view name) { return value_at(name, hp, fixed, step).text; };
  StepSettings s;
  s.lr = number("lr");
  s.batch_size = batch_size_at(hp, fixed, step);
  s.optimizer = text("optimizer");
  s.momentum = number("momentum");
  s.nesterov = number("nesterov") != 0;
  s.weight_decay = number("weight_decay");
  s.beta1 = number("beta1");
  s.beta2 = number("beta2");
  s.eps = number("eps");
  s.precision = text("precision");
  return s;
}

}  // namespace hippo::worker
