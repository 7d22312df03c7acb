// The log of the master and worker processes: spdlog's default logger, on stderr, one line per
// event in one format, "[2026-11-23 06:36:24.123] [master] [warning] text". Code logs with
// spdlog::debug/info/warn/error; a command's own output to its user (tables, "error: ..." before
// exit status 2) is not logging and stays on stdout/stderr as it is.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace hippo::logging {

inline constexpr const char* kLevels = "trace, debug, info, warning, error or off";

// Names the process's log (its component: "master", "worker NAME", "hippo") and sets its level
// (one of kLevels); std::invalid_argument naming an unknown level.
void setup(const std::string& component, const std::string& level);

}  // namespace hippo::logging
