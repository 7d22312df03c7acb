// A real headless browser for the tests: Debian's chromium driven over the DevTools protocol
// through a pipe (--remote-debugging-pipe: JSON messages ended by NUL on fds 3 and 4), so no
// WebSocket client and no port is needed. One Browser per test program; a Tab per page.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hippo::testing {

using nlohmann::json;

class Browser {
 public:
  // Starts chromium with a fresh profile in `profile_dir`; throws std::runtime_error when it
  // cannot (chromium missing, or it does not answer).
  explicit Browser(const std::string& profile_dir);
  ~Browser();
  Browser(const Browser&) = delete;
  Browser& operator=(const Browser&) = delete;

  // True when chromium is installed (tests skip with a message otherwise).
  static bool available();

  struct Tab {
    std::string target, session;
  };
  // A new tab, 1280 pixels wide, with console, log, page and network events on.
  Tab open();
  void close(const Tab& tab);

  // Sends a command and waits (up to 30 s) for its result; throws with the error otherwise.
  json call(const std::string& method, const json& params = json::object(),
            const std::string& session = "");
  // Loads a URL and waits for its load event.
  void navigate(const Tab& tab, const std::string& url);
  // The value of a JavaScript expression in the tab (awaited if it is a promise).
  json evaluate(const Tab& tab, const std::string& expression);
  // Polls `expression` until it is true (up to `timeout`); false if it never was.
  bool wait_until(const Tab& tab, const std::string& expression, std::chrono::milliseconds timeout);
  // Writes a PNG of the page, from its top down to max_height CSS pixels, scaled by `scale`.
  void screenshot(const Tab& tab, const std::string& png_path, double max_height = 6000,
                  double scale = 1);
  // Cuts the tab off the network (DevTools network emulation: every request fails).
  void go_offline(const Tab& tab);

  // What the tab reported since it was opened: console errors, uncaught exceptions, error log
  // entries (failed loads, CSP violations), and JavaScript dialogs (alert, ...).
  std::vector<std::string> errors(const Tab& tab) const;
  // The URLs the tab requested (Network.requestWillBeSent).
  std::vector<std::string> requests(const Tab& tab) const;

 private:
  void send(const json& message);
  // Reads one message (waiting up to `timeout`); false on timeout. Events are kept.
  bool receive(json& message, std::chrono::milliseconds timeout);
  void keep_event(const json& message);

  pid_t pid_ = -1;
  int to_browser_ = -1, from_browser_ = -1;
  std::string buffer_;
  int64_t next_id_ = 1;
  std::vector<json> events_;
};

}  // namespace hippo::testing
