// libFuzzer target: the study spec parser (searchers/spec.h) on arbitrary bytes, JSON or not.
// A SpecError is the documented answer to a bad spec; anything else (another exception, a crash,
// a sanitizer report, a hang) is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "searchers/field.h"
#include "searchers/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    hippo::parse_spec_text(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const hippo::SpecError&) {
  }
  return 0;
}
