// libFuzzer target: the study spec parser (searchers/spec.h) on arbitrary bytes, JSON or not,
// and then the budget check (searchers/budget.h) of what parses, with the master's default limits:
// a huge but valid spec must be refused in little time and memory. A SpecError is the documented
// answer to a bad or too large spec; anything else (another exception, a crash, a sanitizer
// report, a hang, running out of memory) is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "searchers/budget.h"
#include "searchers/field.h"
#include "searchers/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    hippo::StudySpec spec =
        hippo::parse_spec_text(std::string_view(reinterpret_cast<const char*>(data), size));
    hippo::check_budget(spec, hippo::Budget{});
  } catch (const hippo::SpecError&) {
  }
  return 0;
}
