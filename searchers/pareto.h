// Pareto order over several objectives, in one place for the searchers (nsga2, moasha), the
// history queries (`hippo best`) and the dashboard.
//
// A point is a trial's values, one per objective, and how far it is from meeting the study's
// constraints (0: feasible). Directions say which way each objective is better. With constraints,
// domination is Deb's constrained domination (Deb et al. 2002): a feasible point dominates an
// infeasible one, of two infeasible points the smaller violation dominates, and two feasible
// points compare by their values.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

namespace hippo {

struct ParetoPoint {
  std::vector<double> values;  // one per objective
  double violation = 0;        // 0 when every constraint holds
  bool feasible() const { return violation == 0; }
};

// maximize[i]: whether objective i is better larger.
using Directions = std::vector<bool>;

// a is at least as good as b in every objective and better in one (values only).
bool dominates(const std::vector<double>& a, const std::vector<double>& b, const Directions& d);
// Deb's constrained domination (see above).
bool constrained_dominates(const ParetoPoint& a, const ParetoPoint& b, const Directions& d);

// Fast non-dominated sorting (Deb et al. 2002) under constrained domination: fronts[0] holds the
// indices of the points no point dominates, fronts[1] those only fronts[0] dominates, and so on;
// each front in increasing index order. With one or two objectives (and no NaN) a sweep,
// O(n log n); with more, O(objectives * n^2).
std::vector<std::vector<size_t>> non_dominated_sort(const std::vector<ParetoPoint>& points,
                                                    const Directions& d);

// The crowding distance of each point of `front` (indices into points), in the order of `front`:
// the sum over objectives of the gap between its neighbours, divided by the objective's range;
// infinite at each objective's extremes.
std::vector<double> crowding_distance(const std::vector<ParetoPoint>& points,
                                      const std::vector<size_t>& front);

// The feasible points that no feasible point dominates, in increasing index order: the Pareto
// front `hippo best` prints. Points whose values are not all finite are never on it.
std::vector<size_t> pareto_front(const std::vector<ParetoPoint>& points, const Directions& d);

// The volume of the objective space that `points` dominate, bounded by `reference` (a point worse
// than all of them in every objective; points not better than it in every objective add nothing).
// Exact, by slicing one objective at a time: O(n^(m-1) log n) for m objectives, so callers keep
// m <= kMaxHypervolumeObjectives.
inline constexpr size_t kMaxHypervolumeObjectives = 3;
double hypervolume(const std::vector<std::vector<double>>& points,
                   const std::vector<double>& reference, const Directions& d);

// A reference point for the hypervolume of these values: each objective's worst value, moved a
// tenth of its range further (by 1 when the range is 0); nullopt when no point is finite.
std::optional<std::vector<double>> hypervolume_reference(
    const std::vector<std::vector<double>>& points, const Directions& d);

}  // namespace hippo
