#include "searchers/budget.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>

#include "searchers/searcher.h"
#include "stagetree/sequence_json.h"

namespace hippo {
namespace {

constexpr int64_t kUnknown = -1;

// x * y, saturating at INT64_MAX (both >= 0).
int64_t times(int64_t x, int64_t y) {
  if (x != 0 && y > std::numeric_limits<int64_t>::max() / x)
    return std::numeric_limits<int64_t>::max();
  return x * y;
}

// The smallest and largest batch sizes a trial can have; kUnknown without a constant one.
std::pair<int64_t, int64_t> batch_sizes(const StudySpec& s) {
  if (s.fixed.contains("batch_size")) {
    int64_t b = s.fixed["batch_size"].get<int64_t>();
    return {b, b};
  }
  const nlohmann::json* v = s.space.value_of("batch_size");
  if (!v) return {kUnknown, kUnknown};
  if (v->is_number()) return {v->get<int64_t>(), v->get<int64_t>()};
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0;
  for (const Param& p : s.space.params()) {
    if (p.name != "batch_size") continue;  // a schedule's leaves: epochs are refused then
    for (const nlohmann::json& x : p.values) {
      lo = std::min(lo, x.get<int64_t>());
      hi = std::max(hi, x.get<int64_t>());
    }
    if (p.kind == DistKind::kInt) {
      lo = std::min(lo, static_cast<int64_t>(p.lo));
      hi = std::max(hi, static_cast<int64_t>(p.hi));
    }
  }
  if (hi == 0) return {kUnknown, kUnknown};
  return {std::max<int64_t>(1, lo), hi};
}

// The steps per epoch of the trials with the smallest and the largest batch size.
std::pair<int64_t, int64_t> epoch_steps(const StudySpec& s) {
  auto [smallest, largest] = batch_sizes(s);
  if (smallest == kUnknown) return {0, 0};
  return {s.data.train_samples / largest, s.data.train_samples / smallest};
}

std::string number(int64_t n) {
  return n == std::numeric_limits<int64_t>::max() ? "more than 9.2e18" : std::to_string(n);
}

[[noreturn]] void refuse(const char* path, const std::string& what) {
  throw SpecError(std::string(path) + ": " + what);
}

}  // namespace

int64_t longest_trial(const StudySpec& spec) {
  auto [fewest, most] = epoch_steps(spec);
  const Span length = spec.longest_length();
  return std::max(length.steps(fewest), length.steps(most));
}

int64_t most_evaluations(const StudySpec& spec) {
  if (!spec.eval_every) return 1;
  int64_t most = 1;
  auto [fewest, many] = epoch_steps(spec);
  for (int64_t u : {fewest, many}) {
    int64_t length = spec.longest_length().steps(u), every = spec.eval_every->steps(u);
    if (every > 0) most = std::max(most, (length - 1) / every + 1);
  }
  return most;
}

int64_t job_bytes(const StudySpec& spec) {
  // The sequences of the first trial (the others have the same schedules with other numbers),
  // the run spec, and the evaluation steps at the width of the largest step.
  Params params = spec.space.draw(spec.seed, 0, 0);
  int64_t bytes = static_cast<int64_t>(to_json(spec.hyperparams(params)).dump().size() +
                                       spec.model.dump().size() + spec.fixed.dump().size());
  const int64_t digits = static_cast<int64_t>(std::to_string(longest_trial(spec)).size());
  return bytes + times(most_evaluations(spec), digits + 1) + 512;  // + the other fields
}

void check_budget(const StudySpec& spec, const Budget& budget) {
  const std::optional<uint64_t> most = make_searcher(spec)->most_trials();
  const int64_t trials =
      most ? static_cast<int64_t>(std::min<uint64_t>(*most, std::numeric_limits<int64_t>::max()))
           : 1;  // unknown (an external searcher without max_trials): the driver counts them
  if (trials > budget.trials)
    refuse("searcher.max_trials", "the study would create " + number(trials) +
                                      " trials, more than this master's limit "
                                      "of " +
                                      number(budget.trials) + " (--max-trials)");
  const int64_t length = longest_trial(spec);
  const int64_t steps = times(trials, length);
  if (steps > budget.steps)
    refuse("length", number(trials) + " trials of up to " + number(length) + " steps request " +
                         number(steps) + " steps, more than this master's limit of " +
                         number(budget.steps) + " (--max-steps)");
  const int64_t evaluations = times(trials, most_evaluations(spec));
  if (evaluations > budget.evaluations)
    refuse(spec.eval_every ? "eval.every" : "searcher.max_trials",
           number(trials) + " trials of up to " + number(most_evaluations(spec)) +
               " evaluations request " + number(evaluations) +
               " evaluations, more than this master's limit of " + number(budget.evaluations) +
               " (--max-evaluations)");
  if (int64_t bytes = job_bytes(spec); bytes > kMaxJobBytes)
    refuse(most_evaluations(spec) > 1 ? "eval.every" : "hyperparameters",
           "a trial's job would take " + number(bytes) + " bytes, more than the " +
               number(kMaxJobBytes) +
               " a job may have: evaluate less often, or give shorter "
               "schedules");
}

}  // namespace hippo
