#include "stagetree/settings.h"

#include <limits>

namespace hippo {

const std::vector<SettingInfo>& builtin_settings() {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  static const std::vector<SettingInfo> table = {
      {"lr", SettingType::kNumber, 0, kInf, {}, std::nullopt, std::nullopt},
      {"batch_size", SettingType::kInteger, 1, 1 << 20, {}, std::nullopt, std::nullopt},
      {"optimizer", SettingType::kText, 0, 0, {"sgd", "adam", "adamw"}, std::nullopt, "sgd"},
      {"momentum", SettingType::kNumber, 0, 1, {}, 0.0, std::nullopt},
      {"nesterov", SettingType::kBool, 0, 1, {}, 0.0, std::nullopt},
      {"weight_decay", SettingType::kNumber, 0, kInf, {}, 0.0, std::nullopt},
      {"beta1", SettingType::kNumber, 0, 1, {}, 0.9, std::nullopt},
      {"beta2", SettingType::kNumber, 0, 1, {}, 0.999, std::nullopt},
      {"eps", SettingType::kNumber, 0, kInf, {}, 1e-8, std::nullopt},
      {"precision", SettingType::kText, 0, 0, {"fp32", "bf16"}, std::nullopt, "fp32"},
  };
  return table;
}

const SettingInfo* find_setting(std::string_view name) {
  for (const SettingInfo& s : builtin_settings())
    if (s.name == name) return &s;
  return nullptr;
}

}  // namespace hippo
