#include "master/events.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "master/study_driver.h"
#include "protocol/clock.h"
#include "protocol/message.h"

namespace hippo::master {

using nlohmann::json;

EventStream::EventStream(const std::string& path) {
  if (path == "-") {
    file_ = stdout;
    return;
  }
  file_ = std::fopen(path.c_str(), "a");
  if (!file_)
    throw std::runtime_error("--events " + path + ": cannot open it: " + std::strerror(errno));
  owned_ = true;
}

EventStream::~EventStream() {
  if (owned_) std::fclose(file_);
}

void EventStream::emit(const StudyDriver& driver, int64_t study, const char* event, json fields) {
  json line = {{"event", event}, {"time", unix_seconds()}};
  line["study"] = driver.studies().at(study).spec.name;
  line.update(fields);
  pending_.push_back(line.dump());
}

void EventStream::commit() {
  for (const std::string& line : pending_) std::fprintf(file_, "%s\n", line.c_str());
  if (!pending_.empty()) std::fflush(file_);
  pending_.clear();
}

void EventStream::after(const EditOp& op, const StudyDriver& driver) {
  if (std::holds_alternative<edit::CreateStudy>(op)) {
    const TrackedStudy& s = driver.studies().at(driver.created());
    emit(driver, s.id, "study_started",
         {{"id", s.id}, {"searcher", s.spec.searcher.name}, {"resumed", false}});
  } else if (const auto* o = std::get_if<edit::TakeUpStudy>(&op)) {
    const int64_t id = o->loaded->study.id;  // an integer: kept by the move into the driver
    ended_.erase(id);
    const TrackedStudy& s = driver.studies().at(id);
    emit(driver, id, "study_started",
         {{"id", id}, {"searcher", s.spec.searcher.name}, {"resumed", true}});
    // Its running trials started in an earlier run: their ends are told, not their starts again.
    for (const auto& [request, trial] : s.trials)
      if (driver.trial(trial)->status == TrialStatus::kRunning) {
        running_.insert(trial);
        started_.insert(trial);
      }
  } else if (const auto* o = std::get_if<edit::PlaceTrial>(&op)) {
    const TrackedTrial& t = *driver.trial(o->trial);
    if (running_.insert(t.id).second)
      emit(driver, t.study, started_.insert(t.id).second ? "trial_started" : "trial_continued",
           {{"trial", t.number}, {"params", t.params}, {"length", t.length}});
  } else if (const auto* o = std::get_if<edit::RecordMetrics>(&op)) {
    const TrackedTrial& t = *driver.trial(o->trial);
    json metrics = json::object();
    protocol::codecs::write_metrics(metrics, "metrics",
                                    o->metrics);  // non-finite values as "nan", "inf"
    emit(driver, t.study, "evaluation",
         {{"trial", t.number}, {"step", o->step}, {"metrics", metrics["metrics"]}});
    // The best so far of a study of one objective without constraints (hippo best's value).
    const TrackedStudy& s = driver.studies().at(t.study);
    const Goals& goals = s.spec.searcher.goals;
    const Objective& objective = goals.objectives.at(0);
    if (goals.multi() || !o->metrics.contains(objective.metric)) return;
    const double value = o->metrics[objective.metric].get<double>();
    if (!std::isfinite(value)) return;
    auto [best, first] = best_.emplace(t.study, value);
    if (!first && !better(value, best->second, objective.maximize)) return;
    best->second = value;
    emit(driver, t.study, "best",
         {{"trial", t.number},
          {"step", o->step},
          {"metric", objective.metric},
          {"value", value},
          {"params", t.params}});
  } else if (const auto* o = std::get_if<edit::EndTrial>(&op)) {
    const TrackedTrial& t = *driver.trial(o->trial);
    if (!running_.erase(t.id)) return;  // never started: nothing was said of it
    json fields = {{"trial", t.number},
                   {"status", to_string(o->status)},
                   {"step", t.stopped_at >= 0 ? t.stopped_at : o->step.value_or(t.length)}};
    if (!o->reason.empty()) fields["reason"] = o->reason;
    emit(driver, t.study, "trial_ended", fields);
  } else if (const auto* o = std::get_if<edit::EndStudy>(&op)) {
    const TrackedStudy& s = driver.studies().at(o->study);
    if (!ended_.insert(s.id).second) return;  // an EndStudy of an ended study changes nothing
    emit(driver, s.id, "study_ended",
         {{"id", s.id},
          {"status", to_string(s.status)},
          {"why", s.error.empty() ? "its searcher has finished" : s.error}});
    for (const auto& [request, trial] : s.trials) running_.erase(trial);
  }
}

}  // namespace hippo::master
