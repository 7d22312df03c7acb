#include "dashboard/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "dashboard/pages.h"
#include "dashboard/table.h"
#include "protocol/random_token.h"
#include "storage/plan.h"

namespace hippo::dashboard {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxHeadBytes = 64 * 1024;  // request line and headers
constexpr int kMaxRequestsPerConnection = 100;
constexpr size_t kMaxNameLength = 256;  // a study's name or id in a URL
constexpr size_t kMaxCompared = 16;
constexpr size_t kMaxCachedPages = 256;
constexpr size_t kMaxSelected = 16;        // ?trial=N on a study page
constexpr size_t kMaxFilterLength = 1024;  // the trial table's filter
constexpr size_t kMaxKeptParts = 1024;     // names in a poll's X-Hippo-Parts
constexpr int kWriteSeconds = 30;          // for a client to take a response (a large page, slowly)

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int millis_until(Clock::time_point t) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 60000));
}

// Connections whose request head has not come whole yet, all held by one thread (HeadReader): a
// few browsers' worth from one address, and in all well within the 1,024 descriptors a process
// has by default. Beyond either, the oldest of them is turned away (503): a slow client holds no
// place for long, and a new one that sends its request at once is always read.
constexpr size_t kMaxWaitingPerSource = 32;
constexpr size_t kMaxWaiting = 512;

void send_canned(int fd, int status, const char* reason) {
  std::string text = std::string(reason) + "\n";
  std::string response = "HTTP/1.1 " + std::to_string(status) + " " + reason +
                         "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " +
                         std::to_string(text.size()) + "\r\nConnection: close\r\n" +
                         (status == 503 ? "Retry-After: 1\r\n" : "") + "\r\n" + text;
  (void)send(fd, response.data(), response.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

// A connection's socket as httplib's Stream. The head of each request is read beforehand, whole
// and within kMaxHeadBytes, by the head reader (receive_head, never waiting), so that httplib
// parses it from memory and a serving thread never waits for a client's head (httplib 0.11 bounds
// each read, not a request: a client sending a byte every few seconds held a thread for hours,
// and a hundred of them every thread). Only a response waits for its client: kWriteSeconds.
class Connection : public httplib::Stream {
 public:
  enum class Head { kWhole, kWaiting, kClosed, kTooLarge };

  explicit Connection(int fd) : fd_(fd) {
    int port = 0;
    address(getpeername, source_, port);
  }
  ~Connection() override {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
  }
  const std::string& source() const { return source_; }

  // Reads what has arrived, without waiting, until the next request's head is whole.
  Head receive_head() {
    for (;;) {
      // Never more than kMaxHeadBytes unread: a head found is within them.
      if (in_.find("\r\n\r\n", std::max(begin_, scanned_)) != std::string::npos)
        return Head::kWhole;
      const size_t unread = in_.size() - begin_;
      if (unread >= kMaxHeadBytes) return Head::kTooLarge;
      scanned_ = in_.size() - std::min<size_t>(unread, 3);  // a "\r\n\r\n" may end in new bytes
      char buffer[4096];
      const ssize_t n =
          recv(fd_, buffer, std::min(sizeof buffer, kMaxHeadBytes - unread), MSG_DONTWAIT);
      if (n > 0) {
        in_.append(buffer, static_cast<size_t>(n));
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else {
        return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? Head::kWaiting : Head::kClosed;
      }
    }
  }

  // A request whose head has come is served: what it reads beyond its head (a body) must come
  // within `timeout_s`, and its response be taken within kWriteSeconds after that. False when the
  // connection has served its kMaxRequestsPerConnection.
  bool start_request(double timeout_s) {
    in_.erase(0, begin_);
    begin_ = scanned_ = 0;
    deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(timeout_s));
    write_deadline_ = deadline_ + std::chrono::seconds(kWriteSeconds);
    written_ = 0;
    timed_out_ = false;
    return --requests_left_ >= 0;
  }
  bool last_request() const { return requests_left_ == 0; }
  bool timed_out() const { return timed_out_; }
  bool wrote() const { return written_ > 0; }

  bool is_readable() const override { return begin_ < in_.size() || wait(POLLIN, deadline_); }
  bool is_writable() const override { return wait(POLLOUT, write_deadline_); }

  ssize_t read(char* ptr, size_t size) override {
    if (begin_ == in_.size()) {
      if (!wait(POLLIN, deadline_)) {
        timed_out_ = true;
        return -1;
      }
      char buffer[4096];
      const ssize_t n = recv(fd_, buffer, sizeof buffer, 0);
      if (n <= 0) return -1;
      in_.append(buffer, static_cast<size_t>(n));
    }
    const size_t n = std::min(size, in_.size() - begin_);
    std::memcpy(ptr, in_.data() + begin_, n);
    begin_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    // A request cut short gets our 408, not the 400 httplib would make of its half.
    if (timed_out_ || !wait(POLLOUT, write_deadline_)) return -1;
    const ssize_t n = send(fd_, ptr, size, MSG_NOSIGNAL);
    if (n > 0) written_ += static_cast<size_t>(n);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    address(getpeername, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    address(getsockname, ip, port);
  }
  int socket() const override { return fd_; }

 private:
  bool wait(short events, Clock::time_point until) const {
    pollfd p{fd_, events, 0};
    for (;;) {
      int r = poll(&p, 1, millis_until(until));
      if (r > 0) return (p.revents & (events | POLLHUP)) != 0;
      if (r == 0 || errno != EINTR) return false;
    }
  }
  void address(int (*get)(int, sockaddr*, socklen_t*), std::string& ip, int& port) const {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    ip.clear();
    port = 0;
    if (get(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) return;
    char text[INET6_ADDRSTRLEN] = "";
    if (a.ss_family == AF_INET) {
      auto* v4 = reinterpret_cast<sockaddr_in*>(&a);
      inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
      port = ntohs(v4->sin_port);
    } else if (a.ss_family == AF_INET6) {
      auto* v6 = reinterpret_cast<sockaddr_in6*>(&a);
      inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
      port = ntohs(v6->sin6_port);
    }
    ip = text;
  }

  int fd_;
  std::string source_;  // the peer's address
  std::string in_;      // received; httplib has read up to begin_
  size_t begin_ = 0;
  size_t scanned_ = 0;  // no head ends before this
  int requests_left_ = kMaxRequestsPerConnection;
  Clock::time_point deadline_ = Clock::now(), write_deadline_ = Clock::now();
  size_t written_ = 0;
  bool timed_out_ = false;
};

using Handoff = std::function<void(std::unique_ptr<Connection>)>;

// Reads the heads of every waiting connection on one thread (poll). A connection whose head is
// whole is handed to `serve`; one whose head is not whole by its deadline is answered 408, over
// kMaxHeadBytes 431, and the oldest beyond kMaxWaitingPerSource from its address or kMaxWaiting
// in all 503.
class HeadReader {
 public:
  explicit HeadReader(Handoff serve) : serve_(std::move(serve)) {
    if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0)
      throw std::runtime_error(std::string("dashboard: pipe: ") + std::strerror(errno));
    thread_ = std::thread([this] { run(); });
  }
  ~HeadReader() {
    stop();
    ::close(wake_[0]);
    ::close(wake_[1]);
  }
  // Its head must be whole within timeout_s from now. From any thread; after stop(), it is
  // closed.
  void add(std::unique_ptr<Connection> connection, double timeout_s) {
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(timeout_s));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) return;
      incoming_.push_back({std::move(connection), deadline, true});
    }
    wake();
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake();
    if (thread_.joinable()) thread_.join();
  }

 private:
  struct Waiting {
    std::unique_ptr<Connection> connection;
    Clock::time_point deadline;
    bool ready;  // may have bytes to read
  };

  void wake() { (void)!::write(wake_[1], "x", 1); }

  void run() {
    std::vector<Waiting> waiting;  // oldest first
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stopping_) return;
        for (Waiting& w : incoming_) waiting.push_back(std::move(w));
        incoming_.clear();
      }
      waiting = read_heads(std::move(waiting));
      std::vector<pollfd> fds = {{wake_[0], POLLIN, 0}};
      Clock::time_point next = Clock::now() + std::chrono::seconds(1);
      for (const Waiting& w : waiting) {
        fds.push_back({w.connection->socket(), POLLIN, 0});
        next = std::min(next, w.deadline);
      }
      if (::poll(fds.data(), fds.size(), millis_until(next) + 1) > 0) {
        char drain[64];
        while (::read(wake_[0], drain, sizeof drain) > 0) {
        }
        for (size_t i = 1; i < fds.size(); ++i) waiting[i - 1].ready = fds[i].revents != 0;
      }
    }
  }

  // Serves the whole heads, answers the late and the too large, then turns the oldest away while
  // more are waiting than the limits allow; what is left still waits.
  std::vector<Waiting> read_heads(std::vector<Waiting> waiting) {
    const auto now = Clock::now();
    std::vector<Waiting> left;
    std::map<std::string, size_t> per_source;
    for (Waiting& w : waiting) {
      Connection::Head head = w.ready ? w.connection->receive_head() : Connection::Head::kWaiting;
      w.ready = false;
      const int fd = w.connection->socket();
      if (head == Connection::Head::kWhole) {
        serve_(std::move(w.connection));
      } else if (head == Connection::Head::kTooLarge) {
        send_canned(fd, 431, "Request Header Fields Too Large");
      } else if (head == Connection::Head::kWaiting && now >= w.deadline) {
        send_canned(fd, 408, "Request Timeout");
      } else if (head == Connection::Head::kWaiting) {
        ++per_source[w.connection->source()];
        left.push_back(std::move(w));
      }
    }
    size_t total = left.size();
    std::vector<Waiting> kept;
    for (Waiting& w : left) {
      size_t& from_source = per_source[w.connection->source()];
      if (from_source > kMaxWaitingPerSource || total > kMaxWaiting) {
        send_canned(w.connection->socket(), 503, "Service Unavailable");
        --from_source;
        --total;
      } else {
        kept.push_back(std::move(w));
      }
    }
    return kept;
  }

  Handoff serve_;
  int wake_[2] = {-1, -1};  // a pipe: add() and stop() wake the thread
  std::mutex mutex_;
  std::vector<Waiting> incoming_;  // guarded by mutex_
  bool stopping_ = false;          // guarded by mutex_
  std::thread thread_;
};

// `threads` threads serve connections whose head has come, at most `queue` more wait for one;
// past that, a connection is answered 503.
class ServingPool {
 public:
  ServingPool(int threads, int queue, Handoff serve)
      : serve_(std::move(serve)), limit_(static_cast<size_t>(queue)) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { work(); });
  }
  ~ServingPool() { stop(); }
  void submit(std::unique_ptr<Connection> connection) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!stopping_ && jobs_.size() < limit_) {
        jobs_.push_back(std::move(connection));
        ready_.notify_one();
        return;
      }
    }
    send_canned(connection->socket(), 503, "Service Unavailable");
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_all();
    for (std::thread& t : threads_)
      if (t.joinable()) t.join();
  }

 private:
  void work() {
    for (;;) {
      std::unique_ptr<Connection> connection;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ready_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;  // stopping, and nothing left
        connection = std::move(jobs_.front());
        jobs_.pop_front();
      }
      serve_(std::move(connection));
    }
  }
  Handoff serve_;
  size_t limit_;
  std::vector<std::thread> threads_;
  std::deque<std::unique_ptr<Connection>> jobs_;
  std::mutex mutex_;
  std::condition_variable ready_;
  bool stopping_ = false;
};

// httplib's task queue: runs each task at once on the accepting thread, where it only hands the
// new connection to the head reader.
class HandOver : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

// httplib's server with our connections: heads read by one thread for all, whole requests served
// by a bounded pool.
class HardenedServer : public httplib::Server {
 public:
  explicit HardenedServer(const ServerOptions& o)
      : options_(o),
        pool_(o.threads, o.queue, [this](std::unique_ptr<Connection> c) { serve(std::move(c)); }),
        heads_([this](std::unique_ptr<Connection> c) { pool_.submit(std::move(c)); }) {
    new_task_queue = [] { return new HandOver; };
  }
  ~HardenedServer() override { finish(); }
  // httplib listens with a backlog of 5: a burst of connections would overflow it, and the
  // kernel would make the overflow wait seconds for a SYN-ACK resent. Listening again on the
  // bound socket raises the backlog (our accepting thread never blocks).
  void deepen_backlog() { ::listen(svr_sock_, SOMAXCONN); }
  // Once httplib has stopped accepting: closes the waiting connections, lets the served ones end.
  void finish() {
    heads_.stop();
    pool_.stop();
  }

 private:
  bool process_and_close_socket(socket_t sock) override {
    heads_.add(std::make_unique<Connection>(sock), options_.request_timeout_s);
    return true;
  }

  // Serves the connection's requests while their heads have come; a kept-alive connection whose
  // next head has not goes back to the head reader.
  void serve(std::unique_ptr<Connection> connection) {
    while (connection->start_request(options_.request_timeout_s)) {
      bool closed = false;
      const bool ok = process_request(*connection, connection->last_request(), closed, nullptr);
      if (connection->timed_out() && !connection->wrote())
        send_canned(connection->socket(), 408, "Request Timeout");
      if (!ok || closed || connection->timed_out() || connection->last_request()) return;
      if (connection->receive_head() != Connection::Head::kWhole) {
        heads_.add(std::move(connection), options_.idle_timeout_s);
        return;
      }
    }
  }

  ServerOptions options_;
  ServingPool pool_;
  HeadReader heads_;  // after pool_, which it hands connections to
};

// Sends `body`, gzipped (zlib, level 6) when the client accepts it and it is over a kilobyte.
// httplib 0.11 would compress a body set with set_content with brotli at its slowest setting
// whenever the browser accepts it (seconds of CPU for a large study's page, at every refresh); a
// body given by a content provider of known length goes out as we encoded it.
void send(const httplib::Request& req, httplib::Response& res, std::string body, const char* type) {
  res.set_header("Vary", "Accept-Encoding, X-Hippo-Part");
  if (body.size() > 1024 &&
      req.get_header_value("Accept-Encoding").find("gzip") != std::string::npos) {
    body = gzip(body);
    res.set_header("Content-Encoding", "gzip");
  }
  auto shared = std::make_shared<const std::string>(std::move(body));
  res.set_content_provider(shared->size(), type,
                           [shared](size_t offset, size_t length, httplib::DataSink& sink) {
                             return sink.write(shared->data() + offset, length);
                           });
}

constexpr const char* kHtml = "text/html; charset=utf-8";

}  // namespace

bool is_loopback(const std::string& host) {
  if (host == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

struct Server::Impl {
  ServerOptions options;
  std::string instance = protocol::random_hex(16);  // ETags of one run never match another's
  HardenedServer http;
  int bound_port = -1;

  // The plan and the latest view of it.
  std::mutex plan_mutex;  // guards view, next_read, reading (and plan, reader, while not reading)
  SearchPlan plan;
  std::shared_ptr<const PlanView> view;
  PlanReader reader;            // keeps what it read: a re-read reads only what changed
  Clock::time_point next_read;  // no read of the plan before
  bool reading = false;

  // Rendered content, per request key, with the study views it was made from: good for as long
  // as the view holds those same objects (PlanReader keeps the view of a study nothing changed).
  struct Cached {
    std::vector<std::shared_ptr<const StudyView>> from;
    std::shared_ptr<const Page> page;
    std::string etag;
  };
  std::mutex pages_mutex;
  int64_t pages_version = -1;
  int64_t pages_made = 0;  // names each page made: its ETag
  std::map<std::string, Cached> pages;

  Impl(const std::string& db, const ServerOptions& o)
      : options(o), http(o), plan(SearchPlan::open_read_only(db)) {
    view = std::make_shared<PlanView>(reader.read(plan, unix_now()));
    next_read = Clock::now();
  }

  // The latest view. The plan is re-read when it changed, by the request that finds it so; every
  // other request meanwhile gets the view before (a read of 100,000 trials takes seconds: no
  // request waits for one it did not start). Reads are at least refresh_s apart, and at least as
  // far apart as the last one took, so that re-reading a plan that a study keeps writing takes
  // at most half a core.
  std::shared_ptr<const PlanView> current() {
    std::unique_lock<std::mutex> lock(plan_mutex);
    const auto now = Clock::now();
    if (reading || now < next_read) return view;
    next_read = now + std::chrono::duration_cast<Clock::duration>(
                          std::chrono::duration<double>(options.refresh_s));
    try {
      if (plan.data_version() == view->version) return view;
    } catch (const std::exception& e) {
      if (!options.quiet) std::fprintf(stderr, "dashboard: re-reading the plan: %s\n", e.what());
      return view;
    }
    reading = true;  // `plan` is this thread's until the read is done
    lock.unlock();
    std::shared_ptr<const PlanView> fresh;
    try {
      fresh = std::make_shared<PlanView>(reader.read(plan, unix_now()));
    } catch (const std::exception& e) {
      // Busy or mid-migration: keep showing the last good view, and say so.
      if (!options.quiet) std::fprintf(stderr, "dashboard: re-reading the plan: %s\n", e.what());
    }
    lock.lock();
    reading = false;
    next_read = std::max(next_read, Clock::now() + (Clock::now() - now));
    if (fresh) view = std::move(fresh);
    return view;
  }

  std::string etag(const PlanView& v) const {
    return "\"" + instance + "-" + std::to_string(v.version) + "\"";
  }

  // Drops what was made from study views that `v` no longer holds (they would stay in memory).
  template <typename Cache, typename From>
  static void keep_current(const PlanView& v, Cache& cache, From from) {
    std::set<const StudyView*> current;
    for (const auto& s : v.studies) current.insert(s.get());
    for (auto it = cache.begin(); it != cache.end();) {
      const auto& used = from(it->second);
      const bool stale = std::any_of(used.begin(), used.end(),
                                     [&](const auto& s) { return !current.count(s.get()); });
      it = stale ? cache.erase(it) : std::next(it);
    }
  }

  // Answers with a page built by `make` from the study views `from` gives (cached per key while
  // they are the views'), or the 4xx either throws.
  using Views = std::vector<std::shared_ptr<const StudyView>>;
  void answer(const httplib::Request& req, httplib::Response& res, const std::string& key,
              const std::function<Views(const PlanView&)>& from,
              const std::function<Page(const PlanView&)>& make) {
    std::shared_ptr<const PlanView> v = current();
    const Views used = from(*v);
    std::optional<Cached> cached;
    {
      std::lock_guard<std::mutex> lock(pages_mutex);
      if (pages_version != v->version) {
        keep_current(*v, pages, [](const Cached& c) -> const Views& { return c.from; });
        pages_version = v->version;
      }
      auto it = pages.find(key);
      if (it != pages.end() && it->second.from == used) cached = it->second;
    }
    if (!cached) {
      auto page = std::make_shared<const Page>(make(*v));
      std::lock_guard<std::mutex> lock(pages_mutex);
      cached = Cached{used, page, "\"" + instance + "-p" + std::to_string(++pages_made) + "\""};
      if (pages_version == v->version) {
        // Full (many selections): one goes, so that pages asked for later are kept too.
        if (pages.size() >= kMaxCachedPages && !pages.count(key)) pages.erase(pages.begin());
        pages[key] = *cached;
      }
    }
    const std::string& tag = cached->etag;
    res.set_header("ETag", tag);
    if (req.get_header_value("If-None-Match") == tag) {
      res.status = 304;
      return;
    }
    const std::shared_ptr<const Page>& page = cached->page;
    if (req.get_header_value("X-Hippo-Part") == "content") {
      // A poll: the parts it already shows, unchanged, go back as placeholders.
      std::set<std::string> kept;
      std::istringstream names(req.get_header_value("X-Hippo-Parts"));
      for (std::string name; kept.size() < kMaxKeptParts && names >> name;) kept.insert(name);
      send(req, res, kept.empty() ? page->content : without_parts(page->content, kept), kHtml);
    } else {
      send(req, res, document(*page, true, tag), kHtml);
    }
  }

  static void fail(const httplib::Request& req, httplib::Response& res, int status,
                   const std::string& message) {
    res.status = status;
    send(req, res, document(error_page(status, message), true, "error"), kHtml);
  }

  // The trial table of a study's view, made once per view (sorting and filtering a page of it is
  // per request).
  std::mutex tables_mutex;
  int64_t tables_version = -1;
  std::map<int64_t, std::pair<Views, std::shared_ptr<const TrialTable>>> tables;
  std::shared_ptr<const TrialTable> table_of(const PlanView& v,
                                             const std::shared_ptr<const StudyView>& s) {
    {
      std::lock_guard<std::mutex> lock(tables_mutex);
      if (tables_version != v.version) {
        keep_current(v, tables, [](const auto& t) -> const Views& { return t.first; });
        tables_version = v.version;
      }
      auto it = tables.find(s->row.id);
      if (it != tables.end() && it->second.first[0] == s) return it->second.second;
    }
    auto table = std::make_shared<const TrialTable>(trial_table(*s));
    std::lock_guard<std::mutex> lock(tables_mutex);
    if (tables_version == v.version) tables[s->row.id] = {{s}, table};
    return table;
  }

  // ?trial=N&trial=M: the trials a page selects.
  static std::vector<int64_t> selected(const httplib::Request& req) {
    const size_t n = req.get_param_value_count("trial");
    if (n > kMaxSelected)
      throw std::invalid_argument("select at most " + std::to_string(kMaxSelected) + " trials");
    std::vector<int64_t> out;
    for (size_t i = 0; i < n; ++i)
      out.push_back(whole_number(req.get_param_value("trial", i), "trial"));
    return out;
  }
  static int64_t whole_number(const std::string& text, const std::string& what) {
    if (text.empty() || text.size() > 12 ||
        text.find_first_not_of("0123456789") != std::string::npos)
      throw std::invalid_argument(what + ": expected a whole number, not " + text.substr(0, 32));
    return std::stoll(text);
  }

  // The study a URL names, or a 4xx.
  std::shared_ptr<const StudyView> study(const PlanView& v, const std::string& name) {
    if (name.size() > kMaxNameLength) throw std::invalid_argument("a study name that long");
    auto s = v.find(name);
    if (!s) throw std::out_of_range("no study named " + name + " in this search plan");
    return s;
  }

  void study_route(const char* pattern, Page (*make)(const StudyView&)) {
    http.Get(pattern, [this, make](const httplib::Request& req, httplib::Response& res) {
      const std::string name = req.matches[1];
      answer(
          req, res, req.path, [&](const PlanView& v) { return Views{study(v, name)}; },
          [&](const PlanView& v) { return make(*study(v, name)); });
    });
  }
  // A route whose page draws the selected trials (?trial=N).
  void selecting_route(const char* pattern,
                       Page (*make)(const StudyView&, const std::vector<int64_t>&)) {
    http.Get(pattern, [this, make](const httplib::Request& req, httplib::Response& res) {
      const std::string name = req.matches[1];
      const std::vector<int64_t> trials = selected(req);
      answer(
          req, res, selection_key(req.path, trials),
          [&](const PlanView& v) { return Views{study(v, name)}; },
          [&](const PlanView& v) { return make(*study(v, name), trials); });
    });
  }
  // The cache's key of a page at `path` that selects `trials`.
  static std::string selection_key(const std::string& path, const std::vector<int64_t>& trials) {
    std::string key = path;
    for (int64_t t : trials) {
      key += '\n';  // (one append at a time: GCC 12 warns falsely on "\n" + a temporary)
      key += std::to_string(t);
    }
    return key;
  }

  void routes() {
    http.Get("/", [this](const httplib::Request& req, httplib::Response& res) {
      answer(
          req, res, "/", [](const PlanView& v) { return v.studies; }, studies_page);
    });
    http.Get("/compare", [this](const httplib::Request& req, httplib::Response& res) {
      size_t n = req.get_param_value_count("id");
      if (n == 0 || n > kMaxCompared)
        throw std::invalid_argument("compare: give 1 to " + std::to_string(kMaxCompared) +
                                    " studies as ?id=...&id=...");
      std::string key = "/compare";
      std::vector<std::string> names;
      for (size_t i = 0; i < n; ++i) {
        names.push_back(req.get_param_value("id", i));
        key += "\n" + names.back();
      }
      auto named = [&](const PlanView& v) {
        Views views;
        for (const std::string& name : names) views.push_back(study(v, name));
        return views;
      };
      answer(req, res, key, named, [&](const PlanView& v) {
        const Views keep = named(v);
        std::vector<const StudyView*> studies;
        for (const auto& s : keep) studies.push_back(s.get());
        return compare_page(studies);
      });
    });
    selecting_route(R"(/study/([^/]+))", study_page);
    // The stage tree: ?trial=N as a study page's, and ?expand=all or ?expand=STAGE.
    http.Get(R"(/study/([^/]+)/tree)", [this](const httplib::Request& req, httplib::Response& res) {
      const std::string name = req.matches[1];
      const std::vector<int64_t> trials = selected(req);
      TreeExpansion expansion;
      const std::string expand = req.get_param_value("expand");
      if (expand == "all") {
        expansion.all = true;
      } else if (req.has_param("expand")) {
        expansion.below = whole_number(expand, "expand (all, or a stage's number)");
      }
      answer(
          req, res, selection_key(req.path, trials) + "\nexpand=" + expand,
          [&](const PlanView& v) { return Views{study(v, name)}; },
          [&](const PlanView& v) { return tree_page(*study(v, name), trials, expansion); });
    });
    study_route(R"(/study/([^/]+)/timeline)", timeline_page);
    http.Get(R"(/report/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
      auto s = study(*current(), req.matches[1]);
      res.set_header("Content-Disposition", "attachment; filename=\"hippo-report-" +
                                                std::to_string(s->row.id) + ".html\"");
      send(req, res, report(*s), kHtml);
    });
    // A page of the trial table, sorted and filtered here: what the study page's table shows.
    http.Get(R"(/study/([^/]+)/trials)", [this](const httplib::Request& req,
                                                httplib::Response& res) {
      std::shared_ptr<const PlanView> v = current();
      auto s = study(*v, req.matches[1]);
      std::shared_ptr<const TrialTable> table = table_of(*v, s);
      TableQuery query = default_query(*table);
      if (req.has_param("sort"))
        query.sort = static_cast<size_t>(whole_number(req.get_param_value("sort"), "sort"));
      if (req.has_param("desc")) query.descending = req.get_param_value("desc") == "1";
      if (req.has_param("page"))
        query.page = static_cast<size_t>(whole_number(req.get_param_value("page"), "page"));
      if (req.has_param("trial")) query.trial = whole_number(req.get_param_value("trial"), "trial");
      query.filter = req.get_param_value("filter");
      if (query.filter.size() > kMaxFilterLength)
        throw std::invalid_argument("a filter over " + std::to_string(kMaxFilterLength) + " bytes");
      res.set_header("ETag", etag(*v));
      send(req, res,
           table_page(*table, query).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
           "application/json");
    });
    // Errors thrown by routes: unknown studies 404, other bad requests 400, anything else 500.
    http.set_exception_handler(
        [](const httplib::Request& req, httplib::Response& res, std::exception_ptr error) {
          try {
            std::rethrow_exception(error);
          } catch (const std::out_of_range& e) {
            fail(req, res, 404, e.what());
          } catch (const std::invalid_argument& e) {
            fail(req, res, 400, e.what());
          } catch (const std::exception& e) {
            fail(req, res, 500, e.what());
          } catch (...) {
            fail(req, res, 500, "unknown error");
          }
        });
    // Called for every 4xx and 5xx: only those without a page of ours (unknown paths) get one.
    http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty() || res.content_length_ > 0) return;
      fail(req, res, res.status,
           res.status == 404 ? "nothing at " + req.path.substr(0, 200)
                             : "status " + std::to_string(res.status));
    });
    const bool check_host = is_loopback(options.host);
    http.set_pre_routing_handler(
        [this, check_host](const httplib::Request& req, httplib::Response& res) {
          if (req.method != "GET" && req.method != "HEAD") {
            res.set_header("Allow", "GET, HEAD");
            fail(req, res, 405,
                 "the dashboard only reads: " + req.method.substr(0, 16) + " is refused");
            return httplib::Server::HandlerResponse::Handled;
          }
          // A page elsewhere whose name resolves to 127.0.0.1 must not read the plan (DNS
          // rebinding): on loopback, only loopback names are served.
          if (check_host && req.has_header("Host")) {
            std::string host = req.get_header_value("Host");
            size_t colon = host.rfind(':');
            if (colon != std::string::npos && host.find(']') == std::string::npos) {
              host = host.substr(0, colon);
            } else if (host.size() > 2 && host.front() == '[') {
              host = host.substr(1, host.find(']') - 1);
            }
            if (!is_loopback(host)) {
              fail(req, res, 421,
                   "this dashboard answers to loopback names only, not " + host.substr(0, 64));
              return httplib::Server::HandlerResponse::Handled;
            }
          }
          return httplib::Server::HandlerResponse::Unhandled;
        });
    http.set_payload_max_length(0);  // GET and HEAD only: no body
    http.set_default_headers({{"Content-Security-Policy", content_security_policy(true)},
                              {"X-Content-Type-Options", "nosniff"},
                              {"X-Frame-Options", "DENY"},
                              {"Referrer-Policy", "no-referrer"},
                              {"Cache-Control", "no-cache"}});
  }
};

Server::Server(const std::string& db_path, const ServerOptions& options)
    : impl_(std::make_unique<Impl>(db_path, options)) {
  impl_->routes();
}

Server::~Server() = default;

void Server::bind() {
  Impl& i = *impl_;
  if (i.options.port == 0) {
    i.bound_port = i.http.bind_to_any_port(i.options.host);
  } else if (i.http.bind_to_port(i.options.host, i.options.port)) {
    i.bound_port = i.options.port;
  }
  if (i.bound_port <= 0)
    throw std::runtime_error("cannot listen on " + i.options.host + ":" +
                             std::to_string(i.options.port) + " (in use, or not an address here)");
  i.http.deepen_backlog();
}

int Server::port() const {
  return impl_->bound_port;
}

void Server::run() {
  impl_->http.listen_after_bind();
  impl_->http.finish();
}

void Server::stop() {
  impl_->http.stop();
}

}  // namespace hippo::dashboard
