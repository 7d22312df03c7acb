// What the searcher tests share: the docs/spec.md example spec, and the error a spec gets.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "searchers/spec.h"

namespace hippo::testing {

// examples/fmnist-mlp-lr-decay.json as JSON.
inline nlohmann::json example_spec() {
  std::ifstream in(HIPPO_SOURCE_DIR "/examples/fmnist-mlp-lr-decay.json");
  return nlohmann::json::parse(in);
}

// The SpecError message of parsing `spec`, or "accepted".
inline std::string spec_error(const nlohmann::json& spec) {
  try {
    parse_spec(spec);
  } catch (const SpecError& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace hippo::testing
