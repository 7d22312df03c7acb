#include "dashboard/summary.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

namespace hippo::dashboard {
namespace {

// The trials with the least and the most of `value` (of the trial at an index; nullopt: none for
// this trial).
template <typename Value>
void add_extremes(const StudyView& study, Value value, std::set<int64_t>& out) {
  std::optional<std::pair<double, int64_t>> lo, hi;
  for (size_t i = 0; i < study.trials.size(); ++i) {
    const std::optional<double> v = value(i);
    if (!v || !std::isfinite(*v)) continue;
    const int64_t number = study.trials[i].row.number;
    if (!lo || *v < lo->first) lo = {{*v, number}};
    if (!hi || *v > hi->first) hi = {{*v, number}};
  }
  if (lo) out.insert(lo->second);
  if (hi) out.insert(hi->second);
}

}  // namespace

std::vector<ParamColumn> param_columns(const StudyView& study) {
  const size_t n = study.trials.size();
  std::vector<ParamColumn> columns;
  std::map<std::string, size_t, std::less<>> index;
  auto add = [&](const std::string& name) {
    index.emplace(name, columns.size());
    columns.push_back({name, std::vector<const nlohmann::json*>(n, nullptr),
                       std::vector<std::optional<double>>(n)});
  };
  for (const std::string& name : study.param_names) add(name);
  const size_t named = columns.size();
  // Trials mostly list the same names in the same order: the column of a trial's k-th name is
  // first looked for where the trial before had its k-th.
  std::vector<size_t> guess;
  for (size_t i = 0; i < n; ++i) {
    const nlohmann::json& params = study.trials[i].row.params;
    if (!params.is_object()) continue;
    size_t k = 0;
    for (auto it = params.begin(); it != params.end(); ++it, ++k) {
      if (k >= guess.size()) guess.push_back(0);
      size_t c = guess[k];
      if (c >= columns.size() || columns[c].name != it.key()) {
        auto found = index.find(it.key());
        if (found == index.end()) {
          add(it.key());
          c = columns.size() - 1;
        } else {
          c = found->second;
        }
        guess[k] = c;
      }
      ParamColumn& column = columns[c];
      column.values[i] = &it.value();
      column.present = true;
      const bool is_number = it.value().is_number();
      if (is_number) column.numbers[i] = it.value().get<double>();
      column.any_number = column.any_number || is_number;
      column.all_numbers = column.all_numbers && is_number;
    }
  }
  // The names the spec does not list come after its own, by name (parameter_names).
  std::sort(columns.begin() + static_cast<std::ptrdiff_t>(named), columns.end(),
            [](const ParamColumn& a, const ParamColumn& b) { return a.name < b.name; });
  return columns;
}

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
      study, [&](size_t i) { return study.trials[i].best; }, d.extremes);
  for (size_t o = 0; study.goals.multi() && o < study.goals.objectives.size(); ++o)
    add_extremes(
        study,
        [&, o](size_t i) {
          const TrialView& t = study.trials[i];
          return t.result ? std::optional<double>(t.result->values[o]) : std::nullopt;
        },
        d.extremes);
  d.params = std::make_shared<const std::vector<ParamColumn>>(param_columns(study));
  for (const ParamColumn& column : *d.params)
    if (column.any_number)
      add_extremes(
          study, [&column](size_t i) { return column.numbers[i]; }, d.extremes);
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
  return importances(study, param_columns(study));
}

std::vector<Importance> importances(const StudyView& study,
                                    const std::vector<ParamColumn>& params) {
  // Each trial's value: its best (one objective), or the first objective at its result.
  auto value_of = [&](const TrialView& t) -> std::optional<double> {
    if (study.goals.several())
      return t.result && t.result->feasible ? std::optional<double>(t.result->values[0])
                                            : std::nullopt;
    return t.best;
  };
  std::vector<std::optional<double>> values;
  values.reserve(study.trials.size());
  for (const TrialView& t : study.trials) {
    const std::optional<double> v = value_of(t);
    values.push_back(v && std::isfinite(*v) ? v : std::nullopt);
  }
  // By name, each with its (value, trial's value) pairs in trial order.
  std::vector<const ParamColumn*> columns;
  for (const ParamColumn& column : params) columns.push_back(&column);
  std::sort(columns.begin(), columns.end(),
            [](const ParamColumn* a, const ParamColumn* b) { return a->name < b->name; });
  std::vector<Importance> out;
  for (const ParamColumn* c : columns) {
    const ParamColumn& column = *c;
    std::vector<std::pair<const nlohmann::json*, double>> pairs;
    std::vector<size_t> trial;  // of each pair
    for (size_t i = 0; i < values.size(); ++i)
      if (column.values[i] && values[i]) {
        pairs.emplace_back(column.values[i], *values[i]);
        trial.push_back(i);
      }
    if (pairs.empty()) continue;
    const std::string& name = column.name;
    const bool numeric = std::all_of(trial.begin(), trial.end(),
                                     [&](size_t i) { return column.numbers[i].has_value(); });
    // Bins: up to 10 of equal counts by the parameter's value (ties kept together), or one per
    // category.
    std::vector<std::vector<double>> bins;
    if (numeric) {
      // Sorted by the parameter's value held beside each pair (through the pointers, the sort's
      // reads would be scattered over the whole study's JSON).
      std::vector<std::pair<double, size_t>> order;
      order.reserve(pairs.size());
      for (size_t i = 0; i < pairs.size(); ++i) order.emplace_back(*column.numbers[trial[i]], i);
      std::sort(order.begin(), order.end(),
                [](const auto& a, const auto& b) { return a.first < b.first; });
      const size_t size = std::max<size_t>(1, (pairs.size() + 9) / 10);
      for (size_t i = 0; i < order.size(); ++i) {
        const bool tie =
            i > 0 && *pairs[order[i].second].first == *pairs[order[i - 1].second].first;
        if (bins.empty() || (bins.back().size() >= size && !tie)) bins.emplace_back();
        bins.back().push_back(pairs[order[i].second].second);
      }
    } else {
      std::map<std::string, std::vector<double>> categories;
      for (const auto& [p, v] : pairs) categories[p->dump()].push_back(v);
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
