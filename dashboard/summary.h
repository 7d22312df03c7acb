// How the figures of a large study stay readable and light: which trials a figure draws one by
// one (the top k by the study's goal, the Pareto front, the trials a user selected, the extremes
// of every axis) and how it draws the others: every one of them up to kDrawEveryTrialUpTo trials,
// beyond that as a density (binned counts) or, for curves, as quantile bands. One code path for
// every size: the split is always made, only the rest's drawing changes with the size.
// Also the parameters' importances (the share of the variance of the trials' best values that
// each parameter's main effect explains). Pure computation over a StudyView.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "dashboard/model.h"

namespace hippo::dashboard {

// 10,000: every point still drawn; past it a study of two objectives would pass 5 MB (its front
// figure is a circle and a title per trial).
constexpr size_t kDrawEveryTrialUpTo = 10000;
constexpr size_t kTopDrawn = 50;

// Each parameter's value in each trial, looked up once. The figures of a study read every
// trial's parameters many times (each figure, each axis), and a lookup by name in a trial's JSON
// costs more than the drawing: at 100,000 trials it was most of a page's rendering.
struct ParamColumn {
  std::string name;
  std::vector<const nlohmann::json*> values;   // by trial (study.trials' order); nullptr: none
  std::vector<std::optional<double>> numbers;  // by trial: the value, where it is a number
  bool present = false;                        // some trial has a value
  bool any_number = false;                     // some trial's value is a number
  bool all_numbers = true;                     // every value there is is a number
};
// In the order of study.parameter_names(), every name of it.
std::vector<ParamColumn> param_columns(const StudyView& study);

struct Drawing {
  std::vector<int64_t> top;       // the top trials by the goal, best first (several objectives:
                                  // the front, by number)
  std::vector<int64_t> selected;  // asked for by the user (jump to a trial), that exist
  std::set<int64_t> extremes;     // the least and the most of each axis (metric, objectives,
                                  // numeric parameters)
  std::set<int64_t> exact;        // all of the above, and the front: drawn one by one
  bool summarized = false;        // more trials than every_up_to: the rest as densities
  size_t trials = 0;
  // The study's parameter columns (param_columns), looked up once for every figure drawn with
  // this drawing; none in a drawing made by hand (each figure then looks them up itself).
  std::shared_ptr<const std::vector<ParamColumn>> params;
  // Why a trial is drawn one by one, as a class name: "selected", "top", "front" or "extreme";
  // "" for the rest.
  const char* role(int64_t number) const;
};

Drawing drawing_of(const StudyView& study, const std::vector<int64_t>& selected = {},
                   size_t every_up_to = kDrawEveryTrialUpTo, size_t top = kTopDrawn);

// Counts of points in the square cells of a box of pixels; a point outside is counted in the
// nearest cell, so every point added is counted once.
class Density {
 public:
  Density(double left, double top, double right, double bottom, double cell);
  void add(double x, double y);
  int64_t total() const { return total_; }
  int64_t most() const;
  int columns() const { return columns_; }
  int rows() const { return rows_; }
  int64_t count(int column, int row) const {
    return counts_[static_cast<size_t>(row) * columns_ + column];
  }
  // The cell's corner and side, in pixels.
  double x(int column) const { return left_ + column * cell_; }
  double y(int row) const { return top_ + row * cell_; }
  double cell() const { return cell_; }

 private:
  double left_, top_, cell_;
  int columns_, rows_;
  std::vector<int64_t> counts_;
  int64_t total_ = 0;
};

// The q-quantile (0 to 1) of `values`, linear between order statistics; sorts them.
double quantile(std::vector<double>& values, double q);

// A parameter's importance: the share of the variance of the trials' best values (one
// objective; several: the first's at each result) that the parameter's main effect explains,
// estimated from the trials themselves: the variance of the mean value per bin of the parameter
// (up to 10 bins of equal counts for numbers, one per category) over the total variance. The
// first-order term of fANOVA's decomposition, from the data rather than a fitted forest: 0 when
// the parameter tells nothing, near 1 when it decides alone. Sorted, most important first.
struct Importance {
  std::string parameter;
  double share = 0;
  size_t trials = 0;  // with both a value of the parameter and a value of the metric
};
std::vector<Importance> importances(const StudyView& study);
std::vector<Importance> importances(const StudyView& study, const std::vector<ParamColumn>& params);

}  // namespace hippo::dashboard
