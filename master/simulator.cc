#include "master/simulator.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <filesystem>
#include <list>
#include <random>
#include <stdexcept>
#include <tuple>

#include "protocol/clock.h"
#include "protocol/wire.h"

namespace hippo::master {

const JobTimes& TimeModel::of(const std::string& root_key) const {
  auto it = by_root_key.find(root_key);
  return it == by_root_key.end() ? defaults : it->second;
}

std::map<std::string, JobTimes> times_from_plan(const std::string& path) {
  SearchPlan plan = SearchPlan::open_read_only(path);
  // Least squares of seconds = job_s + steps * step_s + evals * eval_s over a root key's done
  // training jobs: the sums of the normal equations over (1, steps, evals).
  struct Fit {
    double s[3][3] = {};  // sum of u_i * u_j, u = (1, steps, evals)
    double sy[3] = {};    // sum of u_i * seconds
    double eval_sum = 0;  // evaluation-only jobs
    int64_t evals = 0;
    int64_t bytes = 0, checkpoints = 0;
  };
  std::map<std::string, Fit> fits;
  std::map<TrialId, std::string> root_of;            // trial -> its architecture's root key
  std::map<TrialId, std::vector<int64_t>> measured;  // trial -> the steps of its metrics
  for (const StudyRow& study : plan.studies()) {
    const StudySpec spec = parse_spec(study.spec);
    for (const TrialRow& t : plan.trials(study.id)) root_of[t.id] = spec.root_key_of(t.params);
    for (const MetricRow& m : plan.study_metrics(study.id)) {
      std::vector<int64_t>& steps = measured[m.trial];
      if (steps.empty() || steps.back() != m.step) steps.push_back(m.step);  // by (step, name)
    }
  }
  for (const ExecutionRow& e : plan.executions(std::nullopt)) {
    auto root = root_of.find(e.trial);
    if (e.outcome != ExecutionOutcome::kDone || root == root_of.end()) continue;
    Fit& f = fits[root->second];
    const double seconds = e.ended_at - e.started_at;
    if (e.kind == ExecutionKind::kEvaluate) {
      f.eval_sum += seconds;
      ++f.evals;
      continue;
    }
    // The job evaluated the states its representative has metrics of in (from, to] (each state
    // is evaluated once, whichever trial asked).
    const std::vector<int64_t>& steps = measured[e.trial];
    const double evals = static_cast<double>(std::upper_bound(steps.begin(), steps.end(), e.to) -
                                             std::upper_bound(steps.begin(), steps.end(), e.from));
    const double u[3] = {1, static_cast<double>(e.to - e.from), evals};
    for (int i = 0; i < 3; ++i) {
      f.sy[i] += u[i] * seconds;
      for (int j = 0; j < 3; ++j) f.s[i][j] += u[i] * u[j];
    }
  }
  const StageTree tree = plan.load_tree();
  for (const CheckpointRow& c : plan.checkpoints()) {
    auto f = fits.find(shared_root_key(tree.stage(c.stage).root_key));
    if (f == fits.end()) continue;
    f->second.bytes += c.size;
    ++f->second.checkpoints;
  }
  // Solves the normal equations over the first n unknowns (Cramer's rule); false when they are
  // degenerate (jobs of one length, or evaluations in proportion to steps, say nothing of them).
  auto solve = [](const Fit& f, int n, double out[3]) {
    auto det = [&](const double m[3][3]) {
      if (n == 1) return m[0][0];
      if (n == 2) return m[0][0] * m[1][1] - m[0][1] * m[1][0];
      return m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) -
             m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0]) +
             m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
    };
    const double d = det(f.s);
    double scale = 1;
    for (int i = 0; i < n; ++i) scale *= f.s[i][i];
    if (!(std::abs(d) > 1e-9 * scale)) return false;
    for (int k = 0; k < n; ++k) {
      double m[3][3];
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) m[i][j] = j == k ? f.sy[i] : f.s[i][j];
      out[k] = det(m) / d;
    }
    return true;
  };
  std::map<std::string, JobTimes> out;
  for (const auto& [root, f] : fits) {
    if (f.s[0][1] <= 0) continue;  // no training steps
    JobTimes t;
    double x[3] = {0, 0, 0};
    if (solve(f, 3, x) && x[0] >= 0 && x[1] > 0 && x[2] >= 0) {
      t.job_s = x[0];
      t.step_s = x[1];
      t.eval_s = x[2];
    } else {
      // Evaluations in step with the steps (a trial-based run: every job evaluates once an
      // epoch) count in step_s; jobs all of one length say nothing of a job's own cost (0).
      if (solve(f, 2, x) && x[0] >= 0 && x[1] > 0) {
        t.job_s = x[0];
        t.step_s = x[1];
      } else {
        t.step_s = f.sy[0] / f.s[0][1];
      }
      t.eval_s =
          f.evals > 0 ? std::max(0.0, f.eval_sum / static_cast<double>(f.evals) - t.job_s) : 0;
    }
    if (f.checkpoints > 0) t.state_bytes = f.bytes / f.checkpoints;
    out[root] = t;
  }
  return out;
}

nlohmann::json SimulatedRun::to_json() const {
  nlohmann::json s = nlohmann::json::array();
  for (const StudySummary& x : studies) s.push_back(x.to_json());
  nlohmann::json messages = nlohmann::json::object();
  for (const auto& [type, c] : master.messages)
    messages[type] = {{"count", c.count}, {"cpu_s", c.cpu_s}};
  return {{"studies", s},
          {"makespan_s", makespan_s},
          {"busy_s", busy_s},
          {"gpu_hours", busy_s / 3600},
          {"utilization", utilization},
          {"steps_executed", steps_executed},
          {"steps_unique", steps_unique},
          {"steps_trial_based", steps_trial_based},
          {"critical_path_s", critical_path_s},
          {"jobs", jobs},
          {"failures", failures},
          {"master",
           {{"messages", messages},
            {"decisions", {{"count", master.decisions.count}, {"cpu_s", master.decisions.cpu_s}}},
            {"jobs", master.jobs}}},
          {"plan_bytes", plan_bytes},
          {"wall_s", wall_s}};
}

namespace {

// The simulation of one run: an event queue in virtual time, the simulated workers, and the
// transport through which the master reads their messages and writes to them.
class Simulation {
 public:
  Simulation(const std::vector<SimulatedStudy>& studies, const SimulationOptions& options,
             MetricModel& metrics, double& now)
      : studies_(studies), options_(options), metrics_(metrics), now_(now), random_(options.seed) {
    for (const SimulatedStudy& s : studies_)
      for (const auto& [root_key, model] : s.spec.architectures)
        runs_.push_back({run_spec(s.spec, model), &s, root_key});
  }

  SimulatedRun run(const std::string& plan_path, const std::string& checkpoints);

 private:
  // Messages between the master and the workers: what the master sends is handled at once (it
  // only schedules events); what workers send waits in the inbox until its event fires.
  class SimTransport : public Transport {
   public:
    explicit SimTransport(Simulation& sim) : sim_(sim) {}
    std::optional<protocol::Envelope> receive(int) override {
      if (inbox_.empty()) return std::nullopt;
      protocol::Envelope e = std::move(inbox_.front());
      inbox_.pop_front();
      return e;
    }
    void send(const std::string& peer, const std::string& body) override {
      sim_.from_master(peer, body);
    }
    // Every simulated worker is trusted with every role, as with --insecure.
    protocol::PeerIdentity identity_of(const protocol::Envelope&) const override {
      return protocol::from_user_id("");
    }
    std::deque<protocol::Envelope> inbox_;

   private:
    Simulation& sim_;
  };

  // kAbandoned: the worker stopped its job when told to abandon it.
  enum class EventKind { kMessage, kDone, kAbandoned, kSubmit, kFailure, kRestart };
  struct Event {
    double time = 0;
    int order = 0;  // at equal times: messages (0) before done (1)
    int64_t seq = 0;
    EventKind kind = EventKind::kMessage;
    size_t index = 0;        // the worker, or the study for kSubmit
    int64_t generation = 0;  // the worker's at scheduling: stale once it changed
    std::string body;        // kMessage: the message, serialized when it was scheduled
    int64_t snapshot = -1;   // kMessage: the state a snapshot message reports, else -1
    bool operator>(const Event& o) const {
      return std::tie(time, order, seq) > std::tie(o.time, o.order, o.seq);
    }
  };

  struct Worker {
    std::string peer;
    bool up = true;
    int64_t generation = 0;  // changes when its pending events become void (failure, abandon)
    std::string incarnation;
    std::list<int64_t> held;  // most recently used first
    // The current job, if any.
    int64_t job = -1;
    protocol::Job order;
    const SimulatedStudy* study = nullptr;
    std::string root_key;  // the job's architecture's
    JobTimes times;
    double started = 0, train_from = 0;     // virtual times: the job arrived, training began
    std::multimap<int64_t, double> writes;  // the job's snapshots: step -> written at
  };

  void schedule(double at, int order, EventKind kind, size_t index) {
    const int64_t generation = kind == EventKind::kSubmit ? 0 : workers_[index].generation;
    push({at, order, 0, kind, index, generation, {}, -1});
  }
  // A message of worker `index`, sent at `at`.
  void schedule_message(double at, size_t index, const nlohmann::json& message,
                        int64_t snapshot = -1) {
    push({at, 0, 0, EventKind::kMessage, index, workers_[index].generation,
          protocol::serialize(message), snapshot});
  }
  void push(Event e) {
    e.seq = seq_++;
    queue_.push_back(std::move(e));
    std::push_heap(queue_.begin(), queue_.end(), std::greater<>());
  }
  Event pop() {
    std::pop_heap(queue_.begin(), queue_.end(), std::greater<>());
    Event e = std::move(queue_.back());
    queue_.pop_back();
    return e;
  }
  void deliver(Worker& w, std::string body) {
    transport_->inbox_.push_back({w.peer, std::move(body), "", -1});
  }
  void deliver(Worker& w, const nlohmann::json& message) {
    deliver(w, protocol::serialize(message));
  }
  void hold(Worker& w, int64_t state) {
    w.held.remove(state);
    w.held.push_front(state);
    while (static_cast<int64_t>(w.held.size()) > options_.cache_states) w.held.pop_back();
  }
  std::vector<int64_t> held(const Worker& w) const { return {w.held.begin(), w.held.end()}; }
  nlohmann::json hello(const Worker& w) const {
    protocol::Hello h;
    h.name = w.peer;
    h.device = "simulated";
    h.devices = options_.devices;
    h.held = held(w);
    h.runs_trainers = true;
    return h.to_json();
  }
  size_t worker_of(const std::string& peer) const { return std::stoul(peer.substr(4)); }

  // When the job's training reaches `step` (its evaluations before it included).
  double time_at(const Worker& w, int64_t step) const {
    const auto& evals = w.order.eval_steps;
    const auto before = std::lower_bound(evals.begin(), evals.end(), step) - evals.begin();
    return w.train_from + static_cast<double>(step - w.order.from) * w.times.step_s +
           static_cast<double>(before) * w.times.eval_s;
  }
  // The writer takes snapshots in step order as training passes them: one ordered mid-job (a
  // split) for an earlier step than those already planned waits only for those before it.
  void snapshot(Worker& w, const protocol::SnapshotOrder& order) {
    const double write_s = order.file.empty() ? 0
                                              : static_cast<double>(w.times.state_bytes) /
                                                    options_.times.bandwidth_bytes_s;
    double start = time_at(w, order.step);
    if (auto next = w.writes.upper_bound(order.step); next != w.writes.begin())
      start = std::max(start, std::prev(next)->second);
    const double written = start + write_s;
    w.writes.emplace(order.step, written);
    schedule_message(
        written, worker_of(w.peer),
        protocol::Snapshot{.job = w.job,
                           .step = order.step,
                           .state = order.state,
                           .file = order.file,
                           .bytes = order.file.empty() ? 0 : w.times.state_bytes,
                           .incarnation = w.incarnation,
                           // A file's is required; a simulated file has no bytes to
                           // hash, and nothing reads it.
                           .checksum = order.file.empty() ? "" : protocol::content_hash(order.file)}
            .to_json(),
        order.state);
  }

  // When the job's last snapshot is written (its training's start if it has none).
  static double last_written(const Worker& w) {
    double last = w.train_from;
    for (const auto& [step, written] : w.writes) last = std::max(last, written);
    return last;
  }

  void from_master(const std::string& peer, const std::string& body);
  void start_job(Worker& w, protocol::Job order);
  void fire(Event e);
  void end_job(Worker& w) {
    busy_s_ += now_ - w.started;
    w.job = -1;
  }
  void schedule_failure(size_t index) {
    if (options_.mtbf_s <= 0) return;
    std::exponential_distribution<double> after(1 / options_.mtbf_s);
    schedule(now_ + after(random_), 0, EventKind::kFailure, index);
  }

  const std::vector<SimulatedStudy>& studies_;
  // What a job of each architecture of each study is sent, to find a job's study and root key.
  struct Run {
    protocol::RunSpec spec;
    const SimulatedStudy* study;
    std::string root_key;
  };
  std::vector<Run> runs_;
  const SimulationOptions& options_;
  MetricModel& metrics_;
  double& now_;
  std::mt19937_64 random_;
  std::vector<Event> queue_;  // a heap (push, pop): the earliest first
  int64_t seq_ = 0;
  std::vector<Worker> workers_;
  SimTransport* transport_ = nullptr;
  double busy_s_ = 0;
  int64_t failures_ = 0;
};

void Simulation::from_master(const std::string& peer, const std::string& body) {
  Worker& w = workers_.at(worker_of(peer));
  if (!w.up) return;  // lost on the way, as a real ROUTER drops what it cannot deliver
  const nlohmann::json m = protocol::parse(body);
  const std::string type = m.at("type");
  if (type == protocol::Welcome::kType) {
    w.incarnation = protocol::Welcome::from_json(m).incarnation;
  } else if (type == protocol::Job::kType) {
    start_job(w, protocol::Job::from_json(m));
  } else if (type == protocol::SnapshotAt::kType) {
    protocol::SnapshotAt at = protocol::SnapshotAt::from_json(m);
    // A real worker that has passed the step already cannot snapshot there; it ignores the order.
    if (at.job == w.job && time_at(w, at.order.step) >= now_) snapshot(w, at.order);
  } else if (type == protocol::Abandon::kType) {
    if (protocol::Abandon::from_json(m).job != w.job) return;
    // It stops at its next step; what it has not announced yet is lost.
    ++w.generation;
    schedule(now_ + w.times.step_s, 1, EventKind::kAbandoned, worker_of(peer));
  } else if (type == protocol::Reset::kType) {
    deliver(w, hello(w));
  }
  // Shutdown: the simulation ends on its own; Prepare, EndTrainer: simulated workers start no
  // trainers.
}

void Simulation::start_job(Worker& w, protocol::Job order) {
  auto run =
      std::find_if(runs_.begin(), runs_.end(), [&](const Run& r) { return r.spec == order.run; });
  if (run == runs_.end()) throw std::logic_error("simulate: a job of no submitted study");
  w.study = run->study;
  w.root_key = run->root_key;
  w.times = options_.times.of(w.root_key);
  w.job = order.id;
  w.order = std::move(order);
  // A model that measured this trial's own times (recorded curves) overrides its root key's.
  if (auto own = metrics_.times(w.study->spec, w.root_key, w.order.hyperparams)) {
    w.times.step_s = own->step_s;
    w.times.eval_s = own->eval_s;
  }
  w.started = now_;
  double load_s = 0;
  if (w.order.parent_state >= 0) {
    const bool in_memory =
        std::find(w.held.begin(), w.held.end(), w.order.parent_state) != w.held.end();
    if (!in_memory)
      load_s = static_cast<double>(w.times.state_bytes) / options_.times.bandwidth_bytes_s;
    hold(w, w.order.parent_state);
  }
  w.train_from = now_ + w.times.job_s + load_s;
  w.writes.clear();
  const size_t index = worker_of(w.peer);
  for (int64_t step : w.order.eval_steps) {
    protocol::Metric metric{
        .job = w.job,
        .step = step,
        .metrics = metrics_.metrics(w.study->spec, w.root_key, w.order.hyperparams, step),
        .incarnation = w.incarnation};
    schedule_message(time_at(w, step) + w.times.eval_s, index, metric.to_json());
  }
  for (const protocol::SnapshotOrder& o : w.order.snapshots) snapshot(w, o);
  const bool eval_at_end = !w.order.eval_steps.empty() && w.order.eval_steps.back() == w.order.to;
  schedule(time_at(w, w.order.to) + (eval_at_end ? w.times.eval_s : 0), 1, EventKind::kDone, index);
}

void Simulation::fire(Event e) {
  if (e.kind == EventKind::kSubmit) return;  // handled by run()
  Worker& w = workers_[e.index];
  if (e.generation != w.generation) return;  // void: the worker failed, or abandoned the job
  switch (e.kind) {
    case EventKind::kMessage:
      if (e.snapshot >= 0) hold(w, e.snapshot);
      deliver(w, std::move(e.body));
      break;
    case EventKind::kAbandoned:
      deliver(w, protocol::Abandoned{.job = w.job, .held = held(w), .incarnation = w.incarnation}
                     .to_json());
      end_job(w);
      break;
    case EventKind::kDone: {
      if (const double written = last_written(w); written > now_) {  // still being written
        schedule(written, 1, EventKind::kDone, e.index);
        break;
      }
      deliver(w, protocol::Done{.job = w.job,
                                .step = w.order.to,
                                .busy_s = now_ - w.started,
                                .held = held(w),
                                .incarnation = w.incarnation}
                     .to_json());
      end_job(w);
      break;
    }
    case EventKind::kFailure:
      ++failures_;
      ++w.generation;
      if (w.job >= 0) end_job(w);
      w.held.clear();
      w.up = false;
      schedule(now_ + options_.restart_s, 0, EventKind::kRestart, e.index);
      break;
    case EventKind::kRestart: {
      w.up = true;
      w.incarnation.clear();
      deliver(w, hello(w));
      schedule_failure(e.index);
      break;
    }
    case EventKind::kSubmit:
      break;
  }
}

SimulatedRun Simulation::run(const std::string& plan_path, const std::string& checkpoints) {
  const auto real_start = std::chrono::steady_clock::now();
  now_ = 0;
  Options master_options;
  master_options.checkpoints = checkpoints;
  master_options.worker_timeout_s = 1e15;  // heartbeats are not simulated (simulator.h)
  master_options.rules = options_.rules;
  master_options.rules.exec.trainer = true;  // nothing runs: a simulated trainer is harmless
  master_options.order = options_.order;
  master_options.events = options_.events;
  auto transport = std::make_unique<SimTransport>(*this);
  transport_ = transport.get();
  SearchPlan::Options plan_options;
  plan_options.durable = false;
  plan_options.in_memory = true;  // written to plan_path at the end
  Master master(SearchPlan::open(plan_path, plan_options), master_options, std::move(transport));

  for (int64_t i = 0; i < options_.workers; ++i) {
    workers_.push_back({});
    workers_.back().peer = "sim-" + std::to_string(i);
    fire({0, 0, 0, EventKind::kRestart, static_cast<size_t>(i), 0, {}, -1});  // its first hello
  }
  for (size_t i = 0; i < studies_.size(); ++i)
    schedule(studies_[i].submit_at_s, 0, EventKind::kSubmit, i);
  std::vector<int64_t> ids(studies_.size(), -1);
  size_t submitted = 0;
  auto running = [&] {
    return std::any_of(ids.begin(), ids.end(),
                       [&](int64_t id) { return id >= 0 && master.study_running(id); });
  };
  while (true) {
    master.poll(0);
    if (submitted == studies_.size() && !running()) break;
    if (master.expanding() || !transport_->inbox_.empty()) continue;
    // The master may wait for a time of its own (a stage retried after a failure): the clock
    // goes there if nothing happens before.
    const std::optional<double> wake = master.seconds_to_wake();
    if (wake && (queue_.empty() || now_ + *wake < queue_.front().time)) {
      now_ += std::max(*wake, 1e-6);
      continue;
    }
    if (queue_.empty())
      throw std::runtime_error(
          "simulate: nothing more can happen and a study is still running (no simulated worker "
          "can take its work: a pipeline needs --devices, or every trial failed to start)");
    now_ = queue_.front().time;
    while (!queue_.empty() && queue_.front().time == now_) {
      Event e = pop();
      if (e.kind == EventKind::kSubmit) {
        const SimulatedStudy& s = studies_[e.index];
        ids[e.index] = master.submit(s.spec, s.spec_json, options_.policy);
        ++submitted;
      } else {
        fire(std::move(e));
      }
    }
  }

  SimulatedRun out;
  for (size_t i = 0; i < studies_.size(); ++i) {
    StudySummary s = master.summary(ids[i]);
    out.makespan_s = std::max(out.makespan_s, studies_[i].submit_at_s + s.wall_s);
    out.steps_executed += s.steps_executed;
    out.steps_unique += s.steps_unique;
    out.steps_trial_based += s.steps_trial_based;
    // Its longest path may lie in any of its architectures: the slowest one's step time bounds it.
    double step_s = 0;
    for (const auto& [root_key, model] : studies_[i].spec.architectures)
      step_s = std::max(step_s, options_.times.of(root_key).step_s);
    out.critical_path_s =
        std::max(out.critical_path_s, static_cast<double>(s.critical_path_steps) * step_s);
    out.studies.push_back(std::move(s));
  }
  for (Worker& w : workers_)
    if (w.job >= 0) end_job(w);  // work of ended studies still under way counts
  out.busy_s = busy_s_;
  out.utilization = out.makespan_s > 0
                        ? out.busy_s / (static_cast<double>(options_.workers) * out.makespan_s)
                        : 0;
  out.failures = failures_;
  out.master = master.costs();
  master.save_plan_copy(plan_path);
  out.jobs = out.master.jobs;
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - real_start).count();
  return out;
}

// A private directory for a plan that is thrown away.
struct TemporaryDirectory {
  TemporaryDirectory() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "hippo-simulate-XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("cannot make a directory " + pattern);
    path = pattern;
  }
  ~TemporaryDirectory() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string path;
};

int64_t file_bytes(const std::string& path) {
  std::error_code ec;
  int64_t total = 0;
  for (const char* suffix : {"", "-wal"}) {
    auto size = std::filesystem::file_size(path + suffix, ec);
    if (!ec) total += static_cast<int64_t>(size);
  }
  return total;
}

}  // namespace

SimulatedRun simulate(const std::vector<SimulatedStudy>& studies, const SimulationOptions& options,
                      MetricModel& metrics) {
  if (options.workers < 1) throw std::invalid_argument("--workers: at least 1");
  // The process reads virtual time while the simulation runs (protocol/clock.h).
  struct VirtualTime {
    double now = 0;
    VirtualTime() { use_virtual_time(&now); }
    ~VirtualTime() { use_virtual_time(nullptr); }
  };
  TemporaryDirectory dir;
  const std::string plan = options.plan_path.empty() ? dir.path + "/plan.db" : options.plan_path;
  SimulatedRun out;
  {
    VirtualTime time;
    out = Simulation(studies, options, metrics, time.now).run(plan, dir.path + "/checkpoints");
  }
  out.plan_bytes = file_bytes(plan);
  return out;
}

}  // namespace hippo::master
