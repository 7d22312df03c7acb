#include "searchers/pareto.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace hippo {
namespace {

bool finite(const std::vector<double>& values) {
  return std::all_of(values.begin(), values.end(), [](double v) { return std::isfinite(v); });
}

// The volume that boxes [q, r] cover together, for points q all below r in every coordinate
// (every objective turned into one to minimize). Sliced along the last coordinate; the plane is
// swept with a running minimum, so two objectives cost O(n log n).
double covered_volume(std::vector<std::vector<double>> q, const std::vector<double>& r) {
  if (q.empty()) return 0;
  const size_t m = r.size();
  if (m == 1) {
    double best = r[0];
    for (const auto& p : q) best = std::min(best, p[0]);
    return r[0] - best;
  }
  std::sort(q.begin(), q.end(), [m](const auto& a, const auto& b) { return a[m - 1] < b[m - 1]; });
  double volume = 0;
  if (m == 2) {
    double lowest_first = r[0];
    for (size_t k = 0; k < q.size(); ++k) {
      lowest_first = std::min(lowest_first, q[k][0]);
      const double top = k + 1 < q.size() ? q[k + 1][1] : r[1];
      volume += (r[0] - lowest_first) * (top - q[k][1]);
    }
    return volume;
  }
  std::vector<double> r_below(r.begin(), r.end() - 1);
  std::vector<std::vector<double>> below;  // points of the slabs so far, without the last coord
  for (size_t k = 0; k < q.size(); ++k) {
    below.emplace_back(q[k].begin(), q[k].end() - 1);
    const double top = k + 1 < q.size() ? q[k + 1][m - 1] : r[m - 1];
    if (top > q[k][m - 1]) volume += covered_volume(below, r_below) * (top - q[k][m - 1]);
  }
  return volume;
}

}  // namespace

bool dominates(const std::vector<double>& a, const std::vector<double>& b, const Directions& d) {
  bool better_somewhere = false;
  for (size_t i = 0; i < d.size(); ++i) {
    const bool a_better = d[i] ? a[i] > b[i] : a[i] < b[i];
    const bool b_better = d[i] ? b[i] > a[i] : b[i] < a[i];
    if (b_better) return false;
    better_somewhere = better_somewhere || a_better;
  }
  return better_somewhere;
}

bool constrained_dominates(const ParetoPoint& a, const ParetoPoint& b, const Directions& d) {
  if (a.feasible() != b.feasible()) return a.feasible();
  if (!a.feasible()) return a.violation < b.violation;
  return dominates(a.values, b.values, d);
}

std::vector<std::vector<size_t>> non_dominated_sort(const std::vector<ParetoPoint>& points,
                                                    const Directions& d) {
  const size_t n = points.size();
  std::vector<std::vector<size_t>> dominated(n);  // by i: the points i dominates
  std::vector<size_t> dominators(n, 0);           // by i: how many points dominate i
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j) {
      if (constrained_dominates(points[i], points[j], d)) {
        dominated[i].push_back(j);
        ++dominators[j];
      } else if (constrained_dominates(points[j], points[i], d)) {
        dominated[j].push_back(i);
        ++dominators[i];
      }
    }
  std::vector<std::vector<size_t>> fronts;
  std::vector<size_t> current;
  for (size_t i = 0; i < n; ++i)
    if (dominators[i] == 0) current.push_back(i);
  while (!current.empty()) {
    std::vector<size_t> next;
    for (size_t i : current)
      for (size_t j : dominated[i])
        if (--dominators[j] == 0) next.push_back(j);
    std::sort(next.begin(), next.end());
    fronts.push_back(std::move(current));
    current = std::move(next);
  }
  return fronts;
}

std::vector<double> crowding_distance(const std::vector<ParetoPoint>& points,
                                      const std::vector<size_t>& front) {
  const size_t n = front.size();
  std::vector<double> distance(n, 0);
  if (n == 0) return distance;
  const double inf = std::numeric_limits<double>::infinity();
  const size_t objectives = points[front[0]].values.size();
  std::vector<size_t> order(n);
  for (size_t i = 0; i < objectives; ++i) {
    std::iota(order.begin(), order.end(), 0);
    auto value = [&](size_t k) { return points[front[k]].values[i]; };
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return value(a) < value(b); });
    distance[order.front()] = distance[order.back()] = inf;
    const double range = value(order.back()) - value(order.front());
    if (!(range > 0) || !std::isfinite(range)) continue;
    for (size_t k = 1; k + 1 < n; ++k)
      distance[order[k]] += (value(order[k + 1]) - value(order[k - 1])) / range;
  }
  return distance;
}

std::vector<size_t> pareto_front(const std::vector<ParetoPoint>& points, const Directions& d) {
  std::vector<size_t> front;
  for (size_t i = 0; i < points.size(); ++i) {
    if (!points[i].feasible() || !finite(points[i].values)) continue;
    bool dominated = false;
    for (size_t j = 0; j < points.size() && !dominated; ++j)
      dominated = j != i && points[j].feasible() && finite(points[j].values) &&
                  dominates(points[j].values, points[i].values, d);
    if (!dominated) front.push_back(i);
  }
  return front;
}

double hypervolume(const std::vector<std::vector<double>>& points,
                   const std::vector<double>& reference, const Directions& d) {
  if (d.size() > kMaxHypervolumeObjectives)
    throw std::invalid_argument("hypervolume of more than " +
                                std::to_string(kMaxHypervolumeObjectives) + " objectives");
  // Every objective turned into one to minimize; only points better than the reference count.
  auto turned = [&](const std::vector<double>& x) {
    std::vector<double> q(d.size());
    for (size_t i = 0; i < d.size(); ++i) q[i] = d[i] ? -x[i] : x[i];
    return q;
  };
  const std::vector<double> r = turned(reference);
  std::vector<std::vector<double>> q;
  for (const auto& p : points) {
    if (!finite(p)) continue;
    std::vector<double> t = turned(p);
    bool inside = true;
    for (size_t i = 0; i < d.size(); ++i) inside = inside && t[i] < r[i];
    if (inside) q.push_back(std::move(t));
  }
  return covered_volume(std::move(q), r);
}

std::optional<std::vector<double>> hypervolume_reference(
    const std::vector<std::vector<double>>& points, const Directions& d) {
  std::vector<double> reference(d.size());
  bool any = false;
  for (size_t i = 0; i < d.size(); ++i) {
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (const auto& p : points) {
      if (!finite(p)) continue;
      lo = std::min(lo, p[i]);
      hi = std::max(hi, p[i]);
      any = true;
    }
    if (!any) return std::nullopt;
    const double margin = hi > lo ? (hi - lo) / 10 : 1;
    reference[i] = d[i] ? lo - margin : hi + margin;
  }
  return reference;
}

}  // namespace hippo
