// How users name a study, one rule for every command, message and page: a study is named by its
// name, or by its id written "#N" (`hippo cancel '#3'`); a text of digits alone ("3") also reads as
// an id. A new study's name is therefore never all digits nor "#" and digits (submit refuses it,
// searchers/spec.cc), so that an id and a name never mean two studies. (A plan written before this
// rule may hold such a name: lookups try the name first, and "#N" always reaches the id.)
//
// Names are at most kMaxStudyName bytes, checked at submit: every message that names a study
// (cancel, resume) takes that many, so that whatever was accepted can be named again.
//
// Header-only: the plan (storage/), the spec's checks (searchers/) and the messages all use it,
// and none of them links another.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace hippo::protocol {

inline constexpr size_t kMaxStudyName = 256;

// The id that `text` names ("#N" or "N", N of 1 to 18 digits), if it names one.
inline std::optional<int64_t> study_id_in(std::string_view text) {
  if (!text.empty() && text.front() == '#') text.remove_prefix(1);
  if (text.empty() || text.size() > 18 || text.find_first_not_of("0123456789") != text.npos)
    return std::nullopt;
  int64_t id = 0;
  for (char c : text) id = id * 10 + (c - '0');
  return id;
}

// Why `name` cannot be a new study's name, "" when it can.
inline std::string study_name_error(std::string_view name) {
  if (name.empty()) return "expected a non-empty name";
  if (name.size() > kMaxStudyName)
    return "a name of " + std::to_string(name.size()) + " bytes; a study's name has at most " +
           std::to_string(kMaxStudyName);
  if (study_id_in(name))
    return "\"" + std::string(name) +
           "\" reads as a study id (\"#N\" or digits name the study with id N): a name needs a "
           "character that is not a digit";
  return "";
}

}  // namespace hippo::protocol
