// Text that hippo's programs read from their users (options, environment variables).
#pragma once

#include <string_view>
#include <vector>

namespace hippo::protocol {

// The items of a comma-separated list, empty ones kept: "a,,b" -> {"a", "", "b"}, "" -> {""}.
// The views point into `text`.
inline std::vector<std::string_view> comma_separated(std::string_view text) {
  std::vector<std::string_view> items;
  for (size_t start = 0;;) {
    const size_t comma = text.find(',', start);
    items.push_back(text.substr(start, comma - start));
    if (comma == std::string_view::npos) return items;
    start = comma + 1;
  }
}

}  // namespace hippo::protocol
