#include "master/recorded_curves.h"

#include <zlib.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace hippo::master {
namespace {

constexpr const char* kMagic = "# hippo recorded curves v1";
constexpr size_t kMaxBytes = size_t{1} << 30;  // uncompressed: far above any table of curves
const char* const kTail[] = {"steps_per_epoch", "step_s", "eval_s", "epoch", "accuracy", "loss"};

// The whole file, gunzipped when it is gzip (zlib reads plain files as they are).
std::string read_all(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error(path + ": cannot open it");
  std::string out;
  char buf[1 << 16];
  int n = 0;
  while ((n = gzread(f, buf, sizeof buf)) > 0) {
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > kMaxBytes) break;
  }
  int error = Z_OK;
  const std::string message = n < 0 ? gzerror(f, &error) : "";
  gzclose(f);
  if (n < 0)
    throw std::runtime_error(path + ": not a readable gzip or text file (" + message + ")");
  if (out.size() > kMaxBytes)
    throw std::runtime_error(path + ": more than " + std::to_string(kMaxBytes) + " bytes");
  return out;
}

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> fields;
  std::string field;
  std::istringstream in(line);
  while (std::getline(in, field, '\t')) fields.push_back(field);
  if (!line.empty() && line.back() == '\t') fields.emplace_back();
  return fields;
}

// Reads one table, failing with its file and line.
class Reader {
 public:
  Reader(std::string path, const std::string& text) : path_(std::move(path)) {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines_.push_back(line);
  }

  CurveTable::Leaf leaf(const std::vector<std::string>& f) {
    if (f.size() != 5) fail("a space line has 5 fields (space NAME log|linear LO HI)");
    if (f[2] != "log" && f[2] != "linear") fail("a leaf's scale is log or linear, not " + f[2]);
    CurveTable::Leaf l{f[1], f[2] == "log", number(f[3], "LO"), number(f[4], "HI")};
    if (l.name.empty()) fail("a leaf has no name");
    if (!std::isfinite(l.lo) || !std::isfinite(l.hi) || !(l.lo < l.hi) || (l.log && l.lo <= 0))
      fail("leaf " + l.name + ": expected finite LO < HI (LO > 0 on a log scale)");
    return l;
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(path_ + ":" + std::to_string(at_ + 1) + ": " + what);
  }
  // A finite number, or with `nan_too` also nan (a diverged epoch's metrics).
  double number(const std::string& text, const std::string& what, bool nan_too = false) const {
    char* end = nullptr;
    const double v = text.empty() ? 0 : std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || std::isinf(v) || (std::isnan(v) && !nan_too))
      fail(what + ": expected a finite number" + (nan_too ? " or nan" : "") + ", got \"" + text +
           "\"");
    return v;
  }

  std::vector<std::string> lines_;
  size_t at_ = 0;
  std::string path_;
};

}  // namespace

double CurveTable::Leaf::normalized(double v) const {
  if (!log) return (v - lo) / (hi - lo);
  if (v <= 0) return std::numeric_limits<double>::quiet_NaN();
  return (std::log(v) - std::log(lo)) / (std::log(hi) - std::log(lo));
}

CurveTable CurveTable::read(const std::string& path) {
  Reader r(path, read_all(path));
  CurveTable t;
  if (r.lines_.empty() || r.lines_[0] != kMagic)
    r.fail(std::string("not a table of recorded curves: the first line is not \"") + kMagic + "\"");
  for (r.at_ = 1; r.at_ < r.lines_.size() && r.lines_[r.at_].starts_with("#");) ++r.at_;
  for (; r.at_ < r.lines_.size() && r.lines_[r.at_].starts_with("space\t"); ++r.at_) {
    t.leaves_.push_back(r.leaf(split(r.lines_[r.at_])));
    for (size_t i = 0; i + 1 < t.leaves_.size(); ++i)
      if (t.leaves_[i].name == t.leaves_.back().name)
        r.fail("leaf " + t.leaves_[i].name + " twice");
  }
  if (t.leaves_.empty()) r.fail("expected the space's lines (space NAME log|linear LO HI)");
  // The header: config, the leaves in order, then the fixed columns.
  std::vector<std::string> header = {"config"};
  for (const Leaf& l : t.leaves_) header.push_back(l.name);
  header.insert(header.end(), std::begin(kTail), std::end(kTail));
  if (r.at_ >= r.lines_.size() || split(r.lines_[r.at_]) != header) {
    std::string expected;
    for (const std::string& h : header) expected += (expected.empty() ? "" : " ") + h;
    r.fail("expected the header: " + expected);
  }
  const size_t n = t.leaves_.size();
  for (++r.at_; r.at_ < r.lines_.size(); ++r.at_) {
    const std::vector<std::string> f = split(r.lines_[r.at_]);
    if (f.size() != header.size())
      r.fail(std::to_string(header.size()) + " fields expected, got " + std::to_string(f.size()));
    const double number = r.number(f[0], "config");
    const double epoch = r.number(f[n + 4], "epoch");
    const bool first = epoch == 1;
    const double expected_config = static_cast<double>(t.configs_.size()) - (first ? 0 : 1);
    if (number != expected_config || (t.configs_.empty() && !first))
      r.fail("config " + f[0] + " epoch " + f[n + 4] + ": configurations are numbered 0, 1, ... " +
             "in order, each from epoch 1");
    if (first) {
      if (!t.configs_.empty() && t.configs_.back().accuracy.size() != t.configs_[0].accuracy.size())
        r.fail("config " + std::to_string(t.configs_.size() - 1) + " has " +
               std::to_string(t.configs_.back().accuracy.size()) + " epochs, config 0 has " +
               std::to_string(t.configs_[0].accuracy.size()));
      Config c;
      for (size_t i = 0; i < n; ++i) c.values.push_back(r.number(f[1 + i], t.leaves_[i].name));
      const double spe = r.number(f[n + 1], "steps_per_epoch");
      if (spe < 1 || spe != std::floor(spe) || spe > 1e12)
        r.fail("steps_per_epoch: expected an integer >= 1, got " + f[n + 1]);
      c.steps_per_epoch = static_cast<int64_t>(spe);
      c.step_s = r.number(f[n + 2], "step_s");
      c.eval_s = r.number(f[n + 3], "eval_s");
      if (!(c.step_s > 0) || c.eval_s < 0) r.fail("expected step_s > 0 and eval_s >= 0");
      t.configs_.push_back(std::move(c));
    }
    Config& c = t.configs_.back();
    if (epoch != static_cast<double>(c.accuracy.size() + 1))
      r.fail("config " + f[0] + ": epoch " + f[n + 4] + " after epoch " +
             std::to_string(c.accuracy.size()));
    for (size_t i = 0; i < n; ++i)
      if (r.number(f[1 + i], t.leaves_[i].name) != c.values[i])
        r.fail("config " + f[0] + ": " + t.leaves_[i].name + " differs from its epoch 1");
    if (r.number(f[n + 1], "steps_per_epoch") != static_cast<double>(c.steps_per_epoch) ||
        r.number(f[n + 2], "step_s") != c.step_s || r.number(f[n + 3], "eval_s") != c.eval_s)
      r.fail("config " + f[0] + ": its times differ from its epoch 1");
    const double accuracy = r.number(f[n + 5], "accuracy", true),
                 loss = r.number(f[n + 6], "loss", true);
    const bool diverged = std::isnan(accuracy) && std::isnan(loss);
    if (!diverged && (!(accuracy >= 0 && accuracy <= 1) || !(loss >= 0)))
      r.fail("config " + f[0] + " epoch " + f[n + 4] +
             ": expected accuracy in [0, 1] and loss >= 0 (or nan for both), got " + f[n + 5] +
             " and " + f[n + 6]);
    if (!diverged && !c.accuracy.empty() && std::isnan(c.accuracy.back()))
      r.fail("config " + f[0] + " epoch " + f[n + 4] + ": a number after a diverged (nan) epoch");
    c.accuracy.push_back(accuracy);
    c.loss.push_back(loss);
  }
  if (t.configs_.empty()) r.fail("no configuration");
  if (t.configs_.back().accuracy.size() != t.configs_[0].accuracy.size())
    r.fail("the last configuration has " + std::to_string(t.configs_.back().accuracy.size()) +
           " epochs, config 0 has " + std::to_string(t.configs_[0].accuracy.size()));
  for (const Config& c : t.configs_) {
    std::vector<double> u;
    for (size_t i = 0; i < n; ++i) u.push_back(t.leaves_[i].normalized(c.values[i]));
    t.normalized_.push_back(std::move(u));
  }
  return t;
}

size_t CurveTable::nearest(const std::vector<double>& values) const {
  std::vector<double> u;
  for (size_t i = 0; i < leaves_.size(); ++i) u.push_back(leaves_[i].normalized(values.at(i)));
  size_t best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (size_t c = 0; c < normalized_.size(); ++c) {
    double d = 0;
    for (size_t i = 0; i < u.size(); ++i)
      d += (u[i] - normalized_[c][i]) * (u[i] - normalized_[c][i]);
    if (d < best_d) {  // strictly: a tie keeps the lower number
      best_d = d;
      best = c;
    }
  }
  return best;
}

const CurveTable::Config& RecordedCurves::config_of(const StudySpec& spec,
                                                    const Hyperparams& hyperparams) const {
  std::vector<double> values;
  for (const CurveTable::Leaf& leaf : table_.leaves()) {
    auto it = hyperparams.find(leaf.name);
    if (it == hyperparams.end() || it->second.is_text())
      throw std::runtime_error("--curves-from: study " + spec.name +
                               " has no numeric hyper-parameter \"" + leaf.name +
                               "\", a leaf of the recorded table");
    values.push_back(it->second.value_at(0));
  }
  return table_.configs()[table_.nearest(values)];
}

nlohmann::json RecordedCurves::metrics(const StudySpec& spec, const std::string& /*root_key*/,
                                       const Hyperparams& hyperparams, int64_t step) {
  if (step < 1 || step > table_.epochs())
    throw std::runtime_error("--curves-from: study " + spec.name + " evaluates at step " +
                             std::to_string(step) + "; a replayed step is a recorded epoch, 1 to " +
                             std::to_string(table_.epochs()));
  const CurveTable::Config& c = config_of(spec, hyperparams);
  return {{"accuracy", c.accuracy[step - 1]}, {"loss", c.loss[step - 1]}};
}

std::optional<MetricModel::StepTimes> RecordedCurves::times(const StudySpec& spec,
                                                            const std::string& /*root_key*/,
                                                            const Hyperparams& hyperparams) {
  if (hyperparams.empty()) return std::nullopt;  // a job of no trial: a root's initial state
  const CurveTable::Config& c = config_of(spec, hyperparams);
  return StepTimes{c.step_s * static_cast<double>(c.steps_per_epoch), c.eval_s};
}

}  // namespace hippo::master
