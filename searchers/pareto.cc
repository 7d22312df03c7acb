#include "searchers/pareto.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <stdexcept>

namespace hippo {
namespace {

// An objective's value turned into one to minimize.
double minimized(double value, bool maximize) {
  return maximize ? -value : value;
}

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

// The fronts of points that are all feasible, with one or two objectives and no NaN, by a sweep
// (Jensen 2003) in O(n log n). In the order best first by the first objective, then by the second,
// whatever dominates a point comes before it; it joins the first front none of whose members
// dominates it. Along that order a front's members get strictly better in the second objective
// (or repeat a point exactly, which dominates nothing), so its last member is the only one to
// compare with; and a point dominated by front k is dominated by every front before it (through
// the member of front k - 1 that dominates that of front k), so the first front that does not
// dominate it is found by binary search.
std::vector<std::vector<size_t>> sweep_fronts(const std::vector<ParetoPoint>& points,
                                              const std::vector<size_t>& ids, const Directions& d) {
  struct Point {
    double x, y;  // the objectives, each turned into one to minimize; y 0 with one objective
    size_t id;
  };
  std::vector<Point> order;
  for (size_t id : ids) {
    const std::vector<double>& v = points[id].values;
    order.push_back({minimized(v[0], d[0]), d.size() > 1 ? minimized(v[1], d[1]) : 0.0, id});
  }
  std::sort(order.begin(), order.end(),
            [](const Point& a, const Point& b) { return a.x != b.x ? a.x < b.x : a.y < b.y; });
  std::vector<std::vector<size_t>> fronts;
  std::vector<Point> last;  // by front: its member latest in the order
  for (const Point& p : order) {
    // `last` member q of a front comes before p (q.x <= p.x): it dominates p when it is no worse
    // in the second objective and is not the same point.
    const auto front = std::partition_point(last.begin(), last.end(), [&p](const Point& q) {
      return q.y < p.y || (q.y == p.y && q.x < p.x);
    });
    const size_t k = static_cast<size_t>(front - last.begin());
    if (k == fronts.size()) {
      fronts.emplace_back();
      last.push_back(p);
    }
    fronts[k].push_back(p.id);
    last[k] = p;
  }
  for (std::vector<size_t>& f : fronts) std::sort(f.begin(), f.end());
  return fronts;
}

// Deb's original sort, for any number of objectives: each pair of points compared once.
std::vector<std::vector<size_t>> pairwise_fronts(const std::vector<ParetoPoint>& points,
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
  const bool has_nan = std::any_of(points.begin(), points.end(), [](const ParetoPoint& p) {
    return std::isnan(p.violation) ||
           std::any_of(p.values.begin(), p.values.end(), [](double v) { return std::isnan(v); });
  });
  if (d.empty() || d.size() > 2 || has_nan) return pairwise_fronts(points, d);
  // Every feasible point dominates every infeasible one, and infeasible ones are ranked by their
  // violation alone: the feasible fronts, then one front per violation, smallest first.
  std::vector<size_t> feasible;
  std::map<double, std::vector<size_t>> by_violation;  // each in increasing index order
  for (size_t i = 0; i < points.size(); ++i)
    if (points[i].feasible())
      feasible.push_back(i);
    else
      by_violation[points[i].violation].push_back(i);
  std::vector<std::vector<size_t>> fronts = sweep_fronts(points, feasible, d);
  for (auto& [violation, ids] : by_violation) fronts.push_back(std::move(ids));
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
    for (size_t i = 0; i < d.size(); ++i) q[i] = minimized(x[i], d[i]);
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
