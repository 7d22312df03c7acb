#include "searchers/nsga2.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "searchers/pareto.h"
#include "searchers/pool_searcher.h"

namespace hippo {
namespace {

using nlohmann::json;

// Selection sorts twice the population, in O(n^2) with three objectives or more: a bound that
// keeps one generation's turn short.
constexpr int64_t kMaxPopulation = 10'000;

const char* const kStatusNames[] = {"running", "closed", "failed"};

// A probability option, `fallback` when absent.
double probability(const Field& options, const std::string& key, double fallback) {
  if (!options.has(key)) return fallback;
  Field f = options[key];
  double p = f.number();
  if (p < 0 || p > 1) f.fail("expected a number in [0, 1], got " + brief(f.json()));
  return p;
}

class Nsga2Searcher : public Searcher {
 public:
  explicit Nsga2Searcher(const StudySpec& spec)
      : spec_(spec), directions_(spec.searcher.goals.directions()) {
    Field options(spec_.searcher.options, "searcher");
    if (!spec_.searcher.max_trials)
      Field(spec_.searcher.options, "searcher.max_trials").fail("missing (nsga2 needs it)");
    max_trials_ = *spec_.searcher.max_trials;
    if (options.has("population")) population_ = options["population"].integer(2, kMaxPopulation);
    const size_t leaves = spec_.space.params().size();
    mutation_prob_ =
        probability(options, "mutation_prob", 1.0 / double(std::max<size_t>(1, leaves)));
    crossover_prob_ = probability(options, "crossover_prob", 0.9);
    swapping_prob_ = probability(options, "swapping_prob", 0.5);
  }

  std::optional<uint64_t> most_trials() const override { return max_trials_; }

  std::vector<Operation> on_study_start() override { return next_generation(); }

  // Only with one objective (the master gives several through on_evaluation).
  std::vector<Operation> on_validation(RequestId trial, int64_t step, double value) override {
    return on_evaluation(trial, step, Evaluation{{value}, 0, value});
  }

  std::vector<Operation> on_evaluation(RequestId trial, int64_t step,
                                       const Evaluation& e) override {
    Trial& t = at(trial);
    if (e.values.size() != directions_.size())
      throw std::invalid_argument("nsga2 searcher: " + std::to_string(e.values.size()) +
                                  " values for " + std::to_string(directions_.size()) +
                                  " objectives");
    // A shared stage may report an earlier step again: the latest one is the trial's value.
    if (t.status == Status::kRunning && step >= t.last_step) {
      t.last = ParetoPoint{e.values, e.violation};
      t.last_step = step;
    }
    return {};
  }

  std::vector<Operation> on_trial_closed(RequestId trial) override {
    return end(trial, Status::kClosed);
  }
  std::vector<Operation> on_trial_failed(RequestId trial) override {
    return end(trial, Status::kFailed);
  }

  json save() const override {
    json trials = json::array();
    for (const Trial& t : trials_) {
      json last = nullptr;
      if (t.last) {
        json values = json::array();
        for (double v : t.last->values) values.push_back(metric_to_json(v));
        last = {{"step", t.last_step},
                {"values", values},
                {"violation", metric_to_json(t.last->violation)}};
      }
      trials.push_back({{"params", t.params},
                        {"status", kStatusNames[static_cast<int>(t.status)]},
                        {"last", last}});
    }
    return {{"trials", trials}, {"parents", parents_}};
  }

  void load(const json& state) override {
    Field f(state, "state");
    f.check_keys({"trials", "parents"});
    Field list = f["trials"];
    const size_t n = list.items(0);
    if (n > max_trials_) list.fail("more than max_trials trials");
    if (n % population_ != 0 && n != max_trials_)
      list.fail("has " + std::to_string(n) + " trials, not whole generations of " +
                std::to_string(population_));
    const size_t generation = n == 0 ? 0 : (n - 1) / population_ * population_;
    std::vector<Trial> trials(n);
    for (size_t i = 0; i < n; ++i) {
      Field x = list[i];
      x.check_keys({"params", "status", "last"});
      if (!x["params"].is_object()) x["params"].fail("expected an object");
      trials[i].params = x["params"].json();
      const std::string& status = x["status"].text();
      auto it = std::find(std::begin(kStatusNames), std::end(kStatusNames), status);
      if (it == std::end(kStatusNames)) x["status"].fail("unknown status " + brief(status));
      trials[i].status = static_cast<Status>(it - std::begin(kStatusNames));
      if (trials[i].status == Status::kRunning && i < generation)
        x["status"].fail("running, but its generation has ended");
      if (x["last"].json().is_null()) continue;
      Field last = x["last"];
      last.check_keys({"step", "values", "violation"});
      trials[i].last_step = last["step"].integer(0, INT64_MAX);
      Field values = last["values"];
      if (values.items(1) != directions_.size())
        values.fail("expected " + std::to_string(directions_.size()) + " values, one by objective");
      ParetoPoint point;
      for (size_t k = 0; k < directions_.size(); ++k)
        point.values.push_back(metric_from_json(values[k]));
      point.violation = metric_from_json(last["violation"]);
      if (!(point.violation >= 0)) last["violation"].fail("expected a number >= 0");
      trials[i].last = std::move(point);
    }
    Field parent_list = f["parents"];
    std::vector<RequestId> parents;
    for (size_t i = 0, count = parent_list.items(0); i < count; ++i) {
      RequestId id = parent_list[i].integer(0, INT64_MAX);
      if (static_cast<size_t>(id) >= generation)
        parent_list[i].fail("not a trial of an earlier generation");
      if (!parents.empty() && id <= parents.back())
        parent_list[i].fail("parents must be increasing ids");
      if (!can_parent(trials[id]))
        parent_list[i].fail("trial " + std::to_string(id) + " has no value to be a parent with");
      parents.push_back(id);
    }
    if (parents.size() > static_cast<size_t>(population_))
      parent_list.fail("more parents than the population");
    trials_ = std::move(trials);
    parents_ = std::move(parents);
  }

 private:
  enum class Status { kRunning, kClosed, kFailed };
  struct Trial {
    Params params;
    Status status = Status::kRunning;
    std::optional<ParetoPoint> last;  // its latest evaluation
    int64_t last_step = -1;
  };
  // A parent's place for the tournament: its front among the parents, and its crowding there.
  struct Standing {
    size_t front = 0;
    double crowding = 0;
  };

  Trial& at(RequestId trial) {
    if (trial < 0 || static_cast<size_t>(trial) >= trials_.size())
      throw std::invalid_argument("nsga2 searcher: no trial " + std::to_string(trial));
    return trials_[trial];
  }

  static bool can_parent(const Trial& t) {
    return t.status == Status::kClosed && t.last && !std::isnan(t.last->violation) &&
           std::none_of(t.last->values.begin(), t.last->values.end(),
                        [](double v) { return std::isnan(v); });
  }

  // The first trial of the latest generation.
  size_t generation_start() const {
    return trials_.empty() ? 0 : (trials_.size() - 1) / population_ * population_;
  }

  std::vector<ParetoPoint> points_of(const std::vector<RequestId>& ids) const {
    std::vector<ParetoPoint> points;
    for (RequestId id : ids) points.push_back(*trials_[id].last);
    return points;
  }

  std::vector<Operation> end(RequestId trial, Status status) {
    Trial& t = at(trial);
    if (t.status != Status::kRunning) return {};
    t.status = status;
    for (size_t id = generation_start(); id < trials_.size(); ++id)
      if (trials_[id].status == Status::kRunning) return {};
    if (trials_.size() == max_trials_) return {Finish{}};
    select_parents();
    return next_generation();
  }

  // Deb's elitist selection over the parents and the generation that just ended: whole fronts while
  // they fit, the last one cut by crowding distance (largest first, ties to the lower id).
  void select_parents() {
    std::vector<RequestId> candidates = parents_;  // ids of earlier generations: in id order
    for (size_t id = generation_start(); id < trials_.size(); ++id)
      if (can_parent(trials_[id])) candidates.push_back(static_cast<RequestId>(id));
    const std::vector<ParetoPoint> points = points_of(candidates);
    std::vector<RequestId> chosen;
    for (const std::vector<size_t>& front : non_dominated_sort(points, directions_)) {
      const size_t room = static_cast<size_t>(population_) - chosen.size();
      if (room == 0) break;
      std::vector<size_t> order = front;
      if (front.size() > room) {
        const std::vector<double> crowding = crowding_distance(points, front);
        std::vector<size_t> by_crowding(front.size());
        std::iota(by_crowding.begin(), by_crowding.end(), 0);
        // Indices into points follow ids: the lower index is the lower id.
        std::stable_sort(by_crowding.begin(), by_crowding.end(),
                         [&](size_t a, size_t b) { return crowding[a] > crowding[b]; });
        by_crowding.resize(room);
        order.clear();
        for (size_t k : by_crowding) order.push_back(front[k]);
      }
      for (size_t i : order) chosen.push_back(candidates[i]);
    }
    std::sort(chosen.begin(), chosen.end());
    parents_ = std::move(chosen);
  }

  // Each parent's front among the parents, and its crowding distance within that front.
  std::vector<Standing> standings() const {
    const std::vector<ParetoPoint> points = points_of(parents_);
    std::vector<Standing> out(points.size());
    const std::vector<std::vector<size_t>> fronts = non_dominated_sort(points, directions_);
    for (size_t f = 0; f < fronts.size(); ++f) {
      const std::vector<double> crowding = crowding_distance(points, fronts[f]);
      for (size_t k = 0; k < fronts[f].size(); ++k) out[fronts[f][k]] = {f, crowding[k]};
    }
    return out;
  }

  // The better of two parents drawn at random (with replacement): the lower front, then the larger
  // crowding distance; the first drawn on a tie.
  size_t tournament(CounterRandom& random, const std::vector<Standing>& standing) const {
    auto draw = [&] {
      return std::min(standing.size() - 1, size_t(random.next() * double(standing.size())));
    };
    const size_t a = draw(), b = draw();
    const Standing &x = standing[a], &y = standing[b];
    const bool b_better = y.front < x.front || (y.front == x.front && y.crowding > x.crowding);
    return b_better ? b : a;
  }

  Params child(RequestId id, const std::vector<Standing>& standing) const {
    CounterRandom random(spec_.seed, static_cast<uint64_t>(id));
    const Params& first = trials_[parents_[tournament(random, standing)]].params;
    const Params& second = trials_[parents_[tournament(random, standing)]].params;
    Params out = first;
    if (random.next() < crossover_prob_)
      for (const Param& p : spec_.space.params())
        if (random.next() < swapping_prob_) out[p.name] = second[p.name];
    // The child's own seeded draw: an id no earlier trial drew with.
    const Params fresh = spec_.space.draw(spec_.seed, static_cast<uint64_t>(id), std::nullopt);
    for (const Param& p : spec_.space.params())
      if (random.next() < mutation_prob_) out[p.name] = fresh[p.name];
    return out;
  }

  // The next `population` trials (up to max_trials): children of the parents, or seeded draws
  // while there is no parent.
  std::vector<Operation> next_generation() {
    const std::vector<Standing> standing = standings();
    const size_t end = std::min<uint64_t>(max_trials_, trials_.size() + population_);
    std::vector<Operation> ops;
    for (RequestId id = static_cast<RequestId>(trials_.size()); static_cast<size_t>(id) < end;
         ++id) {
      Params params = parents_.empty()
                          ? spec_.space.draw(spec_.seed, static_cast<uint64_t>(id), std::nullopt)
                          : child(id, standing);
      ops.emplace_back(Create{id, params, std::nullopt});
      ops.emplace_back(Train{id, spec_.length_steps(params), spec_.eval_steps(params)});
      trials_.push_back(Trial{std::move(params), Status::kRunning, std::nullopt, -1});
    }
    return ops;
  }

  const StudySpec spec_;
  const Directions directions_;
  uint64_t max_trials_ = 0;
  int64_t population_ = 20;
  double mutation_prob_ = 0, crossover_prob_ = 0.9, swapping_prob_ = 0.5;

  std::vector<Trial> trials_;       // by id; generation g holds ids g * population onwards
  std::vector<RequestId> parents_;  // increasing: the elite the latest generation was bred from
};

}  // namespace

SearcherKind nsga2_searcher_kind() {
  return {{"population", "mutation_prob", "crossover_prob", "swapping_prob"},
          [](const StudySpec& s) { return std::make_unique<Nsga2Searcher>(s); },
          true};
}

}  // namespace hippo
