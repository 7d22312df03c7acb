#include "storage/plan.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "protocol/file_modes.h"
#include "protocol/names.h"
#include "stagetree/json_number.h"
#include "stagetree/sequence_json.h"
#include "storage/schema.h"

namespace hippo {
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

template <typename Enum, size_t N>
Enum parse_name(const char* const (&names)[N], const std::string& text, const char* what) {
  for (size_t i = 0; i < N; ++i) {
    if (text == names[i]) return static_cast<Enum>(i);
  }
  throw std::invalid_argument(std::string("unknown ") + what + " \"" + text + "\"");
}

// Indexed by the enums' values.
const char* const kPolicies[] = {"shared", "trial-based"};
const char* const kStudyStatuses[] = {"running", "done", "failed", "cancelled", "interrupted"};
const char* const kTrialStatuses[] = {"pending", "running", "done",
                                      "stopped", "failed",  "diverged"};
const char* const kExecutionKinds[] = {"train", "replay", "evaluate"};
const char* const kExecutionOutcomes[] = {"done", "failed", "abandoned", "lost"};
const char* const kSearcherEventKinds[] = {"validation", "closed", "failed", "batch"};

// The first version whose tables this binary's reads expect (studies.deleted_at), the first
// with executions, the first with checkpoints.retained_at, and the first with searcher_events.
constexpr int kFirstReadableVersion = 2;
constexpr int kExecutionsVersion = 3;
constexpr int kRetentionVersion = 4;
constexpr int kSearcherEventsVersion = 5;
constexpr int kStoragesVersion = 6;
constexpr int kAccountsVersion = 7;
constexpr int kJobTimesVersion = 8;
constexpr int kEnvironmentVersion = 9;
constexpr int kStorageOwnersVersion = 10;
constexpr int kEvaluationsVersion = 11;
constexpr int kRunningJobsVersion = 12;
constexpr int kTrialEndsVersion = 13;
constexpr int kProvenanceVersion = 14;
constexpr int kChangeMarksVersion = 15;

// Storage identities as checkpoints.storages keeps them: space-separated.
std::string join_storages(const std::vector<std::string>& storages) {
  std::string out;
  for (const std::string& s : storages) out += (out.empty() ? "" : " ") + s;
  return out;
}

std::vector<std::string> split_storages(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string s; in >> s;) out.push_back(s);
  return out;
}

}  // namespace

const char* to_string(Policy p) {
  return kPolicies[static_cast<int>(p)];
}
std::optional<int64_t> study_id_in(const std::string& text) {
  return protocol::study_id_in(text);  // the one rule (protocol/names.h)
}

const char* to_string(StudyStatus s) {
  return kStudyStatuses[static_cast<int>(s)];
}
const char* to_string(TrialStatus s) {
  return kTrialStatuses[static_cast<int>(s)];
}
Policy parse_policy(const std::string& t) {
  return parse_name<Policy>(kPolicies, t, "policy");
}
StudyStatus parse_study_status(const std::string& t) {
  return parse_name<StudyStatus>(kStudyStatuses, t, "study status");
}
TrialStatus parse_trial_status(const std::string& t) {
  return parse_name<TrialStatus>(kTrialStatuses, t, "trial status");
}
const char* to_string(ExecutionKind k) {
  return kExecutionKinds[static_cast<int>(k)];
}
const char* to_string(ExecutionOutcome o) {
  return kExecutionOutcomes[static_cast<int>(o)];
}
ExecutionKind parse_execution_kind(const std::string& t) {
  return parse_name<ExecutionKind>(kExecutionKinds, t, "execution kind");
}
ExecutionOutcome parse_execution_outcome(const std::string& t) {
  return parse_name<ExecutionOutcome>(kExecutionOutcomes, t, "execution outcome");
}

bool SearcherEvent::operator==(const SearcherEvent& o) const {
  auto same = [](double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); };
  return kind == o.kind && trial == o.trial && step == o.step && same(value, o.value) &&
         std::equal(values.begin(), values.end(), o.values.begin(), o.values.end(), same) &&
         same(violation, o.violation);
}

bool MetricRow::operator==(const MetricRow& o) const {
  bool same_value = value == o.value || (std::isnan(value) && std::isnan(o.value));
  return trial == o.trial && step == o.step && name == o.name && same_value;
}

// A compiled statement, owned by the connection's cache.
class SearchPlan::Statement {
 public:
  Statement(SearchPlan& plan, const std::string& sql) {
    if (sqlite3_prepare_v3(plan.db_, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &stmt_, nullptr) !=
        SQLITE_OK) {
      plan.fail("preparing \"" + sql + "\"");
    }
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  sqlite3_stmt* get() const { return stmt_; }

 private:
  sqlite3_stmt* stmt_ = nullptr;
};

// One execution of a cached statement: binds the arguments (parameters ?1, ?2, ... in order),
// steps through the rows, and resets the statement when it goes out of scope, so that no
// statement keeps a read snapshot open between calls.
class SearchPlan::Query {
 public:
  template <typename... Args>
  Query(SearchPlan& plan, const char* sql, const Args&... args)
      : plan_(plan), stmt_(plan.prepare(sql).get()) {
    int i = 0;
    (bind(++i, args), ...);
  }
  ~Query() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  Query(const Query&) = delete;
  Query& operator=(const Query&) = delete;

  // Steps once: true when a row is ready.
  bool next() {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    plan_.fail(std::string("running \"") + sqlite3_sql(stmt_) + "\"");
  }
  // Steps a statement that returns no rows.
  void run() { next(); }
  // The same, where a constraint may refuse the write (the statement then undid itself): its
  // refusal, SQLite's message, for the caller to find out and say what was wrong. The checks that
  // name a problem run only then, not before every write (a master writes rows all the time).
  std::optional<std::string> refused() {
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_DONE || rc == SQLITE_ROW) return std::nullopt;
    if ((rc & 0xff) == SQLITE_CONSTRAINT) return std::string(sqlite3_errmsg(plan_.db_));
    plan_.fail(std::string("running \"") + sqlite3_sql(stmt_) + "\"");
  }

  bool is_null(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
  int64_t int64(int col) const { return sqlite3_column_int64(stmt_, col); }
  double real(int col) const { return sqlite3_column_double(stmt_, col); }
  std::string text(int col) const {
    auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
    return p ? std::string(p, sqlite3_column_bytes(stmt_, col)) : std::string();
  }
  std::optional<double> optional_real(int col) const {
    return is_null(col) ? std::nullopt : std::optional<double>(real(col));
  }
  nlohmann::json json(int col) const {
    return is_null(col) ? nlohmann::json() : nlohmann::json::parse(text(col));
  }

 private:
  void bind(int i, int64_t v) { check(sqlite3_bind_int64(stmt_, i, v)); }
  void bind(int i, int v) { check(sqlite3_bind_int64(stmt_, i, v)); }
  void bind(int i, double v) { check(sqlite3_bind_double(stmt_, i, v)); }
  void bind(int i, const std::string& v) {
    check(sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
  }
  void bind(int i, const char* v) { bind(i, std::string(v)); }
  void bind(int i, const nlohmann::json& v) { bind(i, v.dump()); }
  void bind(int i, std::nullopt_t) { check(sqlite3_bind_null(stmt_, i)); }
  template <typename T>
  void bind(int i, const std::optional<T>& v) {
    if (v) {
      bind(i, *v);
    } else {
      bind(i, std::nullopt);
    }
  }
  void check(int rc) {
    if (rc != SQLITE_OK) plan_.fail(std::string("binding \"") + sqlite3_sql(stmt_) + "\"");
  }

  SearchPlan& plan_;
  sqlite3_stmt* stmt_;
};

SearchPlan::SearchPlan(std::string path) : path_(std::move(path)) {}

SearchPlan::SearchPlan(SearchPlan&& o) noexcept
    : path_(std::move(o.path_)),
      in_memory_(o.in_memory_),
      db_(std::exchange(o.db_, nullptr)),
      version_(o.version_),
      depth_(o.depth_),
      after_commit_(std::move(o.after_commit_)),
      busy_timeout_ms_(o.busy_timeout_ms_),
      statements_(std::move(o.statements_)) {}

SearchPlan& SearchPlan::operator=(SearchPlan&& o) noexcept {
  std::swap(path_, o.path_);
  std::swap(in_memory_, o.in_memory_);
  std::swap(db_, o.db_);
  std::swap(version_, o.version_);
  std::swap(depth_, o.depth_);
  std::swap(after_commit_, o.after_commit_);
  std::swap(busy_timeout_ms_, o.busy_timeout_ms_);
  std::swap(statements_, o.statements_);
  return *this;
}

SearchPlan::~SearchPlan() {
  statements_.clear();  // statements must be finalized before the connection closes
  sqlite3_close(db_);
}

void SearchPlan::fail(const std::string& what) {
  std::string message = path_ + ": " + what + ": " + (db_ ? sqlite3_errmsg(db_) : "out of memory");
  if (db_ && (sqlite3_errcode(db_) & 0xff) == SQLITE_BUSY) {  // extended codes are on
    throw PlanBusy(message +
                   " (another process held the write lock for longer than the busy timeout)");
  }
  throw std::runtime_error(message);
}

void SearchPlan::explain_refusal(const std::string& refusal, const std::string& what,
                                 const std::string& table, int64_t id, const std::string& missing) {
  if (!exists(table, id)) throw std::invalid_argument(missing);
  throw std::runtime_error(path_ + ": " + what + ": " + refusal);
}

void SearchPlan::exec(const char* sql) {
  if (sqlite3_exec(db_, sql, nullptr, nullptr, nullptr) != SQLITE_OK) {
    fail(std::string("running \"") + sql + "\"");
  }
}

void SearchPlan::run(const char* sql) {
  Query(*this, sql).run();
}

bool SearchPlan::exists(const std::string& table, int64_t id) {
  Query q(*this, ("SELECT 1 FROM " + table + " WHERE id = ?").c_str(), id);
  return q.next();
}

SearchPlan::Statement& SearchPlan::prepare(const std::string& sql) {
  auto& slot = statements_[sql];
  if (!slot) slot = std::make_unique<Statement>(*this, sql);
  return *slot;
}

namespace {

// The plan holds every study's specs and metrics: a new one is made private to this user (or
// readable by the group of a setgid directory, protocol/file_modes.h) before SQLite opens it, and
// SQLite gives its WAL and shared memory the plan's mode. Files of ours that an older hippo made
// wider (0644) are narrowed. Whatever cannot be opened here is left for SQLite to refuse, naming
// it.
void make_plan_private(const std::string& path) {
  const std::filesystem::path file(path);
  const mode_t mode =
      protocol::file_mode_in(file.has_parent_path() ? file.parent_path().string() : ".");
  for (const char* suffix : {"", "-wal", "-shm"}) {
    const int create = *suffix ? 0 : O_CREAT;
    const int fd =
        ::open((path + suffix).c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | create, mode);
    if (fd < 0) continue;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() &&
        (st.st_mode & 0777 & ~mode) != 0)
      ::fchmod(fd, st.st_mode & 0777 & mode);
    ::close(fd);
  }
}

}  // namespace

SearchPlan SearchPlan::open(const std::string& path, const Options& options) {
  if (!options.in_memory) make_plan_private(path);
  SearchPlan plan(path);
  plan.in_memory_ = options.in_memory;
  // In memory: SQLite's memdb file system (a name without '/' is private to this connection),
  // not ":memory:", so that the page cache stays its usual size (a ":memory:" database is all
  // cache, and some of the pager's work per transaction walks the whole cache).
  // NOMUTEX: a SearchPlan, like its statement cache, is used by one thread at a time (plan.h), so
  // SQLite's lock around every call of the connection guards nothing.
  const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
  if (sqlite3_open_v2(options.in_memory ? "file:plan?vfs=memdb" : path.c_str(), &plan.db_,
                      options.in_memory ? flags | SQLITE_OPEN_URI : flags, nullptr) != SQLITE_OK) {
    plan.fail("cannot open");
  }
  sqlite3_extended_result_codes(plan.db_, 1);
  plan.set_busy_timeout(options.busy_timeout_ms);
  // Check the version before anything writes: reading the header is also what detects a file
  // that is not a database, and a refused file must be left byte for byte as it was.
  int version = plan.schema_version();
  if (version > latest_schema_version()) {
    throw std::runtime_error(path + ": schema version " + std::to_string(version) +
                             " is newer than this binary's " +
                             std::to_string(latest_schema_version()) + "; use a newer hippo");
  }
  // WAL: readers (the CLI querying a running master) never block the writer, and a commit is a
  // single append to the WAL. (In memory, the journal stays in memory.)
  plan.exec(options.in_memory ? "PRAGMA journal_mode = MEMORY" : "PRAGMA journal_mode = WAL");
  // FULL: a commit is on disk when it returns (the WAL is fsynced), so what the master has
  // acknowledged to a client or acted on survives a power loss too (plan.h).
  plan.exec(options.durable ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = OFF");
  plan.exec("PRAGMA foreign_keys = ON");
  plan.migrate();
  plan.version_ = plan.schema_version();
  return plan;
}

void SearchPlan::save_copy(const std::string& path) {
  if (std::filesystem::exists(path)) throw std::runtime_error(path + " exists");
  // An in-memory plan's connection reads file names as URIs, and VACUUM INTO would write to its
  // memdb file system unless told the real one.
  std::string target = path;
  if (in_memory_) {
    target = "file:";
    for (char c : std::filesystem::absolute(path).string()) {
      if (c == '%' || c == '?' || c == '#') {
        char escaped[4];
        std::snprintf(escaped, sizeof escaped, "%%%02X", static_cast<unsigned char>(c));
        target += escaped;
      } else {
        target += c;
      }
    }
    target += "?vfs=unix";
  }
  Query(*this, "VACUUM INTO ?", target).next();
}

SearchPlan SearchPlan::open_read_only(const std::string& path) {
  SearchPlan plan(path);
  // READONLY: SQLite itself refuses any write through this connection. (It may still create the
  // -wal and -shm files beside a plan whose last writer closed: they are SQLite's shared index,
  // not data.)
  if (sqlite3_open_v2(path.c_str(), &plan.db_, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX,
                      nullptr) != SQLITE_OK) {
    plan.fail("cannot open");
  }
  sqlite3_extended_result_codes(plan.db_, 1);
  plan.set_busy_timeout(Options{}.busy_timeout_ms);
  int version = plan.schema_version();
  if (version > latest_schema_version()) {
    throw std::runtime_error(path + ": schema version " + std::to_string(version) +
                             " is newer than this binary's " +
                             std::to_string(latest_schema_version()) + "; use a newer hippo");
  }
  if (version < kFirstReadableVersion) {
    throw std::runtime_error(
        path + ": schema version " + std::to_string(version) +
        (version == 0 ? " (not a search plan)"
                      : " is too old to read without migrating; any hippo command that opens it "
                        "for writing (e.g. `hippo --db FILE studies`) migrates it"));
  }
  plan.version_ = version;
  return plan;
}

void SearchPlan::snapshot(const std::function<void()>& fn) {
  in_transaction("BEGIN", fn);
}

int64_t SearchPlan::data_version() {
  Query q(*this, "PRAGMA data_version");
  q.next();
  return q.int64(0);
}

int SearchPlan::set_busy_timeout(int ms) {
  sqlite3_busy_timeout(db_, ms);
  return std::exchange(busy_timeout_ms_, ms);
}

int SearchPlan::schema_version() {
  Query q(*this, "PRAGMA user_version");
  q.next();
  return static_cast<int>(q.int64(0));
}

void SearchPlan::migrate() {
  const auto& steps = migrations();
  if (schema_version() == latest_schema_version()) return;  // no write lock needed
  // A step may rebuild a table that others refer to (SQLite's "12 steps" for a changed CHECK):
  // foreign keys are off while the steps run (the pragma is a no-op inside a transaction), and
  // each step is checked with foreign_key_check before it commits.
  exec("PRAGMA foreign_keys = OFF");
  try {
    for (size_t i = 0; i < steps.size(); ++i) {
      // The version is read again inside the write transaction: another process may have
      // migrated the file since we looked.
      transaction([&] {
        if (schema_version() > static_cast<int>(i)) return;
        exec(std::string(steps[i]).c_str());
        if (Query(*this, "PRAGMA foreign_key_check").next())
          throw std::runtime_error(path_ + ": migrating to schema version " +
                                   std::to_string(i + 1) + " broke a foreign key");
        exec(("PRAGMA user_version = " + std::to_string(i + 1)).c_str());
      });
    }
  } catch (...) {
    exec("PRAGMA foreign_keys = ON");
    throw;
  }
  exec("PRAGMA foreign_keys = ON");
}

void SearchPlan::transaction(const std::function<void()>& fn) {
  // IMMEDIATE takes the write lock up front, so waiting for another writer goes through the busy
  // timeout; a deferred transaction that reads first can fail at its first write without waiting.
  in_transaction("BEGIN IMMEDIATE", fn);
}

void SearchPlan::in_transaction(const char* begin, const std::function<void()>& fn) {
  if (depth_ > 0) {
    run("SAVEPOINT nested");
    ++depth_;
    const size_t actions = after_commit_.size();
    try {
      fn();
    } catch (...) {
      --depth_;
      after_commit_.resize(actions);       // what the savepoint undoes does not follow a commit
      if (!sqlite3_get_autocommit(db_)) {  // else an error has already rolled back everything
        run("ROLLBACK TO nested");
        run("RELEASE nested");
      }
      throw;
    }
    --depth_;
    run("RELEASE nested");
    return;
  }
  run(begin);
  depth_ = 1;
  try {
    fn();
    run("COMMIT");  // deferred foreign keys are checked here and may throw
  } catch (...) {
    depth_ = 0;
    after_commit_.clear();
    // Some errors (I/O, out of memory) have already rolled back the transaction.
    if (!sqlite3_get_autocommit(db_)) run("ROLLBACK");
    throw;
  }
  depth_ = 0;
  for (const std::function<void()>& action : std::exchange(after_commit_, {})) action();
}

void SearchPlan::single_write(const std::function<void()>& fn) {
  if (depth_ > 0)
    fn();
  else
    transaction(fn);
}

void SearchPlan::after_commit(std::function<void()> action) {
  if (depth_ == 0)
    action();
  else
    after_commit_.push_back(std::move(action));
}

// ---- studies ----

int64_t SearchPlan::create_study(const std::string& name, const nlohmann::json& spec,
                                 Policy policy) {
  if (name.empty()) throw std::invalid_argument("a study needs a name");
  int64_t id = 0;
  single_write([&] {
    if (study_by_name(name)) {
      throw std::invalid_argument("a study named \"" + name + "\" already exists");
    }
    Query(*this,
          "INSERT INTO studies (name, spec, policy, status, created_at) VALUES (?, ?, ?, ?, ?)",
          name, spec, to_string(policy), to_string(StudyStatus::kRunning), now())
        .run();
    id = sqlite3_last_insert_rowid(db_);
  });
  return id;
}

void SearchPlan::set_study_account(int64_t study, const StudyAccount& a) {
  single_write([&] {
    if (auto refusal =
            Query(*this,
                  "INSERT OR REPLACE INTO study_accounts (study_id, steps_executed, busy_s, "
                  "bytes_moved, transfer_s, master_s, run_s, paused_s) "
                  "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                  study, a.steps_executed, a.busy_s, a.bytes_moved, a.transfer_s, a.master_s,
                  a.run_s, a.paused_s)
                .refused())
      explain_refusal(*refusal, "study account", "studies", study,
                      "no study with id " + std::to_string(study));
  });
}

void SearchPlan::set_study_status(int64_t study, StudyStatus status, const std::string& error) {
  std::optional<double> ended;
  if (status != StudyStatus::kRunning) ended = now();
  std::optional<std::string> err;
  if (!error.empty()) err = error;
  single_write([&] {
    // A study that ends (done, failed, cancelled) has nothing left to measure again.
    Query(*this,
          "UPDATE studies SET status = ?1, ended_at = ?2, error = ?3, remeasure = "
          "CASE WHEN ?1 IN ('running', 'interrupted') THEN remeasure ELSE 0 END WHERE id = ?4",
          to_string(status), ended, err, study)
        .run();
    if (sqlite3_changes(db_) == 0)
      throw std::invalid_argument("no study with id " + std::to_string(study));
  });
}

void SearchPlan::resume_study(int64_t study) {
  single_write([&] {
    // Checked and changed in one statement: a study deleted or resumed by another process
    // meanwhile is not taken up twice.
    Query(*this,
          "UPDATE studies SET status = 'running', ended_at = NULL, error = NULL WHERE id = ? AND "
          "status = 'interrupted' AND deleted_at IS NULL",
          study)
        .run();
    if (sqlite3_changes(db_) == 0) {
      std::optional<StudyRow> row = this->study(study);
      if (!row || row->deleted_at) throw std::invalid_argument("no study " + std::to_string(study));
      throw std::invalid_argument("study " + row->name + " is " + to_string(row->status) +
                                  ": only an interrupted study can be resumed");
    }
  });
}

void SearchPlan::save_searcher_state(int64_t study, const nlohmann::json& state) {
  transaction([&] {
    Query(*this, "UPDATE studies SET searcher_state = ? WHERE id = ?", state, study).run();
    if (sqlite3_changes(db_) == 0)
      throw std::invalid_argument("no study with id " + std::to_string(study));
    Query(*this, "DELETE FROM searcher_events WHERE study_id = ?", study).run();
  });
}

void SearchPlan::add_searcher_event(int64_t study, const SearcherEvent& event) {
  // NaN is bound as NULL (SQLite has no NaN) and read back as NaN.
  std::optional<double> value;
  if (!std::isnan(event.value)) value = event.value;
  std::optional<std::string> evaluation;
  if (!event.values.empty()) {
    nlohmann::json values = nlohmann::json::array();
    for (double v : event.values) values.push_back(json_number(v));
    evaluation =
        nlohmann::json{{"values", values}, {"violation", json_number(event.violation)}}.dump();
  }
  single_write([&] {
    if (auto refusal =
            Query(*this,
                  "INSERT INTO searcher_events (study_id, seq, kind, trial, step, value, "
                  "evaluation) VALUES (?1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM "
                  "searcher_events WHERE study_id = ?1), ?2, ?3, ?4, ?5, ?6)",
                  study, kSearcherEventKinds[static_cast<int>(event.kind)], event.trial, event.step,
                  value, evaluation)
                .refused()) {
      explain_refusal(*refusal, "searcher event", "studies", study,
                      "no study with id " + std::to_string(study));
    }
  });
}

std::vector<SearcherEvent> SearchPlan::searcher_events(int64_t study) {
  std::vector<SearcherEvent> out;
  if (schema_version() < kSearcherEventsVersion) return out;
  const bool evaluations = schema_version() >= kEvaluationsVersion;
  Query q(*this,
          evaluations ? "SELECT kind, trial, step, value, evaluation FROM searcher_events WHERE "
                        "study_id = ? ORDER BY seq"
                      : "SELECT kind, trial, step, value, NULL FROM searcher_events WHERE "
                        "study_id = ? ORDER BY seq",
          study);
  while (q.next()) {
    SearcherEvent e;
    e.kind = parse_name<SearcherEvent::Kind>(kSearcherEventKinds, q.text(0), "searcher event");
    e.trial = q.int64(1);
    e.step = q.int64(2);
    e.value = q.is_null(3) ? NAN : q.real(3);
    if (!q.is_null(4)) {
      // Written by add_searcher_event; a row that is not in its form is a damaged plan.
      const nlohmann::json evaluation = nlohmann::json::parse(q.text(4));
      auto number = [](const nlohmann::json& j) {
        if (std::optional<double> v = number_of_json(j)) return *v;
        throw std::runtime_error("search plan: a searcher event's evaluation holds " + j.dump());
      };
      for (const nlohmann::json& v : evaluation.at("values")) e.values.push_back(number(v));
      e.violation = number(evaluation.at("violation"));
    }
    out.push_back(e);
  }
  return out;
}

void SearchPlan::delete_study(int64_t study) {
  transaction([&] {
    // The status is checked by the statement that changes it: a master that resumes the study
    // meanwhile makes it running, and then it is not deleted.
    Query(*this,
          "UPDATE studies SET deleted_at = ?, searcher_state = NULL WHERE id = ? AND deleted_at "
          "IS NULL AND status != 'running'",
          now(), study)
        .run();
    if (sqlite3_changes(db_) == 0) {
      std::optional<StudyRow> row = this->study(study);
      if (row && !row->deleted_at)
        throw std::invalid_argument("study " + row->name +
                                    " is running: cancel it first, or stop the run that has it");
      throw std::invalid_argument("no study with id " + std::to_string(study) + " to delete");
    }
    // What only this study needed goes; its trials, their metrics and stages stay: the tree is
    // shared, and a later study reuses their evaluations.
    Query(*this,
          "DELETE FROM eval_requests WHERE trial_id IN (SELECT id FROM trials WHERE "
          "study_id = ?)",
          study)
        .run();
    if (version_ >= kSearcherEventsVersion)
      Query(*this, "DELETE FROM searcher_events WHERE study_id = ?", study).run();
    Query(*this, "DELETE FROM events WHERE study_id = ?", study).run();
  });
}

// The columns read_study reads, and the table: a file older than version 7 (read only) has no
// accounts (a study's is a row of study_accounts, which a study may not have yet).
std::string SearchPlan::study_columns(bool searcher_state) {
  return std::string("id, name, spec, policy, status, created_at, ended_at, ") +
         (searcher_state ? "searcher_state" : "NULL") + ", error, deleted_at, " +
         (version_ >= kProvenanceVersion ? "remeasure, " : "0, ") +
         (version_ >= kAccountsVersion
              ? "COALESCE(a.steps_executed, 0), COALESCE(a.busy_s, 0), "
                "COALESCE(a.bytes_moved, 0), COALESCE(a.transfer_s, 0), COALESCE(a.master_s, 0), "
                "COALESCE(a.run_s, 0), " +
                    std::string(version_ >= kRunningJobsVersion ? "COALESCE(a.paused_s, 0)" : "0") +
                    " FROM studies LEFT JOIN study_accounts a ON a.study_id = id"
              : "0, 0, 0, 0, 0, COALESCE(ended_at - created_at, 0), 0 FROM studies");
}

StudyRow SearchPlan::read_study(Query& q) {
  StudyRow r;
  r.id = q.int64(0);
  r.name = q.text(1);
  r.spec = q.json(2);
  r.policy = parse_policy(q.text(3));
  r.status = parse_study_status(q.text(4));
  r.created_at = q.real(5);
  r.ended_at = q.optional_real(6);
  r.searcher_state = q.json(7);
  r.error = q.text(8);
  r.deleted_at = q.optional_real(9);
  r.remeasure = q.int64(10) != 0;
  r.account = {q.int64(11), q.real(12), q.int64(13), q.real(14),
               q.real(15),  q.real(16), q.real(17)};
  return r;
}

std::vector<StudyRow> SearchPlan::studies(bool searcher_state) {
  std::vector<StudyRow> rows;
  const std::string sql =
      "SELECT " + study_columns(searcher_state) + " WHERE deleted_at IS NULL ORDER BY id";
  Query q(*this, sql.c_str());
  while (q.next()) rows.push_back(read_study(q));
  return rows;
}

std::optional<StudyRow> SearchPlan::study(int64_t id) {
  const std::string sql = "SELECT " + study_columns() + " WHERE id = ?";
  Query q(*this, sql.c_str(), id);
  if (!q.next()) return std::nullopt;
  return read_study(q);
}

std::optional<StudyRow> SearchPlan::study_by_name(const std::string& name) {
  const std::string sql = "SELECT " + study_columns() + " WHERE name = ? AND deleted_at IS NULL";
  Query q(*this, sql.c_str(), name);
  if (!q.next()) return std::nullopt;
  return read_study(q);
}

// ---- trials ----

int64_t SearchPlan::add_trial(const TrialRow& row) {
  if (row.length < 1) {
    throw std::invalid_argument("trial " + std::to_string(row.id) + ": length " +
                                std::to_string(row.length) + " < 1");
  }
  int64_t number = 0;
  single_write([&] {
    if (!exists("studies", row.study_id)) {
      throw std::invalid_argument("trial " + std::to_string(row.id) + ": no study with id " +
                                  std::to_string(row.study_id));
    }
    if (exists("trials", row.id)) {
      throw std::invalid_argument("a trial with id " + std::to_string(row.id) + " already exists");
    }
    {
      Query q(*this, "SELECT COALESCE(MAX(number), 0) + 1 FROM trials WHERE study_id = ?",
              row.study_id);
      q.next();
      number = q.int64(0);
    }
    std::optional<std::string> reason;
    if (!row.end_reason.empty()) reason = row.end_reason;
    Query(*this,
          "INSERT INTO trials (id, study_id, number, root_key, params, hyperparams, length, "
          "status, end_reason, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
          row.id, row.study_id, number, row.root_key, row.params, to_json(row.hyperparams),
          row.length, to_string(row.status), reason, now())
        .run();
  });
  return number;
}

TrialId SearchPlan::next_trial_id() {
  Query q(*this, "SELECT COALESCE(MAX(id) + 1, 0) FROM trials");
  q.next();
  return q.int64(0);
}

void SearchPlan::set_trial_length(TrialId trial, int64_t length) {
  if (length < 1) {
    throw std::invalid_argument("trial " + std::to_string(trial) + ": length " +
                                std::to_string(length) + " < 1");
  }
  single_write([&] {
    Query(*this, "UPDATE trials SET length = ? WHERE id = ?", length, trial).run();
    if (sqlite3_changes(db_) == 0)
      throw std::invalid_argument("no trial with id " + std::to_string(trial));
  });
}

void SearchPlan::set_trial_status(TrialId trial, TrialStatus status, const std::string& end_reason,
                                  std::optional<int64_t> end_step) {
  std::optional<std::string> reason;
  if (!end_reason.empty()) reason = end_reason;
  single_write([&] {
    // A trial that ends records when; one that runs again (a searcher trains it further) has not.
    std::optional<double> ended_at;
    if (status != TrialStatus::kPending && status != TrialStatus::kRunning) ended_at = now();
    Query(*this,
          "UPDATE trials SET status = ?, end_reason = ?, end_step = ?, ended_at = ?, "
          "remeasure = 0 WHERE id = ?",
          to_string(status), reason, end_step, ended_at, trial)
        .run();
    if (sqlite3_changes(db_) == 0)
      throw std::invalid_argument("no trial with id " + std::to_string(trial));
  });
}

std::string SearchPlan::trial_columns() {
  return std::string(
             "id, study_id, number, root_key, params, hyperparams, length, status, "
             "end_reason, created_at, ") +
         (version_ >= kAccountsVersion ? "end_step" : "NULL") +
         (version_ >= kTrialEndsVersion ? ", ended_at" : ", NULL") +
         (version_ >= kProvenanceVersion ? ", remeasure" : ", 0");
}

namespace {

// The value `parsed` holds for `id`, or else the one `parse` makes (added to `parsed`, if any).
template <typename Value, typename Parse>
Value parsed_value(std::unordered_map<TrialId, Value>* parsed, TrialId id, Parse parse) {
  if (!parsed) return parse();
  auto it = parsed->find(id);
  if (it == parsed->end()) it = parsed->emplace(id, parse()).first;
  return it->second;
}

}  // namespace

TrialRow SearchPlan::read_trial(Query& q, ParsedTrialValues* parsed) {
  TrialRow r;
  r.id = q.int64(0);
  r.study_id = q.int64(1);
  r.number = q.int64(2);
  r.root_key = q.text(3);
  r.params = parsed_value(parsed ? &parsed->params : nullptr, r.id, [&] { return q.json(4); });
  r.hyperparams = parsed_value(parsed ? &parsed->hyperparams : nullptr, r.id,
                               [&] { return hyperparams_from_json(q.json(5)); });
  r.length = q.int64(6);
  r.status = parse_trial_status(q.text(7));
  r.end_reason = q.text(8);
  r.created_at = q.real(9);
  if (!q.is_null(10)) r.end_step = q.int64(10);
  if (!q.is_null(11)) r.ended_at = q.real(11);
  r.remeasure = q.int64(12) != 0;
  return r;
}

std::vector<TrialRow> SearchPlan::trials(int64_t study, ParsedTrialValues* parsed) {
  std::vector<TrialRow> rows;
  const std::string sql =
      "SELECT " + trial_columns() + " FROM trials WHERE study_id = ? ORDER BY number";
  Query q(*this, sql.c_str(), study);
  while (q.next()) rows.push_back(read_trial(q, parsed));
  return rows;
}

std::optional<TrialRow> SearchPlan::trial(TrialId id) {
  const std::string sql = "SELECT " + trial_columns() + " FROM trials WHERE id = ?";
  Query q(*this, sql.c_str(), id);
  if (!q.next()) return std::nullopt;
  return read_trial(q);
}

// ---- evaluation requests ----

void SearchPlan::add_eval_requests(TrialId trial, const std::vector<int64_t>& steps) {
  auto no_trial = [&] { return "no trial with id " + std::to_string(trial); };
  transaction([&] {
    if (steps.empty() && !exists("trials", trial)) throw std::invalid_argument(no_trial());
    for (int64_t step : steps) {
      if (step < 0) {
        throw std::invalid_argument("trial " + std::to_string(trial) + ": evaluation step " +
                                    std::to_string(step) + " < 0");
      }
      if (auto refusal =
              Query(*this, "INSERT OR IGNORE INTO eval_requests (trial_id, step) VALUES (?, ?)",
                    trial, step)
                  .refused()) {
        explain_refusal(*refusal, "evaluation request", "trials", trial, no_trial());
      }
    }
  });
}

std::vector<int64_t> SearchPlan::eval_requests(TrialId trial) {
  std::vector<int64_t> steps;
  Query q(*this, "SELECT step FROM eval_requests WHERE trial_id = ? ORDER BY step", trial);
  while (q.next()) steps.push_back(q.int64(0));
  return steps;
}

// ---- checkpoints ----

int64_t SearchPlan::add_checkpoint(const CheckpointRow& row) {
  int64_t id = 0;
  single_write([&] {
    Query stage(*this, "SELECT start_step, end_step FROM stages WHERE id = ?", row.stage);
    if (!stage.next()) {
      throw std::invalid_argument("checkpoint " + row.file + ": no stage with id " +
                                  std::to_string(row.stage));
    }
    if (row.step <= stage.int64(0) || row.step > stage.int64(1)) {
      throw std::invalid_argument("checkpoint " + row.file + ": step " + std::to_string(row.step) +
                                  " is outside stage " + std::to_string(row.stage) + " (" +
                                  std::to_string(stage.int64(0)) + ", " +
                                  std::to_string(stage.int64(1)) + "]");
    }
    Query(*this,
          "INSERT INTO checkpoints (stage_id, step, file, size, checksum, created_at, storages, "
          "environment, producer, lineage) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
          row.stage, row.step, row.file, row.size, row.checksum, now(), join_storages(row.storages),
          row.environment, row.producer, row.lineage)
        .run();
    id = sqlite3_last_insert_rowid(db_);
  });
  return id;
}

void SearchPlan::delete_checkpoint(int64_t id) {
  single_write([&] {
    Query(*this, "DELETE FROM checkpoints WHERE id = ?", id).run();
    if (sqlite3_changes(db_) == 0)
      throw std::invalid_argument("no checkpoint with id " + std::to_string(id));
  });
}

void SearchPlan::set_checkpoint_retained(int64_t id, std::optional<double> retained_at) {
  single_write([&] {
    Query(*this, "UPDATE checkpoints SET retained_at = ? WHERE id = ?", retained_at, id).run();
    if (sqlite3_changes(db_) == 0)
      throw std::invalid_argument("no checkpoint with id " + std::to_string(id));
  });
}

void SearchPlan::set_checkpoint_storages(int64_t id, const std::vector<std::string>& storages) {
  single_write([&] {
    Query(*this, "UPDATE checkpoints SET storages = ? WHERE id = ?", join_storages(storages), id)
        .run();
    if (sqlite3_changes(db_) == 0)
      throw std::invalid_argument("no checkpoint with id " + std::to_string(id));
  });
}

std::vector<CheckpointRow> SearchPlan::checkpoints() {
  return read_checkpoints("");
}

std::vector<CheckpointRow> SearchPlan::checkpoints_resting_on(const std::string& key) {
  // An older file (read only) knows no provenance; no key is "" (the unknown of older rows).
  if (schema_version() < kProvenanceVersion || key.empty()) return {};
  return read_checkpoints("WHERE instr(' ' || lineage || ' ', ' ' || ? || ' ') > 0 ", key);
}

template <typename... Args>
std::vector<CheckpointRow> SearchPlan::read_checkpoints(const std::string& where,
                                                        const Args&... args) {
  std::vector<CheckpointRow> rows;
  // An older file (read only) has no retained_at (version 3: none is retained) or no storages
  // (before 6: all in the master's directory).
  const int version = schema_version();
  const std::string query =
      std::string("SELECT id, stage_id, step, file, size, checksum, created_at, ") +
      (version >= kRetentionVersion ? "retained_at" : "NULL") + ", " +
      (version >= kStoragesVersion ? "storages" : "''") + ", " +
      (version >= kEnvironmentVersion ? "environment" : "''") + ", " +
      (version >= kProvenanceVersion ? "producer, lineage" : "'', ''") + " FROM checkpoints " +
      where + "ORDER BY stage_id, step";
  Query q(*this, query.c_str(), args...);
  while (q.next()) {
    CheckpointRow row{q.int64(0), q.int64(1), q.int64(2), q.text(3),
                      q.int64(4), q.text(5),  q.real(6)};
    row.retained_at = q.optional_real(7);
    row.storages = split_storages(q.text(8));
    row.environment = q.text(9);
    row.producer = q.text(10);
    row.lineage = q.text(11);
    rows.push_back(std::move(row));
  }
  return rows;
}

// ---- storage owners ----

void SearchPlan::set_storage_owner(const StorageOwnerRow& row) {
  single_write([&] {
    Query(*this,
          "INSERT INTO storage_owners (storage, key, key_name, since) VALUES (?, ?, ?, ?) "
          "ON CONFLICT (storage) DO NOTHING",
          row.storage, row.key, row.key_name, row.since)
        .run();
  });
}

std::vector<StorageOwnerRow> SearchPlan::storage_owners() {
  std::vector<StorageOwnerRow> rows;
  if (schema_version() < kStorageOwnersVersion) return rows;  // an older file (read only): none
  Query q(*this, "SELECT storage, key, key_name, since FROM storage_owners ORDER BY storage");
  while (q.next()) rows.push_back({q.text(0), q.text(1), q.text(2), q.real(3)});
  return rows;
}

// ---- metrics ----

std::optional<std::string> SearchPlan::add_metric(const MetricRow& row) {
  // NaN is bound as NULL (SQLite has no NaN) and read back as NaN.
  std::optional<double> value;
  if (!std::isnan(row.value)) value = row.value;
  std::optional<std::string> kept;
  single_write([&] {
    auto refusal =
        Query(*this,
              "INSERT INTO metrics (trial_id, step, name, value, producer, lineage) VALUES (?, ?, "
              "?, ?, ?, ?)",
              row.trial, row.step, row.name, value, row.producer, row.lineage)
            .refused();
    if (!refusal) return;
    Query old(*this, "SELECT value FROM metrics WHERE trial_id = ? AND step = ? AND name = ?",
              row.trial, row.step, row.name);
    if (old.next()) {  // the same metric again: nothing to write if it has the same value
      MetricRow stored = row;
      stored.value = old.is_null(0) ? NAN : old.real(0);
      if (stored == row) return;
      kept = "trial " + std::to_string(row.trial) + " step " + std::to_string(row.step) +
             ": metric " + row.name + " is already " + nlohmann::json(stored.value).dump() +
             ", refusing a different value " + nlohmann::json(row.value).dump();
      return;
    }
    explain_refusal(*refusal, "metric " + row.name, "trials", row.trial,
                    "metric " + row.name + ": no trial with id " + std::to_string(row.trial));
  });
  return kept;
}

// The columns read_metrics reads, of the metrics table `m`: a file older than version 14 (read
// only) has no provenance.
std::string SearchPlan::metric_columns() {
  return std::string("SELECT m.trial_id, m.step, m.name, m.value, ") +
         (version_ >= kProvenanceVersion ? "m.producer, m.lineage" : "'', ''") + " FROM metrics m ";
}

std::vector<MetricRow> SearchPlan::read_metrics(Query& q) {
  std::vector<MetricRow> rows;
  while (q.next()) {
    rows.push_back({q.int64(0), q.int64(1), q.text(2), q.optional_real(3).value_or(NAN), q.text(4),
                    q.text(5)});
  }
  return rows;
}

std::vector<MetricRow> SearchPlan::metrics(TrialId trial) {
  const std::string sql = metric_columns() + "WHERE m.trial_id = ? ORDER BY m.step, m.name";
  Query q(*this, sql.c_str(), trial);
  return read_metrics(q);
}

std::vector<MetricRow> SearchPlan::every_metric() {
  const std::string sql = metric_columns() + "ORDER BY m.trial_id, m.step, m.name";
  Query q(*this, sql.c_str());
  return read_metrics(q);
}

std::vector<MetricRow> SearchPlan::study_metrics(int64_t study) {
  const std::string sql = metric_columns() +
                          "JOIN trials t ON t.id = m.trial_id WHERE t.study_id = ? "
                          "ORDER BY m.trial_id, m.step, m.name";
  Query q(*this, sql.c_str(), study);
  return read_metrics(q);
}

std::vector<MetricRow> SearchPlan::metrics_resting_on(const std::string& key) {
  if (schema_version() < kProvenanceVersion || key.empty()) return {};  // as checkpoints_...
  const std::string sql = metric_columns() +
                          "WHERE instr(' ' || m.lineage || ' ', ' ' || ? || ' ') > 0 "
                          "ORDER BY m.trial_id, m.step, m.name";
  Query q(*this, sql.c_str(), key);
  return read_metrics(q);
}

void SearchPlan::delete_metric(TrialId trial, int64_t step, const std::string& name) {
  single_write([&] {
    Query(*this, "DELETE FROM metrics WHERE trial_id = ? AND step = ? AND name = ?", trial, step,
          name)
        .run();
    if (sqlite3_changes(db_) == 0)
      throw std::invalid_argument("no metric " + name + " of trial " + std::to_string(trial) +
                                  " at step " + std::to_string(step));
  });
}

void SearchPlan::reopen_trial_to_remeasure(TrialId trial) {
  single_write([&] {
    Query(*this,
          "UPDATE trials SET status = 'running', end_reason = NULL, end_step = NULL, remeasure = 1 "
          "WHERE id = ? AND status = 'done'",
          trial)
        .run();
    if (sqlite3_changes(db_) == 0)
      throw std::invalid_argument("trial " + std::to_string(trial) + " is not done");
  });
}

void SearchPlan::interrupt_study_to_remeasure(int64_t study, const std::string& why) {
  single_write([&] {
    // Checked and changed in one statement, as resume_study.
    Query(*this,
          "UPDATE studies SET remeasure = (remeasure OR status = 'done'), status = 'interrupted', "
          "ended_at = ?, error = ? WHERE id = ? AND status IN ('done', 'interrupted') AND "
          "deleted_at IS NULL",
          now(), why, study)
        .run();
    if (sqlite3_changes(db_) == 0)
      throw std::invalid_argument("study " + std::to_string(study) +
                                  " is neither done nor interrupted");
  });
}

// ---- executions ----

void SearchPlan::add_running_job(const RunningJobRow& row) {
  if (row.from < 0 || row.to < row.from || row.counted < row.from || row.counted > row.to)
    throw std::invalid_argument("running job " + std::to_string(row.job) + ": counted step " +
                                std::to_string(row.counted) + " is not within its steps");
  single_write([&] {
    Query(*this,
          "INSERT INTO running_jobs (incarnation, job, worker, trial_id, kind, from_step, "
          "to_step, counted, studies, files, started_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
          row.incarnation, row.job, row.worker, row.trial, to_string(row.kind), row.from, row.to,
          row.counted, nlohmann::json(row.studies), nlohmann::json(row.files), row.started_at)
        .run();
  });
}

void SearchPlan::set_running_job_counted(const std::string& incarnation, int64_t job,
                                         int64_t counted) {
  single_write([&] {
    Query(*this, "UPDATE running_jobs SET counted = ? WHERE incarnation = ? AND job = ?", counted,
          incarnation, job)
        .run();
  });
}

void SearchPlan::add_running_job_file(const std::string& incarnation, int64_t job, int64_t step,
                                      const std::string& file) {
  single_write([&] {
    Query(*this,
          "UPDATE running_jobs SET files = json_insert(files, '$[#]', json(?)) "
          "WHERE incarnation = ? AND job = ?",
          nlohmann::json::array({step, file}), incarnation, job)
        .run();
  });
}

void SearchPlan::delete_running_job(const std::string& incarnation, int64_t job) {
  single_write([&] {
    Query(*this, "DELETE FROM running_jobs WHERE incarnation = ? AND job = ?", incarnation, job)
        .run();
  });
}

std::vector<RunningJobRow> SearchPlan::running_jobs() {
  std::vector<RunningJobRow> rows;
  if (schema_version() < kRunningJobsVersion) return rows;
  Query q(*this,
          "SELECT incarnation, job, worker, trial_id, kind, from_step, to_step, counted, studies, "
          "files, started_at FROM running_jobs ORDER BY started_at, incarnation, job");
  while (q.next()) {
    RunningJobRow r;
    r.incarnation = q.text(0);
    r.job = q.int64(1);
    r.worker = q.text(2);
    r.trial = q.int64(3);
    r.kind = parse_execution_kind(q.text(4));
    r.from = q.int64(5);
    r.to = q.int64(6);
    r.counted = q.int64(7);
    r.studies = q.json(8).get<std::vector<int64_t>>();
    r.files = q.json(9).get<std::vector<std::pair<int64_t, std::string>>>();
    r.started_at = q.real(10);
    rows.push_back(std::move(r));
  }
  return rows;
}

int64_t SearchPlan::add_execution(const ExecutionRow& row) {
  auto what = [&] {
    return "execution of trial " + std::to_string(row.trial) + " [" + std::to_string(row.from) +
           ", " + std::to_string(row.to) + ")";
  };
  if (row.from < 0 || row.to < row.from || row.reached < row.from || row.reached > row.to)
    throw std::invalid_argument(what() + ": reached step " + std::to_string(row.reached) +
                                " is not within its steps");
  if (row.ended_at < row.started_at)
    throw std::invalid_argument(what() + ": ended before it started");
  std::optional<std::string> error;
  if (!row.error.empty()) error = row.error;
  if (row.busy_s && !(*row.busy_s >= 0))
    throw std::invalid_argument(what() + ": busy for " + std::to_string(*row.busy_s) + " s");
  if (!row.times.is_object()) throw std::invalid_argument(what() + ": times is not an object");
  std::optional<std::string> times;
  if (!row.times.empty()) times = row.times.dump();
  int64_t id = 0;
  transaction([&] {
    if (auto refusal = Query(*this,
                             "INSERT INTO executions (stage_id, trial_id, kind, from_step, "
                             "to_step, reached_step, worker, started_at, ended_at, outcome, "
                             "error, busy_s, times) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                             row.stage, row.trial, to_string(row.kind), row.from, row.to,
                             row.reached, row.worker, row.started_at, row.ended_at,
                             to_string(row.outcome), error, row.busy_s, times)
                           .refused()) {
      explain_refusal(*refusal, what(), "trials", row.trial,
                      what() + ": no trial with id " + std::to_string(row.trial));
    }
    id = sqlite3_last_insert_rowid(db_);
    for (int64_t study : row.studies) {
      if (auto refusal = Query(*this,
                               "INSERT OR IGNORE INTO execution_studies (execution_id, study_id) "
                               "VALUES (?, ?)",
                               id, study)
                             .refused()) {
        explain_refusal(*refusal, what(), "studies", study,
                        what() + ": no study with id " + std::to_string(study));
      }
    }
  });
  return id;
}

std::vector<ExecutionRow> SearchPlan::executions(std::optional<int64_t> study,
                                                 std::optional<int64_t> after) {
  std::vector<ExecutionRow> rows;
  if (schema_version() < kExecutionsVersion) return rows;  // a version-2 file, read only
  // The parts of a job's time came with version 8 (a read-only older file has none).
  const std::string columns =
      std::string(
          "e.id, e.stage_id, e.trial_id, e.kind, e.from_step, e.to_step, e.reached_step, "
          "e.worker, e.started_at, e.ended_at, e.outcome, e.error, "
          "(SELECT group_concat(study_id) FROM execution_studies WHERE execution_id = "
          "e.id), ") +
      (version_ >= kJobTimesVersion ? "e.busy_s, e.times" : "NULL, NULL");
  const std::string of_study = "SELECT " + columns +
                               " FROM execution_studies s JOIN executions e ON "
                               "e.id = s.execution_id WHERE s.study_id = ? AND e.id > ? "
                               "ORDER BY e.started_at, e.id";
  const std::string of_all =
      "SELECT " + columns + " FROM executions e WHERE e.id > ? ORDER BY started_at, id";
  const int64_t above = after.value_or(-1);
  auto q = study ? std::make_unique<Query>(*this, of_study.c_str(), *study, above)
                 : std::make_unique<Query>(*this, of_all.c_str(), above);
  while (q->next()) {
    ExecutionRow r;
    r.id = q->int64(0);
    r.stage = q->int64(1);
    r.trial = q->int64(2);
    r.kind = parse_execution_kind(q->text(3));
    r.from = q->int64(4);
    r.to = q->int64(5);
    r.reached = q->int64(6);
    r.worker = q->text(7);
    r.started_at = q->real(8);
    r.ended_at = q->real(9);
    r.outcome = parse_execution_outcome(q->text(10));
    r.error = q->text(11);
    const std::string ids = q->text(12);
    for (size_t at = 0; at < ids.size();) {
      size_t comma = ids.find(',', at);
      if (comma == std::string::npos) comma = ids.size();
      r.studies.push_back(std::stoll(ids.substr(at, comma - at)));
      at = comma + 1;
    }
    std::sort(r.studies.begin(), r.studies.end());
    r.busy_s = q->optional_real(13);
    if (!q->is_null(14)) r.times = nlohmann::json::parse(q->text(14));
    rows.push_back(std::move(r));
  }
  return rows;
}

// ---- events ----

void SearchPlan::add_event(std::optional<int64_t> study, const std::string& kind,
                           const nlohmann::json& detail) {
  single_write([&] {
    Query(*this, "INSERT INTO events (time, study_id, kind, detail) VALUES (?, ?, ?, ?)", now(),
          study, kind, detail)
        .run();
  });
}

std::vector<EventRow> SearchPlan::events(std::optional<int64_t> study, int64_t limit) {
  // The newest `limit` first, then reversed to put the oldest first.
  auto q = study ? std::make_unique<Query>(*this,
                                           "SELECT id, time, study_id, kind, detail FROM events "
                                           "WHERE study_id = ? ORDER BY id DESC LIMIT ?",
                                           *study, limit)
                 : std::make_unique<Query>(*this,
                                           "SELECT id, time, study_id, kind, detail FROM events "
                                           "ORDER BY id DESC LIMIT ?",
                                           limit);
  std::vector<EventRow> rows;
  while (q->next()) {
    std::optional<int64_t> s;
    if (!q->is_null(2)) s = q->int64(2);
    rows.push_back({q->int64(0), q->real(1), s, q->text(3), q->json(4)});
  }
  std::reverse(rows.begin(), rows.end());
  return rows;
}

std::optional<EventRow> SearchPlan::last_event(int64_t study, const std::string& kind) {
  Query q(*this,
          "SELECT id, time, study_id, kind, detail FROM events WHERE study_id = ? AND kind = ? "
          "ORDER BY id DESC LIMIT 1",
          study, kind);
  if (!q.next()) return std::nullopt;
  return EventRow{q.int64(0), q.real(1), q.int64(2), q.text(3), q.json(4)};
}

std::vector<EventRow> SearchPlan::events_of_kind(const std::string& kind) {
  Query q(*this, "SELECT id, time, study_id, kind, detail FROM events WHERE kind = ? ORDER BY id",
          kind);
  std::vector<EventRow> rows;
  while (q.next()) {
    std::optional<int64_t> s;
    if (!q.is_null(2)) s = q.int64(2);
    rows.push_back({q.int64(0), q.real(1), s, q.text(3), q.json(4)});
  }
  return rows;
}

// ---- the stage tree ----

void SearchPlan::save_stage(const Stage& s) {
  std::optional<int64_t> parent;
  if (s.parent != kNoStage) parent = s.parent;
  single_write([&] {
    Query(*this,
          "INSERT INTO stages (id, root_key, parent, start_step, end_step, trained_until, "
          "representative) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
          "root_key = excluded.root_key, parent = excluded.parent, "
          "start_step = excluded.start_step, end_step = excluded.end_step, "
          "trained_until = excluded.trained_until, representative = excluded.representative",
          s.id, s.root_key, parent, s.start, s.end, s.trained_until, s.representative)
        .run();
  });
}

void SearchPlan::save_tree(const StageTree& tree) {
  transaction([&] {
    for (const Stage& s : tree.stages()) save_stage(s);
  });
}

void SearchPlan::save_change(const StageTree& tree, const Change& change) {
  transaction([&] {
    for (StageId id : change.created) save_stage(tree.stage(id));
    for (StageId id : change.extended) save_stage(tree.stage(id));
    for (const Split& split : change.splits) {
      save_stage(tree.stage(split.stage));
      for (StageId child : tree.stage(split.upper).children) save_stage(tree.stage(child));
      // The states after more than `at` steps are now produced by the upper part.
      Query(*this, "UPDATE checkpoints SET stage_id = ? WHERE stage_id = ? AND step > ?",
            split.upper, split.stage, split.at)
          .run();
    }
  });
}

std::vector<Stage> SearchPlan::read_stages(const std::string& where, int64_t arg) {
  const std::string sql =
      "SELECT id, root_key, parent, start_step, end_step, trained_until, representative "
      "FROM stages " +
      where + " ORDER BY id";
  Query q = where.empty() ? Query(*this, sql.c_str()) : Query(*this, sql.c_str(), arg);
  std::vector<Stage> stages;
  while (q.next()) {
    Stage s;
    s.id = q.int64(0);
    s.root_key = q.text(1);
    s.parent = q.is_null(2) ? kNoStage : q.int64(2);
    s.start = q.int64(3);
    s.end = q.int64(4);
    s.trained_until = q.int64(5);
    s.representative = q.int64(6);
    stages.push_back(std::move(s));
  }
  return stages;
}

namespace {

// The root keys of a study's trials, for a WHERE that reads only their part of the tree.
constexpr const char* kStudyRootKeys =
    "WHERE root_key IN (SELECT DISTINCT root_key FROM trials WHERE study_id = ?) ";

}  // namespace

StageTree SearchPlan::load_tree(ParsedTrialValues* parsed) {
  return read_tree(std::nullopt, parsed).tree;
}

StudyTree SearchPlan::load_study_tree(int64_t study, ParsedTrialValues* parsed) {
  return read_tree(study, parsed);
}

std::vector<CheckpointRow> SearchPlan::study_tree_checkpoints(int64_t study) {
  return read_checkpoints(
      std::string("WHERE stage_id IN (SELECT id FROM stages ") + kStudyRootKeys + ") ", study);
}

StudyTree SearchPlan::read_tree(std::optional<int64_t> study, ParsedTrialValues* parsed) {
  std::vector<Stage> stages;
  std::vector<TrialRecord> trials;
  std::vector<StageId> plan_ids;
  // A read transaction: one snapshot for both tables, without taking the write lock.
  in_transaction("BEGIN", [&] {
    const std::string where = study ? kStudyRootKeys : "";
    stages = read_stages(where, study.value_or(0));
    // A study's stages are numbered in id order; the whole tree keeps the plan's ids (restore
    // checks that they are dense).
    for (Stage& s : stages) {
      plan_ids.push_back(s.id);
      if (study) s.id = static_cast<StageId>(plan_ids.size() - 1);
    }
    // Children in creation order, which is id order because stage ids are given in creation
    // order. (Only the children list is not stored: it is the parent column read backwards.)
    for (Stage& s : stages) {
      if (s.parent == kNoStage) continue;
      auto parent = std::lower_bound(plan_ids.begin(), plan_ids.end(), s.parent);
      if (parent == plan_ids.end() || *parent != s.parent) {
        throw std::runtime_error(path_ + ": stage " + std::to_string(plan_ids[s.id]) +
                                 " has a parent that is not stored");
      }
      s.parent = parent - plan_ids.begin();
      stages[s.parent].children.push_back(s.id);
    }
    const std::string sql =
        "SELECT id, root_key, hyperparams, length FROM trials " + where + "ORDER BY id";
    Query q = study ? Query(*this, sql.c_str(), *study) : Query(*this, sql.c_str());
    while (q.next()) {
      const TrialId id = q.int64(0);
      trials.push_back({id, q.text(1),
                        parsed_value(parsed ? &parsed->hyperparams : nullptr, id,
                                     [&] { return hyperparams_from_json(q.json(2)); }),
                        q.int64(3)});
    }
  });
  return {StageTree::restore(std::move(stages), std::move(trials)), std::move(plan_ids)};
}

// ---- change marks ----

bool SearchPlan::has_change_marks() {
  return schema_version() >= kChangeMarksVersion;
}

PlanChanges SearchPlan::changes_since(int64_t since, ParsedTrialValues* parsed) {
  if (!has_change_marks())
    throw std::runtime_error(path_ + ": the plan has no change marks (schema " +
                             std::to_string(kChangeMarksVersion) + ")");
  PlanChanges changes;
  snapshot([&] {
    {
      Query q(*this, "SELECT number FROM plan_changes");
      if (q.next()) changes.number = q.int64(0);
    }
    // Every row at the first read (rows written before schema 15 have no mark); then those
    // marked since.
    const bool all = since < 0;
    const std::string trials = "(SELECT trial_id FROM trial_marks WHERE changed > ?) ",
                      stages = "(SELECT stage_id FROM stage_marks WHERE changed > ?) ";
    auto query = [&](const std::string& sql) {
      return all ? Query(*this, sql.c_str()) : Query(*this, sql.c_str(), since);
    };
    {
      Query q = query("SELECT " + trial_columns() + " FROM trials " +
                      (all ? "" : "WHERE id IN " + trials) + "ORDER BY id");
      while (q.next()) changes.trials.push_back(read_trial(q, parsed));
    }
    {
      Query q = query(metric_columns() + (all ? "" : "WHERE m.trial_id IN " + trials) +
                      "ORDER BY m.trial_id, m.step, m.name");
      changes.metrics = read_metrics(q);
    }
    changes.stages = read_stages(all ? "" : "WHERE id IN " + stages, since);
    changes.checkpoints =
        all ? read_checkpoints("") : read_checkpoints("WHERE stage_id IN " + stages, since);
  });
  return changes;
}

}  // namespace hippo
