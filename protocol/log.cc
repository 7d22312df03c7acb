#include "protocol/log.h"

#include <spdlog/details/null_mutex.h>
#include <spdlog/sinks/base_sink.h>

#include <cstdio>
#include <map>
#include <stdexcept>

#include "protocol/text.h"

namespace hippo::logging {
namespace {

// Unbuffered stderr, one line per event: the message printable (protocol/text.h), so that a name
// or a trainer's output with control characters or line breaks in it can neither command the
// operator's terminal nor forge a line of the log.
class PrintableStderrSink : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::details::log_msg safe = msg;
    const std::string text =
        protocol::printable(std::string_view(msg.payload.data(), msg.payload.size()));
    safe.payload = text;
    spdlog::memory_buf_t line;
    formatter_->format(safe, line);
    std::fwrite(line.data(), 1, line.size(), stderr);
  }
  void flush_() override { std::fflush(stderr); }
};

}  // namespace

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
  auto logger =
      std::make_shared<spdlog::logger>(component, std::make_shared<PrintableStderrSink>());
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] [%l] %v");
  logger->set_level(it->second);
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(logger);
}

}  // namespace hippo::logging
