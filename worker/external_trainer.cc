#include "worker/external_trainer.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "protocol/clock.h"
#include "protocol/text.h"
#include "protocol/version.h"
#include "stagetree/sequence_json.h"

namespace hippo::worker {
namespace {

using nlohmann::json;

std::vector<std::string> command_of(const protocol::RunSpec& run) {
  const json& command = run.model.contains("command") ? run.model["command"] : json();
  if (!command.is_array() || command.empty())
    throw TrainerError("external trainer: model.command: expected a list of strings");
  std::vector<std::string> argv;
  for (const json& a : command) {
    if (!a.is_string() || a.get<std::string>().empty() ||
        a.get<std::string>().find('\0') != std::string::npos)
      throw TrainerError("external trainer: model.command: expected non-empty strings");
    argv.push_back(a);
  }
  return argv;
}

}  // namespace

std::string trainer_device(const TrainerPlace& place) {
  return place.device.rfind("cuda:", 0) == 0 ? "cuda:0" : "cpu";
}

std::vector<std::string> trainer_environment(const TrainerPlace& place,
                                             const std::vector<std::string>& parent) {
  auto value_of = [&](std::string_view name) -> std::optional<std::string> {
    for (const std::string& e : parent)
      if (e.size() > name.size() && e.compare(0, name.size(), name) == 0 && e[name.size()] == '=')
        return e.substr(name.size() + 1);
    return std::nullopt;
  };
  const bool on_gpu = trainer_device(place) != "cpu";
  std::string visible;  // the worker's GPU, as the CUDA runtime outside this process names it
  if (on_gpu) {
    const size_t n = std::stoul(place.device.substr(5));
    visible = std::to_string(n);
    if (std::optional<std::string> own = value_of("CUDA_VISIBLE_DEVICES")) {
      const std::vector<std::string_view> listed = protocol::comma_separated(*own);
      if (n < listed.size()) visible = listed[n];
    }
  }
  const bool hippo_set_coretype = value_of("HIPPO_SET_OPENBLAS_CORETYPE") == "1";
  const std::string threads = std::to_string(place.threads);
  std::vector<std::pair<std::string, std::string>> set = {{"CUDA_VISIBLE_DEVICES", visible},
                                                          {"OMP_NUM_THREADS", threads},
                                                          {"MKL_NUM_THREADS", threads},
                                                          {"OPENBLAS_NUM_THREADS", threads}};
  if (on_gpu && !value_of("CUBLAS_WORKSPACE_CONFIG"))
    set.emplace_back("CUBLAS_WORKSPACE_CONFIG", ":4096:8");
  std::vector<std::string> env;
  for (const std::string& e : parent) {
    const std::string name = e.substr(0, e.find('='));
    const bool replaced =
        std::any_of(set.begin(), set.end(), [&](const auto& kv) { return kv.first == name; });
    const bool dropped = name == "HIPPO_SET_OPENBLAS_CORETYPE" ||
                         (name == "OPENBLAS_CORETYPE" && hippo_set_coretype);
    if (!replaced && !dropped) env.push_back(e);
  }
  for (const auto& [name, value] : set) env.push_back(name + "=" + value);
  return env;
}

json trainer_input(const protocol::Job& job, const std::string& checkpoint_dir,
                   const std::string& input_path, const std::vector<int64_t>* held,
                   const TrainerPlace& place) {
  const std::filesystem::path dir = std::filesystem::absolute(checkpoint_dir);
  json outputs = json::array();
  for (const protocol::SnapshotOrder& order : job.snapshots)
    if (!order.file.empty())
      outputs.push_back({{"step", order.step}, {"path", dir / order.file}, {"state", order.state}});
  json data = job.run.data_fields;
  data["name"] = job.run.data;
  if (job.run.train_samples > 0) data["train_samples"] = job.run.train_samples;
  if (job.run.eval_samples > 0) data["eval_samples"] = job.run.eval_samples;
  json input = {
      {"hippo_trainer", 1},
      {"hippo_version", kVersion},
      {"model", job.run.model},
      {"data", data},
      {"seed", job.run.seed},
      {"fixed", job.run.fixed},
      {"from", job.from},
      {"to", job.to},
      {"input_checkpoint", input_path.empty() ? json(nullptr) : json(input_path)},
      {"input_state", job.parent_state >= 0 ? json(job.parent_state) : json(nullptr)},
      {"input_checksum", job.parent_checksum.empty() ? json(nullptr) : json(job.parent_checksum)},
      {"checkpoints", outputs},
      {"eval_steps", job.eval_steps},
      {"hyperparameters", to_json(job.hyperparams)},
      {"device", trainer_device(place)},
      {"threads", place.threads}};
  if (held) input["held"] = *held;
  return input;
}

TrainerLine parse_trainer_line(std::string_view text) {
  auto bad = [&](const std::string& why) {
    std::string shown(text.substr(0, 200));
    if (text.size() > 200) shown += "...";
    return TrainerError("output line '" + shown + "': " + why);
  };
  if (json_nesting_beyond(text, 8) != std::string_view::npos) throw bad("nested too deeply");
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw bad("expected one JSON object on one line");
  auto natural = [](const json& v) {  // an integer >= 0 that fits in int64
    return v.is_number_integer() &&
           (v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)
                                   : v.get<int64_t>() >= 0);
  };
  auto step_of = [&](const char* key) {
    if (!natural(j[key])) throw bad(std::string(key) + ": expected a step (an integer >= 0)");
    return j[key].get<int64_t>();
  };
  TrainerLine line;
  if (j.contains("done") || j.contains("diverged")) {
    const size_t extra = (j.contains("held") ? 1u : 0u) + (j.contains("times") ? 1u : 0u);
    if (j.contains("done")) {
      if (j["done"] != true || j.size() != 1 + extra)
        throw bad(
            "a done line is {\"done\": true}, with \"held\": [IDS] and \"times\": {...} or not");
      line.kind = TrainerLine::Kind::kDone;
    } else {
      if (j.size() != 1 + extra)
        throw bad(
            "a diverged line is {\"diverged\": STEP}, with \"held\": [IDS] and \"times\": {...} "
            "or not");
      line.kind = TrainerLine::Kind::kDiverged;
      line.step = step_of("diverged");
    }
    if (j.contains("times")) {
      const json& times = j["times"];
      if (!times.is_object()) throw bad("times: expected an object of seconds");
      static constexpr std::pair<const char*, double protocol::JobTimes::*> kParts[] = {
          {"setup", &protocol::JobTimes::setup},
          {"load", &protocol::JobTimes::load},
          {"train", &protocol::JobTimes::train},
          {"eval", &protocol::JobTimes::eval},
          {"save", &protocol::JobTimes::save}};
      for (const auto& [name, value] : times.items()) {
        if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < 0 ||
            value.get<double>() > 1e9)
          throw bad("times." + name + ": expected seconds (a number from 0 to 1e9)");
        if (name == "ready_at") {
          line.ready_at = value.get<double>();
          continue;
        }
        auto part = std::find_if(std::begin(kParts), std::end(kParts),
                                 [&](const auto& p) { return name == p.first; });
        if (part == std::end(kParts))
          throw bad("times." + name + ": expected setup, load, train, eval, save or ready_at");
        line.times.*(part->second) = value.get<double>();
      }
    }
    if (j.contains("held")) {
      const json& held = j["held"];
      if (!held.is_array() || held.size() > protocol::kMaxHeldStates ||
          !std::all_of(held.begin(), held.end(), natural))
        throw bad("held: expected a list of at most " + std::to_string(protocol::kMaxHeldStates) +
                  " state ids");
      line.held = held.get<std::vector<int64_t>>();
    }
  } else if (j.contains("checkpoint")) {
    if (j.size() != (j.contains("checksum") ? 2u : 1u))
      throw bad(
          "a checkpoint line is {\"checkpoint\": STEP}, with \"checksum\": CONTENT_HASH or not");
    line.kind = TrainerLine::Kind::kCheckpoint;
    line.step = step_of("checkpoint");
    if (j.contains("checksum")) {
      const json& checksum = j["checksum"];
      const std::string why = checksum.is_string()
                                  ? protocol::content_hash_error(checksum.get<std::string>())
                                  : "expected a string";
      if (!why.empty()) throw bad("checksum: " + why);
      line.checksum = checksum;
    }
  } else if (j.contains("metric")) {
    if (j.size() != 3 || !j.contains("step") || !j.contains("value"))
      throw bad("a metric line is exactly {\"step\": S, \"metric\": NAME, \"value\": X}");
    line.kind = TrainerLine::Kind::kMetric;
    line.step = step_of("step");
    if (!j["metric"].is_string() || j["metric"].get<std::string>().empty() ||
        j["metric"].get<std::string>().size() > 64)
      throw bad("metric: expected a name (a string of 1 to 64 characters)");
    line.metric = j["metric"];
    // JSON has no NaN nor infinity: a diverged model's are written as these strings.
    const json& value = j["value"];
    if (value == "nan")
      line.value = std::nan("");
    else if (value == "inf")
      line.value = INFINITY;
    else if (value == "-inf")
      line.value = -INFINITY;
    else if (value.is_number())
      line.value = value;
    else
      throw bad("value: expected a number, or \"nan\", \"inf\" or \"-inf\"");
  } else if (j.size() == 1 && j.contains("step")) {
    line.kind = TrainerLine::Kind::kProgress;
    line.step = step_of("step");
  } else {
    throw bad("expected a metric, checkpoint, progress, done or diverged line");
  }
  return line;
}

bool long_lived(const protocol::RunSpec& run) {
  auto it = run.model.find("long_lived");
  return it != run.model.end() && *it == true;
}

namespace {

// What a trainer reports during one stage, checked line by line against the job.
class StageReader {
 public:
  StageReader(const protocol::Job& job, const std::string& checkpoint_dir,
              const std::vector<int64_t>* held_before, const TrainerHooks& hooks,
              const TrainerProcess& process)
      : job_(job), dir_(checkpoint_dir), hooks_(hooks), process_(process), step_(job.from) {
    // The states a long-lived trainer may say it holds: those it held, and this stage's.
    if (held_before) known_states_.insert(held_before->begin(), held_before->end());
    if (job.parent_state >= 0) known_states_.insert(job.parent_state);
    for (const protocol::SnapshotOrder& order : job.snapshots)
      if (!order.file.empty()) known_states_.insert(order.state);
  }

  int64_t step() const { return step_; }
  bool done() const { return done_; }
  std::optional<int64_t> diverged_at() const { return diverged_at_; }
  const std::vector<int64_t>& held() const { return held_; }
  const TrainerLine& last() const { return end_line_; }  // the done or diverged line

  void handle(std::string_view text) {
    const int64_t before = step_;
    handle_line(text);
    if (step_ != before && hooks_.progress) hooks_.progress(step_);
  }

 private:
  void handle_line(std::string_view text) {
    ++line_number_;
    if (done_) throw process_.error("output after the done line: '" + std::string(text) + "'");
    TrainerLine line;
    try {
      line = parse_trainer_line(text);
    } catch (const TrainerError& e) {
      throw process_.error(e.what());
    }
    const std::string where = "line " + std::to_string(line_number_) + ": ";
    const std::vector<int64_t>& evals = job_.eval_steps;
    switch (line.kind) {
      case TrainerLine::Kind::kMetric:
        if (!metrics_.empty() && line.step != evals[next_eval_]) flush_metrics();
        if (next_eval_ >= evals.size() || line.step != evals[next_eval_])
          throw process_.error(
              where + "a metric for step " + std::to_string(line.step) +
              (next_eval_ < evals.size()
                   ? ", but the next evaluation step is " + std::to_string(evals[next_eval_])
                   : ", but no more evaluations were asked for") +
              " (eval_steps: " + json(evals).dump() + ")");
        if (metrics_.contains(line.metric))
          throw process_.error(where + "metric " + line.metric + " for step " +
                               std::to_string(line.step) + " twice");
        metrics_[line.metric] = line.value;
        step_ = std::max(step_, line.step);
        break;
      case TrainerLine::Kind::kCheckpoint: {
        flush_metrics();
        bool ordered = false;
        for (size_t i = next_checkpoint_; i < job_.snapshots.size(); ++i)
          ordered =
              ordered || (job_.snapshots[i].step == line.step && !job_.snapshots[i].file.empty());
        if (!ordered)
          throw process_.error(where + "a checkpoint for step " + std::to_string(line.step) +
                               ", which is not an output checkpoint still to write");
        if (!line.checksum.empty()) reported_checksums_[line.step] = line.checksum;
        report_checkpoints(line.step);
        step_ = std::max(step_, line.step);
        break;
      }
      case TrainerLine::Kind::kProgress:
        if (line.step < step_ || line.step > job_.to)
          throw process_.error(where + "progress to step " + std::to_string(line.step) +
                               " is outside [" + std::to_string(step_) + ", " +
                               std::to_string(job_.to) + "]");
        if (!metrics_.empty() && line.step > evals[next_eval_]) flush_metrics();
        step_ = line.step;
        break;
      case TrainerLine::Kind::kDone:
        flush_metrics();
        if (next_eval_ < evals.size())
          throw process_.error(where + "done, but no metrics came for step " +
                               std::to_string(evals[next_eval_]));
        report_checkpoints(job_.to);
        end(line, job_.to, where);
        break;
      case TrainerLine::Kind::kDiverged:
        // It ends the stage at an evaluation it reported: what comes after is not trained, and
        // the checkpoints ordered before it must be there.
        flush_metrics();
        if (next_eval_ == 0 || evals[next_eval_ - 1] != line.step)
          throw process_.error(where + "diverged at step " + std::to_string(line.step) +
                               ", which is not the last evaluation it reported");
        report_checkpoints(line.step - 1);
        end(line, line.step, where);
        diverged_at_ = line.step;
        break;
    }
  }

  // The stage ends at `step` (a done or diverged line), holding the states it lists.
  void end(const TrainerLine& line, int64_t step, const std::string& where) {
    for (int64_t id : line.held)
      if (!known_states_.count(id))
        throw process_.error(where + "held: state " + std::to_string(id) +
                             " is none of the states this trainer was given");
    held_ = line.held;
    end_line_ = line;
    step_ = step;
    done_ = true;
  }

  void flush_metrics() {
    if (metrics_.empty()) return;
    hooks_.metrics(job_.eval_steps[next_eval_], metrics_);
    metrics_ = json::object();
    ++next_eval_;
  }
  // Every ordered checkpoint up to `upto` must exist now; each is reported once, in step order,
  // with the bytes read once, here (trainer_files.h). Where the trainer said what it wrote
  // (checksum), other bytes are refused: the file was replaced after it was written.
  void report_checkpoints(int64_t upto) {
    for (;
         next_checkpoint_ < job_.snapshots.size() && job_.snapshots[next_checkpoint_].step <= upto;
         ++next_checkpoint_) {
      const protocol::SnapshotOrder& order = job_.snapshots[next_checkpoint_];
      if (order.file.empty()) continue;
      const std::string what =
          "the checkpoint for step " + std::to_string(order.step) + " (" + order.file + ")";
      const std::string path = (std::filesystem::path(dir_) / order.file).string();
      std::error_code ec;
      if (!std::filesystem::exists(std::filesystem::symlink_status(path, ec)))
        throw process_.error(what + " was not written");
      WrittenFile file;
      try {
        file = written_file(path);
      } catch (const TrainerFileError& e) {
        throw process_.error(e.what());
      }
      auto said = reported_checksums_.find(order.step);
      if (said != reported_checksums_.end() && said->second != file.content_hash)
        throw process_.error(what + " has content hash " + file.content_hash +
                             ", the trainer wrote " + said->second +
                             ": replaced after it was written; refused");
      hooks_.checkpoint(order.step, file);
    }
  }

  const protocol::Job& job_;
  const std::string& dir_;
  const TrainerHooks& hooks_;
  const TrainerProcess& process_;
  std::set<int64_t> known_states_;
  int64_t step_;
  size_t next_eval_ = 0;  // index of the evaluation step whose metrics are being collected
  json metrics_ = json::object();
  size_t next_checkpoint_ = 0;  // index of the first snapshot order not yet reported
  std::map<int64_t, std::string> reported_checksums_;  // by step, from checkpoint lines
  bool done_ = false;
  std::optional<int64_t> diverged_at_;
  std::vector<int64_t> held_;
  TrainerLine end_line_;
  int line_number_ = 0;
};

// CLOCK_MONOTONIC in seconds: the clock of Python's time.monotonic(), in which a trainer says
// when it was ready.
double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

void ExternalTrainer::stop() {
  process_.reset();  // kills its process group
  held_.clear();
  serves_ = nullptr;
}

void ExternalTrainer::start(const std::vector<std::string>& argv, json serves) {
  std::vector<std::string> parent;
  for (char** e = environ; *e != nullptr; ++e) parent.emplace_back(*e);
  process_ = std::make_unique<TrainerProcess>(argv, trainer_environment(place_, parent));
  serves_ = std::move(serves);
  idle_since_ = Clock::now();
}

bool ExternalTrainer::stop_if_idle(double seconds) {
  if (!process_ || seconds_since(idle_since_) < seconds) return false;
  stop();
  return true;
}

bool ExternalTrainer::prepare(const protocol::RunSpec& run) {
  if (process_ || !long_lived(run)) return false;
  start(command_of(run), protocol::to_json(run));
  return true;
}

bool ExternalTrainer::run(const protocol::Job& job, const std::string& checkpoint_dir,
                          const TrainerHooks& hooks, const std::vector<int64_t>& may_hold) {
  const double started = monotonic_seconds();
  times_ = {};
  const std::vector<std::string> argv = command_of(job.run);  // a bad one fails before anything
  // So does a parent that is not what its producer wrote; the trainer reads these very bytes.
  std::optional<VerifiedInput> input;
  if (!job.parent_file.empty())
    input.emplace((std::filesystem::path(checkpoint_dir) / job.parent_file).string(),
                  job.parent_checksum);
  const bool many = long_lived(job.run);
  const json serves = protocol::to_json(job.run);
  if (process_ && (!many || serves != serves_ || process_->exited())) stop();
  std::erase_if(held_, [&](int64_t id) {
    return std::find(may_hold.begin(), may_hold.end(), id) == may_hold.end();
  });
  try {
    if (process_) {
      // Between two stages a long-lived trainer says nothing; one whose output ended is ending.
      bool open = process_->pump(0, [&](std::string_view text) {
        throw process_->error("output after its done line, before the next stage: '" +
                              std::string(text) + "'");
      });
      if (!open) stop();
    }
    if (!process_) start(argv, serves);
    bool finished = run_stage(job, checkpoint_dir, input ? input->path() : "", hooks, many);
    idle_since_ = Clock::now();
    if (finished) {
      // What it reported; its start counts where the stage waited for it (a trainer started
      // ahead of its first stage, prepare(), was often ready before).
      const TrainerLine& end = last_line_;
      times_ = end.times;
      const double elapsed = monotonic_seconds() - started;
      if (end.ready_at) times_.start = std::clamp(*end.ready_at - started, 0.0, elapsed);
    }
    if (!finished || !many) stop();  // abandoned (killed), or a one-shot trainer that has exited
    return finished;
  } catch (...) {
    stop();
    throw;
  }
}

bool ExternalTrainer::run_stage(const protocol::Job& job, const std::string& checkpoint_dir,
                                const std::string& input_path, const TrainerHooks& hooks,
                                bool many) {
  TrainerProcess& process = *process_;
  const std::vector<int64_t>* held_before = many ? &held_ : nullptr;
  StageReader reader(job, checkpoint_dir, held_before, hooks, process);
  diverged_at_.reset();
  process.write(trainer_input(job, checkpoint_dir, input_path, held_before, place_).dump() + "\n",
                /*close_after=*/!many);
  auto last_line = Clock::now(), last_tick = Clock::now();
  auto on_line = [&](std::string_view text) {
    reader.handle(text);
    last_line = Clock::now();
  };
  // Ticks, and the timeout (`silent`: the error then); false when tick() abandons the stage.
  auto keep_going = [&](const std::string& silent) {
    if (seconds_since(last_tick) * 1000 >= hooks.tick_ms) {
      last_tick = Clock::now();
      if (!hooks.tick(reader.step())) return false;
    }
    if (seconds_since(last_line) > hooks.timeout_s) throw process.error(silent);
    return true;
  };
  std::ostringstream timeout;
  timeout << hooks.timeout_s;
  const std::string silence =
      "no output line for " + timeout.str() + " s (the worker's --trainer-timeout); killed";
  bool open = true;
  while (open && !(many && reader.done())) {
    open = process.pump(hooks.tick_ms, on_line);
    if (!keep_going(silence)) return false;
  }
  if (many && reader.done()) {
    held_ = reader.held();
    diverged_at_ = reader.diverged_at();
    last_line_ = reader.last();
    return true;  // it waits for the next stage
  }
  if (std::string rest = process.take_partial_line(); !rest.empty())
    on_line(rest);  // a last line without its newline

  // Both of its outputs are closed: it has ended, or will in a moment.
  while (!process.exited()) {
    if (!keep_going("closed its output but did not exit; killed")) return false;
    ::usleep(10000);
  }
  const int status = process.wait_status();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw process.error(describe_status(status), /*crashed=*/true);
  if (!reader.done()) throw process.error("exited without a done line", /*crashed=*/true);
  diverged_at_ = reader.diverged_at();
  last_line_ = reader.last();
  return true;
}

}  // namespace hippo::worker
