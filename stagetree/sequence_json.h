// The wire and storage format of sequences and hyper-parameters (JSON). A numeric sequence is
//   {"segments": [{"kind": "constant", "start": 0, "end": 100, "v0": 0.1},
//                 {"kind": "cosine", "start": 100, "end": 200, "v0": 0.1, "v1": 0.001},
//                 {"kind": "exponential", "start": 200, "v0": 0.1, "gamma": 0.5, "period": 10}]}
// ("linear" and the decays "linear-decay", "cosine-decay", "1-sqrt-decay" take v0 and v1 like
// "cosine"; "end" is left out for a segment that
// never ends), a text sequence is {"text": "adam"}, and Hyperparams is an object name -> sequence.
// Doubles round-trip bit for bit. Decoding checks everything and throws std::invalid_argument
// naming the offending field; it never trusts its input.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

#include "stagetree/sequence.h"

namespace hippo {

nlohmann::json to_json(const Sequence& seq);
Sequence sequence_from_json(const nlohmann::json& j);

nlohmann::json to_json(const Hyperparams& hyperparams);
Hyperparams hyperparams_from_json(const nlohmann::json& j);

// The byte offset in `text` where '[' and '{' (outside strings) nest deeper than max_depth, or
// std::string_view::npos. Untrusted JSON text is checked with it before it is parsed, so the
// recursive parser never goes that deep.
size_t json_nesting_beyond(std::string_view text, int max_depth);

}  // namespace hippo
