#include "tests/dashboard/browser.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <stdexcept>
#include <thread>

namespace hippo::testing {
namespace {

using Clock = std::chrono::steady_clock;

const char* chromium_path() {
  // The binary itself: Debian's /usr/bin/chromium is a wrapper script around it.
  if (access("/usr/lib/chromium/chromium", X_OK) == 0) return "/usr/lib/chromium/chromium";
  return nullptr;
}

std::string base64_decode(const std::string& text) {
  std::string out;
  int value = 0, bits = -8;
  for (char c : text) {
    int d;
    if (c >= 'A' && c <= 'Z') {
      d = c - 'A';
    } else if (c >= 'a' && c <= 'z') {
      d = c - 'a' + 26;
    } else if (c >= '0' && c <= '9') {
      d = c - '0' + 52;
    } else if (c == '+') {
      d = 62;
    } else if (c == '/') {
      d = 63;
    } else {
      continue;  // '=' and line breaks
    }
    value = (value << 6) | d;
    bits += 6;
    if (bits >= 0) {
      out += static_cast<char>((value >> bits) & 0xff);
      bits -= 8;
    }
  }
  return out;
}

}  // namespace

bool Browser::available() {
  return chromium_path() != nullptr;
}

Browser::Browser(const std::string& profile_dir) {
  const char* path = chromium_path();
  if (!path) throw std::runtime_error("chromium is not installed (scripts/setup installs it)");
  int to[2], from[2];
  if (pipe(to) != 0 || pipe(from) != 0) throw std::runtime_error("pipe failed");
  pid_ = fork();
  if (pid_ == 0) {
    // The DevTools pipe: chromium reads commands on fd 3 and writes on fd 4.
    dup2(to[0], 3);
    dup2(from[1], 4);
    for (int fd : {to[0], to[1], from[0], from[1]})
      if (fd > 4) ::close(fd);
    int null = ::open("/dev/null", O_WRONLY);
    dup2(null, STDOUT_FILENO);
    dup2(null, STDERR_FILENO);
    std::string profile = "--user-data-dir=" + profile_dir;
    // Root needs --no-sandbox; the rest keeps chromium from calling anything outside.
    const char* args[] = {path,
                          "--headless",
                          "--no-sandbox",
                          "--disable-gpu",
                          "--disable-quic",
                          "--no-first-run",
                          "--disable-background-networking",
                          "--disable-component-update",
                          "--disable-sync",
                          "--disable-extensions",
                          "--disable-default-apps",
                          "--mute-audio",
                          "--hide-scrollbars",
                          "--remote-debugging-pipe",
                          profile.c_str(),
                          "about:blank",
                          nullptr};
    execv(path, const_cast<char* const*>(args));
    _exit(127);
  }
  ::close(to[0]);
  ::close(from[1]);
  to_browser_ = to[1];
  from_browser_ = from[0];
  call("Browser.getVersion");  // throws if it never answers
}

Browser::~Browser() {
  if (pid_ > 0) {
    try {
      send({{"id", next_id_++}, {"method", "Browser.close"}});
    } catch (...) {
    }
    for (int i = 0; i < 50 && waitpid(pid_, nullptr, WNOHANG) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (waitpid(pid_, nullptr, WNOHANG) == 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  if (to_browser_ >= 0) ::close(to_browser_);
  if (from_browser_ >= 0) ::close(from_browser_);
}

void Browser::send(const json& message) {
  std::string text = message.dump();
  text.push_back('\0');
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(to_browser_, text.data() + done, text.size() - done);
    if (n <= 0) throw std::runtime_error("chromium closed its DevTools pipe");
    done += static_cast<size_t>(n);
  }
}

bool Browser::receive(json& message, std::chrono::milliseconds timeout) {
  auto until = Clock::now() + timeout;
  for (;;) {
    size_t end = buffer_.find('\0');
    if (end != std::string::npos) {
      message = json::parse(buffer_.substr(0, end));
      buffer_.erase(0, end + 1);
      return true;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{from_browser_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char chunk[65536];
    ssize_t n = read(from_browser_, chunk, sizeof chunk);
    if (n <= 0) throw std::runtime_error("chromium closed its DevTools pipe (did it crash?)");
    buffer_.append(chunk, static_cast<size_t>(n));
  }
}

void Browser::keep_event(const json& message) {
  if (message.contains("method")) events_.push_back(message);
}

json Browser::call(const std::string& method, const json& params, const std::string& session) {
  int64_t id = next_id_++;
  json message = {{"id", id}, {"method", method}, {"params", params}};
  if (!session.empty()) message["sessionId"] = session;
  send(message);
  auto until = Clock::now() + std::chrono::seconds(30);
  json reply;
  while (Clock::now() < until) {
    if (!receive(reply, std::chrono::milliseconds(500))) continue;
    if (reply.value("id", int64_t(-1)) != id) {
      keep_event(reply);
      continue;
    }
    if (reply.contains("error")) throw std::runtime_error(method + ": " + reply["error"].dump());
    return reply.value("result", json::object());
  }
  throw std::runtime_error(method + ": no answer from chromium in 30 s");
}

Browser::Tab Browser::open() {
  Tab tab;
  tab.target = call("Target.createTarget", {{"url", "about:blank"}})["targetId"];
  tab.session =
      call("Target.attachToTarget", {{"targetId", tab.target}, {"flatten", true}})["sessionId"];
  for (const char* domain : {"Page.enable", "Runtime.enable", "Log.enable", "Network.enable"})
    call(domain, json::object(), tab.session);
  call("Emulation.setDeviceMetricsOverride",
       {{"width", 1280}, {"height", 900}, {"deviceScaleFactor", 1}, {"mobile", false}},
       tab.session);
  return tab;
}

void Browser::close(const Tab& tab) {
  call("Target.closeTarget", {{"targetId", tab.target}});
}

void Browser::navigate(const Tab& tab, const std::string& url) {
  size_t seen = events_.size();
  json result = call("Page.navigate", {{"url", url}}, tab.session);
  if (result.contains("errorText") && !result["errorText"].get<std::string>().empty())
    throw std::runtime_error("navigating to " + url + ": " + result["errorText"].dump());
  auto until = Clock::now() + std::chrono::seconds(30);
  for (;;) {
    for (size_t i = seen; i < events_.size(); ++i)
      if (events_[i].value("sessionId", "") == tab.session &&
          events_[i]["method"] == "Page.loadEventFired")
        return;
    seen = events_.size();
    if (Clock::now() > until) throw std::runtime_error("no load event for " + url + " in 30 s");
    json message;
    if (receive(message, std::chrono::milliseconds(200))) keep_event(message);
  }
}

json Browser::evaluate(const Tab& tab, const std::string& expression) {
  json r = call("Runtime.evaluate",
                {{"expression", expression}, {"returnByValue", true}, {"awaitPromise", true}},
                tab.session);
  if (r.contains("exceptionDetails"))
    throw std::runtime_error("evaluating " + expression + ": " + r["exceptionDetails"].dump());
  return r["result"].value("value", json());
}

bool Browser::wait_until(const Tab& tab, const std::string& expression,
                         std::chrono::milliseconds timeout) {
  auto until = Clock::now() + timeout;
  for (;;) {
    if (evaluate(tab, "!!(" + expression + ")").get<bool>()) return true;
    if (Clock::now() > until) return false;
    json message;  // keep events flowing while waiting
    if (receive(message, std::chrono::milliseconds(100))) keep_event(message);
  }
}

void Browser::screenshot(const Tab& tab, const std::string& png_path, double max_height,
                         double scale) {
  json metrics = call("Page.getLayoutMetrics", json::object(), tab.session);
  double height = metrics["cssContentSize"]["height"].get<double>();
  json shot = call("Page.captureScreenshot",
                   {{"format", "png"},
                    {"captureBeyondViewport", true},
                    {"clip",
                     {{"x", 0},
                      {"y", 0},
                      {"width", 1280},
                      {"height", std::min(height, max_height)},
                      {"scale", scale}}}},
                   tab.session);
  std::ofstream(png_path, std::ios::binary) << base64_decode(shot["data"]);
}

void Browser::go_offline(const Tab& tab) {
  call("Network.emulateNetworkConditions",
       {{"offline", true}, {"latency", 0}, {"downloadThroughput", -1}, {"uploadThroughput", -1}},
       tab.session);
}

std::vector<std::string> Browser::errors(const Tab& tab) const {
  std::vector<std::string> out;
  for (const json& e : events_) {
    if (e.value("sessionId", "") != tab.session) continue;
    const std::string method = e["method"];
    const json& p = e["params"];
    if (method == "Runtime.exceptionThrown") {
      out.push_back("exception: " + p["exceptionDetails"].dump());
    } else if (method == "Runtime.consoleAPICalled" &&
               (p["type"] == "error" || p["type"] == "assert" || p["type"] == "warning")) {
      out.push_back("console." + p["type"].get<std::string>() + ": " + p["args"].dump());
    } else if (method == "Log.entryAdded" && p["entry"]["level"] == "error") {
      out.push_back("log: " + p["entry"].value("text", "") + " " + p["entry"].value("url", ""));
    } else if (method == "Page.javascriptDialogOpening") {
      out.push_back("dialog: " + p.value("message", ""));
    }
  }
  return out;
}

std::vector<std::string> Browser::requests(const Tab& tab) const {
  std::vector<std::string> out;
  for (const json& e : events_)
    if (e.value("sessionId", "") == tab.session && e["method"] == "Network.requestWillBeSent")
      out.push_back(e["params"]["request"]["url"]);
  return out;
}

}  // namespace hippo::testing
