#include "master/retention.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace hippo::master {

double retention_value(const RetentionCandidate& c) {
  constexpr double kHalfLife_s = 7 * 24 * 3600.0;
  const double recency = std::exp2(-std::max(0.0, c.age_s) / kHalfLife_s);
  return static_cast<double>(c.step) * static_cast<double>(c.trials_through) * recency /
         static_cast<double>(std::max<int64_t>(1, c.bytes));
}

std::vector<int64_t> choose_retained(std::vector<RetentionCandidate> candidates,
                                     int64_t budget_bytes) {
  std::vector<std::pair<double, const RetentionCandidate*>> order;
  for (const RetentionCandidate& c : candidates) order.push_back({retention_value(c), &c});
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second->id < b.second->id;
  });
  std::vector<int64_t> kept;
  int64_t left = budget_bytes;
  for (const auto& [value, c] : order) {
    const int64_t bytes = std::max<int64_t>(1, c->bytes);  // as in the value: a budget 0 keeps none
    if (bytes > left) continue;
    left -= bytes;
    kept.push_back(c->id);
  }
  return kept;
}

std::unordered_map<StageId, int64_t> trials_through_ends(const StageTree& tree) {
  const std::vector<StageId> order = tree.parents_first();  // walked backwards: children first
  // below: the trials ending in a stage or under it; through its end, those of its children's
  // and those of its own that reach its end.
  std::unordered_map<StageId, int64_t> below, out;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const Stage& s = tree.stage(*it);
    int64_t children = 0, at_end = 0;
    for (StageId child : s.children) children += below[child];
    const std::vector<TrialId>& own = tree.trials_ending_in(s.id);
    for (TrialId t : own)
      if (tree.trial(t).length == s.end) ++at_end;
    below[s.id] = children + static_cast<int64_t>(own.size());
    out[s.id] = children + at_end;
  }
  return out;
}

int64_t trials_through(const StageTree& tree, const std::unordered_map<StageId, int64_t>& ends,
                       StageId stage, int64_t step) {
  int64_t n = ends.at(stage);
  // Trials that end inside the stage pass through the state if they reach its step.
  for (TrialId t : tree.trials_ending_in(stage)) {
    const int64_t length = tree.trial(t).length;
    if (length < tree.stage(stage).end && length >= step) ++n;
  }
  return n;
}

int64_t parse_size(const std::string& text) {
  auto bad = [&] {
    return std::invalid_argument("size \"" + text +
                                 "\": expected a number of bytes with an optional unit (0, "
                                 "500MB, 20GB, 1.5GiB)");
  };
  size_t used = 0;
  double number = 0;
  try {
    number = std::stod(text, &used);
  } catch (const std::exception&) {
    throw bad();
  }
  if (!std::isfinite(number) || number < 0 || !std::isdigit(static_cast<unsigned char>(text[0])))
    throw bad();
  std::string unit = text.substr(used);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double scale = 1;
  if (!unit.empty() && unit != "B") {
    const std::string prefixes = "KMGT";
    size_t power = prefixes.find(unit[0]);
    std::string rest = unit.substr(1);
    if (power == std::string::npos || !(rest.empty() || rest == "B" || rest == "IB")) throw bad();
    scale = std::pow(rest == "IB" ? 1024.0 : 1000.0, static_cast<double>(power + 1));
  }
  const double bytes = number * scale;
  if (bytes > 9.0e18) throw bad();
  return static_cast<int64_t>(std::llround(bytes));
}

std::string format_size(int64_t bytes) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1000 && unit < 4) {
    value /= 1000;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, unit == 0 ? "%.0f %s" : "%.1f %s", value, units[unit]);
  return buf;
}

}  // namespace hippo::master
