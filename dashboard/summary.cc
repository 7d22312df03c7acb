#include "dashboard/summary.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

namespace hippo::dashboard {
namespace {

// The trials with the least and the most of `value` (nullopt: none for this trial).
template <typename Value>
void add_extremes(const StudyView& study, Value value, std::set<int64_t>& out) {
  std::optional<std::pair<double, int64_t>> lo, hi;
  for (const TrialView& t : study.trials) {
    const std::optional<double> v = value(t);
    if (!v || !std::isfinite(*v)) continue;
    if (!lo || *v < lo->first) lo = {{*v, t.row.number}};
    if (!hi || *v > hi->first) hi = {{*v, t.row.number}};
  }
  if (lo) out.insert(lo->second);
  if (hi) out.insert(hi->second);
}

}  // namespace

const char* Drawing::role(int64_t number) const {
  if (std::find(selected.begin(), selected.end(), number) != selected.end()) return "selected";
  if (std::find(top.begin(), top.end(), number) != top.end()) return "top";
  if (exact.count(number) && !extremes.count(number)) return "front";
  return exact.count(number) ? "extreme" : "";
}

Drawing drawing_of(const StudyView& study, const std::vector<int64_t>& selected, size_t every_up_to,
                   size_t top) {
  Drawing d;
  d.trials = study.trials.size();
  d.summarized = study.trials.size() > every_up_to;
  if (study.goals.several()) {
    d.top = study.front;
  } else {
    std::vector<const TrialView*> ranked;
    for (const TrialView& t : study.trials)
      if (t.best) ranked.push_back(&t);
    const size_t k = std::min(top, ranked.size());
    std::partial_sort(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(k), ranked.end(),
                      [&](const TrialView* a, const TrialView* b) {
                        if (*a->best != *b->best)
                          return study.maximize ? *a->best > *b->best : *a->best < *b->best;
                        return a->row.number < b->row.number;
                      });
    for (size_t i = 0; i < k; ++i) d.top.push_back(ranked[i]->row.number);
  }
  for (int64_t number : selected)
    if (study.trial(number) &&
        std::find(d.selected.begin(), d.selected.end(), number) == d.selected.end())
      d.selected.push_back(number);
  add_extremes(
      study, [](const TrialView& t) { return t.best; }, d.extremes);
  for (size_t o = 0; study.goals.multi() && o < study.goals.objectives.size(); ++o)
    add_extremes(
        study,
        [o](const TrialView& t) {
          return t.result ? std::optional<double>(t.result->values[o]) : std::nullopt;
        },
        d.extremes);
  std::set<std::string> numeric;
  for (const TrialView& t : study.trials)
    if (t.row.params.is_object())
      for (const auto& [name, value] : t.row.params.items())
        if (value.is_number()) numeric.insert(name);
  for (const std::string& name : numeric)
    add_extremes(
        study,
        [&name](const TrialView& t) -> std::optional<double> {
          if (!t.row.params.is_object()) return std::nullopt;
          const auto found = t.row.params.find(name);
          if (found == t.row.params.end() || !found->is_number()) return std::nullopt;
          return found->get<double>();
        },
        d.extremes);
  d.exact.insert(d.top.begin(), d.top.end());
  d.exact.insert(study.front.begin(), study.front.end());
  d.exact.insert(d.selected.begin(), d.selected.end());
  d.exact.insert(d.extremes.begin(), d.extremes.end());
  return d;
}

Density::Density(double left, double top, double right, double bottom, double cell)
    : left_(left), top_(top), cell_(cell) {
  columns_ = std::max(1, static_cast<int>(std::ceil((right - left) / cell)));
  rows_ = std::max(1, static_cast<int>(std::ceil((bottom - top) / cell)));
  counts_.assign(static_cast<size_t>(columns_) * rows_, 0);
}

void Density::add(double x, double y) {
  // The cell of a coordinate, clamped as a double first (a cast of a value beyond the integer's
  // range, or of NaN, is undefined): NaN counts in the first cell.
  auto cell_of = [&](double v, double from, int cells) {
    const double i = std::floor((v - from) / cell_);
    return std::isnan(i) ? size_t{0} : static_cast<size_t>(std::clamp(i, 0.0, cells - 1.0));
  };
  ++counts_[cell_of(y, top_, rows_) * static_cast<size_t>(columns_) + cell_of(x, left_, columns_)];
  ++total_;
}

int64_t Density::most() const {
  return counts_.empty() ? 0 : *std::max_element(counts_.begin(), counts_.end());
}

double quantile(std::vector<double>& values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double at = q * static_cast<double>(values.size() - 1);
  const size_t below = static_cast<size_t>(std::floor(at));
  const size_t above = std::min(values.size() - 1, below + 1);
  const double f = at - static_cast<double>(below);
  return values[below] + f * (values[above] - values[below]);
}

std::vector<Importance> importances(const StudyView& study) {
  // Each trial's value: its best (one objective), or the first objective at its result.
  auto value_of = [&](const TrialView& t) -> std::optional<double> {
    if (study.goals.several())
      return t.result && t.result->feasible ? std::optional<double>(t.result->values[0])
                                            : std::nullopt;
    return t.best;
  };
  std::map<std::string, std::vector<std::pair<nlohmann::json, double>>> by_parameter;
  for (const TrialView& t : study.trials) {
    const std::optional<double> v = value_of(t);
    if (!v || !std::isfinite(*v) || !t.row.params.is_object()) continue;
    for (const auto& [name, p] : t.row.params.items()) by_parameter[name].emplace_back(p, *v);
  }
  std::vector<Importance> out;
  for (auto& [name, pairs] : by_parameter) {
    const bool numeric =
        std::all_of(pairs.begin(), pairs.end(), [](const auto& p) { return p.first.is_number(); });
    // Bins: up to 10 of equal counts by the parameter's value (ties kept together), or one per
    // category.
    std::vector<std::vector<double>> bins;
    if (numeric) {
      std::sort(pairs.begin(), pairs.end(), [](const auto& a, const auto& b) {
        return a.first.template get<double>() < b.first.template get<double>();
      });
      const size_t size = std::max<size_t>(1, (pairs.size() + 9) / 10);
      for (size_t i = 0; i < pairs.size(); ++i) {
        const bool tie = i > 0 && pairs[i].first == pairs[i - 1].first;
        if (bins.empty() || (bins.back().size() >= size && !tie)) bins.emplace_back();
        bins.back().push_back(pairs[i].second);
      }
    } else {
      std::map<std::string, std::vector<double>> categories;
      for (const auto& [p, v] : pairs) categories[p.dump()].push_back(v);
      for (auto& [category, values] : categories) bins.push_back(std::move(values));
    }
    // Epsilon-squared: the between-bin sum of squares less what chance alone would give it,
    // over the total (the plain ratio favours parameters with many bins).
    double mean = 0;
    for (const auto& [p, v] : pairs) mean += v / static_cast<double>(pairs.size());
    double total = 0, between = 0;
    for (const auto& [p, v] : pairs) total += (v - mean) * (v - mean);
    for (const std::vector<double>& bin : bins) {
      double m = 0;
      for (double v : bin) m += v / static_cast<double>(bin.size());
      between += static_cast<double>(bin.size()) * (m - mean) * (m - mean);
    }
    const double k = static_cast<double>(bins.size()), n = static_cast<double>(pairs.size());
    double share = 0;
    if (total > 0 && std::isfinite(total) && n > k) {
      const double within_mean_square = (total - between) / (n - k);
      share = std::clamp((between - (k - 1) * within_mean_square) / (total + within_mean_square),
                         0.0, 1.0);
    }
    out.push_back({name, share, pairs.size()});
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Importance& a, const Importance& b) { return a.share > b.share; });
  return out;
}

}  // namespace hippo::dashboard
