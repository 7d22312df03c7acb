// `hippo dashboard`: an HTTP server (cpp-httplib, from Debian) over one read-only connection to
// the search plan.
//
// Reading. The plan is re-read (model.h's PlanReader: one snapshot, of what changed since the last
// read) only when a request comes and the file has changed (SearchPlan::data_version), at most
// once per `refresh_s` and never sooner after a read than that read took (at most half a core on
// a plan that a study keeps writing), so a master writing the file meanwhile is never blocked
// (WAL) and pays nothing while nobody looks. The request that starts a read waits for it; the
// others get the view before. Rendered pages are kept, each under its own ETag, while the study
// views they were made from are the view's (a study nothing changed keeps its view); the live pages
// ask for their content with If-None-Match and get 304 while nothing changed, and only the parts
// that changed otherwise (pages.h).
//
// Hostile clients. Only GET and HEAD of the known routes; anything else is a 4xx with a short
// page. Request heads are read by one thread that waits on every connection at once, so a slow
// client holds no serving thread: a head must arrive whole within `request_timeout_s` (the next
// one on a kept-alive connection within `idle_timeout_s`) and within 64 KiB (408 and 431
// otherwise); beyond 32 connections waiting for their heads from one address, or 512 in all, the
// oldest is answered 503. A whole request goes to one of `threads` serving threads, `queue` more
// wait (503 beyond), and its response must be taken within 30 s. Bound to loopback, requests must
// name a loopback Host (DNS rebinding). Nothing is ever written.
#pragma once

#include <atomic>
#include <memory>
#include <string>

namespace hippo::dashboard {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (see Server::port)
  double refresh_s = 1.0;
  int threads = 16;
  int queue = 64;
  double request_timeout_s = 5.0;  // for a new connection's request head
  double idle_timeout_s = 5.0;     // for the next request's head on a kept-alive connection
  bool quiet = false;              // no log line per refused connection
};

// True for 127.0.0.0/8, ::1 and "localhost".
bool is_loopback(const std::string& host);

class Server {
 public:
  // Opens the plan read-only and reads it once: throws std::runtime_error naming the problem
  // (missing file, not a plan, newer schema).
  Server(const std::string& db_path, const ServerOptions& options);
  ~Server();
  // Binds the socket; throws std::runtime_error when it cannot.
  void bind();
  int port() const;
  // Serves until stop() (from another thread or a signal handler's thread).
  void run();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hippo::dashboard
