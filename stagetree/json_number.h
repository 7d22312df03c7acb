// A number in JSON that may be NaN or infinite (a diverged trial's metric, the worst value a
// searcher sees): JSON has neither, so they are written as the strings "nan", "inf" and "-inf".
// One rule for the search plan's records and the searchers' saved states.
#pragma once

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

namespace hippo {

inline nlohmann::json json_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

// The number `j` holds (as json_number writes it); nullopt when it holds none.
inline std::optional<double> number_of_json(const nlohmann::json& j) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (j.is_number()) return j.get<double>();
  if (j == "inf") return kInf;
  if (j == "-inf") return -kInf;
  if (j == "nan") return std::numeric_limits<double>::quiet_NaN();
  return std::nullopt;
}

}  // namespace hippo
