// dashboard.css and dashboard.js, embedded at build time (CMakeLists.txt writes assets.cc from
// the files and their SHA-256), so that the binary serves and inlines them with nothing to find
// at run time.
#pragma once

#include <string_view>

namespace hippo::dashboard {

extern const std::string_view kStyle;         // dashboard.css
extern const std::string_view kScript;        // dashboard.js
extern const std::string_view kStyleSha256;   // hex SHA-256 of kStyle
extern const std::string_view kScriptSha256;  // hex SHA-256 of kScript

}  // namespace hippo::dashboard
