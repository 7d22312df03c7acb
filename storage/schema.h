// The search plan's schema as an ordered list of migration steps. Step i (from 0) takes a file
// from version i to version i + 1 (PRAGMA user_version); SearchPlan::open applies the missing
// steps, each in its own transaction. The rule: append a step, never edit or reorder an old one,
// because files already written at an old version are migrated by replaying exactly these steps.
#pragma once

#include <string_view>
#include <vector>

namespace hippo {

// migrations()[i] is the SQL (several statements) of the step from version i to i + 1.
const std::vector<std::string_view>& migrations();

// The version this binary writes: migrations().size().
int latest_schema_version();

}  // namespace hippo
