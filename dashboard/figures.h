// The dashboard's figures as SVG text, drawn by our own code from a StudyView: no charting
// library, no script needed to see them, the same bytes in the live pages and the one-file report.
// Every element that stands for something in the plan carries it in data-* attributes (a curve
// its trial, a tree box its stage, a timeline bar its execution), which the browser tests read
// and dashboard.js shows on hover; timeline bars also have a <title>. Text from the plan is
// escaped. Any finite value is drawn in bounded work and space (scale.h).
//
// At any size the figures of trials draw the trials of a Drawing (summary.h) one by one: a mark
// with data-trial and data-role (top, front, selected, extreme) and a <title>. The others are
// drawn every one up to kDrawEveryTrialUpTo trials (data-dots, data-lines: how many), beyond that
// as a density (a <g class="density" data-count>; the figure's data-binned: how many). Each
// figure says data-trials, data-exact and data-summarized.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dashboard/model.h"
#include "dashboard/summary.h"

namespace hippo::dashboard {

// Text escaped for HTML and SVG, in element content and in quoted attributes.
std::string escape(std::string_view text);
// A number as people read it: up to 4 significant digits ("0.8184", "1.2e+04").
std::string number(double value);

// Optimization history: each trial's best value of the metric by trial number, and the best so
// far as a step line.
std::string history_svg(const StudyView& study, const Drawing& drawing = {});
// Learning curves: one path per trial with values (class "curve", data-trial = its number), the
// metric by step; trials that share stages share those evaluations, so their curves coincide up
// to the step where they diverge. Long curves are downsampled (min and max per pixel column).
// Summarized: the exact trials' curves over the others' median and 10-90% band per 5 pixels of
// steps (data-banded: how many trials the band stands for).
std::string curves_svg(const StudyView& study, const Drawing& drawing = {});
// Parallel coordinates: an axis per parameter and one for the metric, a line per trial that has
// a value, coloured by that value (best yellow, worst purple). Summarized: the others' segments
// between neighbouring axes binned (24 bins an axis).
std::string parallel_svg(const StudyView& study, const Drawing& drawing = {});
// Slice plots: for each parameter, the trials' best values against the parameter's value.
std::vector<std::pair<std::string, std::string>> slice_svgs(const StudyView& study,
                                                            const Drawing& drawing = {});
// The parameters' importances (summary.h's importances) as bars, most important first.
std::string importance_svg(const StudyView& study, const Drawing& drawing = {});
// The stage tree along the step axis: a box per stage (class "stage", data-stage = its id,
// data-state, a <title> with its id and steps), branching where trials diverge, coloured by
// state, the trained part darker.
// Past kMaxStagesDrawn stages it is collapsed: the critical path and the paths of the drawing's
// top, front and selected trials, and under them how many of the other stages cover each step
// (data-drawn: the stages drawn). An expansion draws more of it (tree_stages_drawn).
constexpr size_t kMaxStagesDrawn = 2000;
// How a tree of more than kMaxStagesDrawn stages is drawn: collapsed (no expansion), or expanded
// from its top stages (`all`) or from one stage (`below`: that stage, its path and what is under
// it). An expanded tree draws the collapsed tree's paths and then stages breadth first, those
// nearest the top (or the stage) first, until `limit` stages are drawn in all (more only where
// those paths need more): an expanded tree of any size is a page of bounded size.
constexpr size_t kMaxStagesExpanded = 5000;
struct TreeExpansion {
  bool all = false;
  std::optional<StageId> below;  // a stage of the study (the plan's id)
  size_t limit = kMaxStagesExpanded;
  bool expanded() const { return all || below.has_value(); }
};
// Which of study.stages the tree draws (stages are drawn with their parents), and how many
// stages the expansion reaches that its limit left out. Throws std::out_of_range if `below` is
// not a stage of the study.
struct TreeDrawn {
  std::vector<bool> drawn;  // by position in study.stages
  size_t shown = 0;         // how many are drawn
  size_t left_out = 0;      // reached by the expansion, not drawn: past its limit
};
TreeDrawn tree_stages_drawn(const StudyView& study, const Drawing& drawing,
                            const TreeExpansion& expansion);
std::string tree_svg(const StudyView& study, const Drawing& drawing = {},
                     const TreeExpansion& expansion = {});
// The timeline: a lane per worker, a bar per execution (class "execution"), idle time blank;
// each lane says how busy its worker was, bars on the critical path are outlined. Past
// kMaxExecutionsDrawn executions: how busy each worker (or group of workers, past 100) was in
// each of 100 spans of time, and the critical path's executions one by one.
constexpr size_t kMaxExecutionsDrawn = 5000;
std::string timeline_svg(const StudyView& study);
// The Pareto front of a study of several objectives: objective y_objective against x_objective,
// a circle per trial at its result (class "trial" and front, feasible or infeasible, data-trial,
// a <title> with its values): the Pareto-optimal ones filled and larger, the front of this pair
// as a step line along the edge of what it dominates, infeasible ones grey, failed ones outlined
// red; diverged trials (never feasible, their values often not finite) are left out.
std::string pareto_svg(const StudyView& study, const Drawing& drawing = {}, size_t x_objective = 0,
                       size_t y_objective = 1);
// The hypervolume of the front over trials (hypervolume_history): a step line and a point per
// sample (class "hv", data-trial, data-hypervolume, a <title>); for more objectives than
// kMaxHypervolumeObjectives, a line that says so.
std::string hypervolume_svg(const StudyView& study);
// How a drawing summarized its figures, for their captions ("" when every trial is drawn); `goal`
// is the metric the top trials are the best of, "" for a study of several objectives (the front).
std::string drawing_note(const Drawing& drawing, const std::string& goal);

// Several studies' best so far by trial number, one line each (the comparison page).
std::string compare_svg(const std::vector<const StudyView*>& studies);

}  // namespace hippo::dashboard
