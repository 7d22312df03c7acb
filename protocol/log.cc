#include "protocol/log.h"

#include <spdlog/sinks/stdout_sinks.h>

#include <map>
#include <stdexcept>

namespace hippo::logging {

void setup(const std::string& component, const std::string& level) {
  static const std::map<std::string, spdlog::level::level_enum> levels = {
      {"trace", spdlog::level::trace}, {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},   {"warning", spdlog::level::warn},
      {"error", spdlog::level::err},   {"off", spdlog::level::off}};
  auto it = levels.find(level);
  if (it == levels.end())
    throw std::invalid_argument("unknown log level \"" + level + "\" (expected " + kLevels + ")");
  // Unbuffered stderr, as the fprintf lines were: a test or an operator reading the log of a
  // process that was killed sees everything up to the kill.
  auto logger = std::make_shared<spdlog::logger>(component,
                                                 std::make_shared<spdlog::sinks::stderr_sink_st>());
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] [%l] %v");
  logger->set_level(it->second);
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(logger);
}

}  // namespace hippo::logging
