#include "searchers/space.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>

#include "stagetree/settings.h"

namespace hippo {
namespace {

using nlohmann::json;
constexpr double kInf = std::numeric_limits<double>::infinity();
// Lengths, milestones and points are at most this many units (so that steps fit in int64).
constexpr int64_t kMaxUnits = 1'000'000'000;

// What one leaf accepts.
struct Rule {
  // kScalar: number, text or bool; kModelValue: any value (a model field's, which its own rules
  // check: spec.cc).
  enum Type { kNumber, kInteger, kText, kBool, kScalar, kModelValue } type;
  double min = -kInf, max = kInf;
  std::vector<std::string_view> choices;  // kText
};

Rule rule_for(const SettingInfo* s) {
  if (!s) return {Rule::kScalar, -kInf, kInf, {}};
  static constexpr Rule::Type kTypes[] = {Rule::kNumber, Rule::kInteger, Rule::kText, Rule::kBool};
  return {kTypes[static_cast<int>(s->type)], s->min, s->max, s->choices};
}

const Rule kFactor{Rule::kNumber, 0, kInf, {}};               // gamma
const Rule kIntegerFactor{Rule::kInteger, 1, 1 << 20, {}};    // gamma of an integer setting
const Rule kUnits{Rule::kInteger, 1, double(kMaxUnits), {}};  // lengths, milestones
const Rule kStart{Rule::kInteger, 0, double(kMaxUnits), {}};  // a piecewise point's start; wsd's
                                                              // warmup and decay_start
const Rule kCooldownShape{Rule::kText, -kInf, kInf, {"linear", "cosine", "1-sqrt"}};

std::string number_text(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(int64_t(v));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string noun(const Rule& r) {
  switch (r.type) {
    case Rule::kNumber:
      return "a number";
    case Rule::kInteger:
      return "an integer";
    case Rule::kText: {
      std::string s = "one of";
      for (size_t i = 0; i < r.choices.size(); ++i)
        s += (i ? ", \"" : " \"") + std::string(r.choices[i]) + "\"";
      return s;
    }
    case Rule::kBool:
      return "true or false";
    case Rule::kScalar:
      return "a number, string or boolean";
    case Rule::kModelValue:
      return "a value of the model's field";
  }
  return "";
}

std::string range_text(const Rule& r) {
  return " in [" + number_text(r.min) + ", " + number_text(r.max) + "]";
}

// A constant, or one candidate of a grid or choice.
void check_scalar(const Field& f, const Rule& r, const std::string& or_else) {
  const json& v = f.json();
  bool ok = false;
  switch (r.type) {
    case Rule::kNumber:
    case Rule::kInteger:
      ok = v.is_number();
      break;
    case Rule::kText:
      ok = v.is_string();
      break;
    case Rule::kBool:
      ok = v.is_boolean();
      break;
    case Rule::kScalar:
      ok = v.is_number() || v.is_string() || v.is_boolean();
      break;
    case Rule::kModelValue:
      ok = true;
      break;
  }
  if (!ok) f.fail("expected " + noun(r) + or_else + ", got " + brief(v));
  if (r.type == Rule::kText && std::find(r.choices.begin(), r.choices.end(),
                                         v.get_ref<const std::string&>()) == r.choices.end())
    f.fail("expected " + noun(r) + ", got " + brief(v));
  if (r.type == Rule::kInteger) f.integer(INT64_MIN, INT64_MAX);  // integral; range below
  if (v.is_number()) {
    double x = f.number();
    if (x < r.min || x > r.max) f.fail("expected " + noun(r) + range_text(r) + ", got " + brief(v));
  }
}

// The setting's entry in the built-in table, nullptr for a free (external) one.
const SettingInfo* setting_info(const NamedField& h, const SpaceRules& rules) {
  const SettingInfo* info = find_setting(h.name);
  if (rules.builtin && !info) {
    std::string known;
    for (const SettingInfo& s : builtin_settings())
      known += (known.empty() ? "" : ", ") + std::string(s.name);
    h.field.fail("unknown setting \"" + h.name + "\" for a built-in model (known: " + known + ")");
  }
  return rules.builtin || h.name == "batch_size" ? info : nullptr;
}

const char* const kDistNames[] = {"grid", "choice", "uniform", "loguniform", "int"};

class Parser {
 public:
  Parser(const SpaceRules& rules, std::vector<Param>* params) : rules_(rules), params_(params) {}

  // A model field written as a distribution.
  void model_field(const Field& f, const std::string& key) {
    index_ = Param::kModelLeaf;
    leaf(f, {Rule::kModelValue, -kInf, kInf, {}}, "model." + key, json::json_pointer("/" + key));
  }

  // A hyper-parameter's whole value.
  void hyperparam(const NamedField& h, size_t index) {
    index_ = index;
    Rule rule = rule_for(setting_info(h, rules_));
    bool schedulable = rule.type != Rule::kText && rule.type != Rule::kBool;
    if (h.field.is_object() && h.field.has("schedule")) {
      if (!schedulable)
        h.field.fail("\"" + h.name + "\" is constant over a trial and takes no schedule");
      if (rule.type == Rule::kScalar) rule.type = Rule::kNumber;
      schedule(h.field, rule, h.name, json::json_pointer(), "step");
    } else {
      leaf(h.field, rule, h.name, json::json_pointer(),
           schedulable ? ", a distribution or a schedule" : " or a distribution");
    }
  }

 private:
  // A constant or a distribution.
  void leaf(const Field& f, const Rule& r, const std::string& name, const json::json_pointer& where,
            const std::string& or_else = " or a distribution") {
    if (!f.is_object()) return check_scalar(f, r, or_else);
    // A model field's candidates are whole values (lists of widths): nothing to draw between.
    if (r.type == Rule::kModelValue &&
        (f.json().size() != 1 || (!f.has("grid") && !f.has("choice") && !f.has("int"))))
      f.fail("expected a value, or a grid, choice or int over the field's values, got " +
             brief(f.json()));
    if (f.json().size() != 1) f.fail("expected " + noun(r) + or_else + ", got " + brief(f.json()));
    Param p;
    p.name = name;
    p.hyperparam = index_;
    p.where = where;
    const std::string& key = f.json().begin().key();
    auto it = std::find(std::begin(kDistNames), std::end(kDistNames), key);
    if (it == std::end(kDistNames))
      f.fail("expected " + noun(r) + or_else + ", got " + brief(f.json()) +
             " (distributions: grid, choice, uniform, loguniform, int)");
    p.kind = static_cast<DistKind>(it - std::begin(kDistNames));
    Field d = f[key];
    size_t n = d.items(p.kind == DistKind::kGrid || p.kind == DistKind::kChoice ? 1 : 2);
    if (p.kind == DistKind::kGrid || p.kind == DistKind::kChoice) {
      for (size_t i = 0; i < n; ++i) {
        check_scalar(d[i], r, "");
        if (std::find(p.values.begin(), p.values.end(), d[i].json()) != p.values.end())
          d[i].fail("duplicate value " + brief(d[i].json()));
        p.values.push_back(d[i].json());
      }
    } else {
      if (n != 2) d.fail("expected [lo, hi], got " + brief(d.json()));
      bool is_int = p.kind == DistKind::kInt;
      if (r.type == Rule::kText || r.type == Rule::kBool)
        f.fail("expected grid or choice for " + noun(r) + ", got " + key);
      if (r.type == Rule::kInteger && !is_int)
        f.fail("expected an int distribution for an integer, got " + key);
      Rule bound = r;
      if (bound.type == Rule::kScalar) bound.type = Rule::kNumber;
      if (is_int) {  // bounded so that hi - lo + 1 is exact in a double
        constexpr double kMaxExact = 0x1.0p53;
        bound = {Rule::kInteger, std::max(r.min, -kMaxExact), std::min(r.max, kMaxExact), {}};
      }
      check_scalar(d[0], bound, "");
      check_scalar(d[1], bound, "");
      p.lo = d[0].number();
      p.hi = d[1].number();
      if (p.lo >= p.hi) d.fail("expected lo < hi, got " + brief(d.json()));
      if (p.kind == DistKind::kLogUniform && p.lo <= 0)
        d.fail("loguniform needs lo > 0, got " + brief(d.json()));
    }
    params_->push_back(std::move(p));
  }

  // The smallest and largest value a leaf parsed since `params_before` can take: its constant, or
  // its distribution's range.
  std::pair<double, double> leaf_range(const Field& f, size_t params_before) const {
    if (params_->size() == params_before) return {f.number(), f.number()};
    const Param& p = params_->back();
    if (p.kind != DistKind::kGrid && p.kind != DistKind::kChoice) return {p.lo, p.hi};
    std::pair<double, double> range = {kInf, -kInf};
    for (const json& v : p.values)
      range = {std::min(range.first, v.get<double>()), std::max(range.second, v.get<double>())};
    return range;
  }

  // `{"schedule": NAME, "unit": ..., fields}`; `unit` defaults to the enclosing schedule's.
  void schedule(const Field& f, const Rule& value, const std::string& name,
                const json::json_pointer& where, const std::string& outer_unit) {
    using K = ScheduleField;
    Field kind = f["schedule"];
    const ScheduleShape* shape = nullptr;
    std::string names;
    for (const ScheduleShape& s : schedule_shapes()) {
      if (kind.json() == s.name) shape = &s;
      names += (names.empty() ? "" : ", ") + std::string(s.name);
    }
    if (!shape) kind.fail("unknown schedule " + brief(kind.json()) + " (known: " + names + ")");
    bool integer = value.type == Rule::kInteger;
    if (integer && !shape->integer_ok)
      kind.fail("an integer setting takes constant, multistep or piecewise, got " +
                brief(kind.json()));
    std::vector<std::string_view> keys = {"schedule", "unit"};
    for (const ScheduleField& field : shape->fields) keys.push_back(field.name);
    f.check_keys(keys);
    std::string unit = outer_unit;
    std::map<std::string_view, std::pair<double, double>> ranges;  // of each length field
    if (f.has("unit")) {
      unit = f["unit"].text();
      if (unit != "step" && unit != "epoch")
        f["unit"].fail("expected \"step\" or \"epoch\", got " + brief(f["unit"].json()));
    }
    if (unit == "epoch" && !rules_.no_epochs.empty())
      (f.has("unit") ? f["unit"] : f)
          .fail("epoch units are not possible here: " + rules_.no_epochs);
    for (const ScheduleField& field : shape->fields) {
      std::string key(field.name);
      Field sub = f[key];
      std::string sub_name = name + "." + key;
      json::json_pointer sub_where = where / key;
      switch (field.kind) {
        case K::kValue:
          leaf(sub, value, sub_name, sub_where);
          break;
        case K::kFactor:
          leaf(sub, integer ? kIntegerFactor : kFactor, sub_name, sub_where);
          break;
        case K::kUnits:
        case K::kUnitsFrom0: {
          size_t before = params_->size();
          leaf(sub, field.kind == K::kUnits ? kUnits : kStart, sub_name, sub_where);
          ranges[field.name] = leaf_range(sub, before);
          break;
        }
        case K::kShape:
          leaf(sub, kCooldownShape, sub_name, sub_where);
          break;
        case K::kUnitsList:
          for (size_t i = 0, n = sub.items(1); i < n; ++i)
            leaf(sub[i], kUnits, sub_name + "[" + std::to_string(i) + "]", sub_where / i);
          break;
        case K::kPoints: {
          // A start may be drawn too; every trial's starts must increase, so the ranges of two
          // neighbouring starts may not overlap.
          double previous_last = -1;
          for (size_t i = 0, n = sub.items(1); i < n; ++i) {
            Field point = sub[i];
            if (point.items(2) != 2)
              point.fail("expected [start, value], got " + brief(point.json()));
            const std::string point_name = sub_name + "[" + std::to_string(i) + "]";
            size_t before = params_->size();
            leaf(point[0], kStart, point_name + "[0]", sub_where / i / 0);
            auto [first, last] = leaf_range(point[0], before);
            if (i == 0 && last != 0) point[0].fail("the first point must start at 0");
            if (i > 0 && first <= previous_last)
              point[0].fail(point[0].is_object()
                                ? "point starts must increase: this point may start at " +
                                      number_text(first) + ", the one before at " +
                                      number_text(previous_last)
                                : "point starts must increase");
            previous_last = last;
            leaf(point[1], value, point_name + "[1]", sub_where / i / 1);
          }
          break;
        }
        case K::kAfter:
          if (!sub.is_object() || !sub.has("schedule"))
            sub.fail("expected a schedule, got " + brief(sub.json()));
          schedule(sub, value, sub_name, sub_where, unit);
          break;
      }
    }
    // Every trial's cooldown must start after its warmup: the ranges may not overlap.
    if (shape->name == "wsd" && ranges["warmup"].second > ranges["decay_start"].first)
      f["decay_start"].fail("the cooldown must not start before the warmup ends: decay_start " +
                            std::string(f["decay_start"].is_object() ? "may be " : "is ") +
                            number_text(ranges["decay_start"].first) + ", warmup " +
                            std::string(f["warmup"].is_object() ? "up to " : "") +
                            number_text(ranges["warmup"].second));
  }

  const SpaceRules& rules_;
  std::vector<Param>* params_;
  size_t index_ = 0;
};

// The sequence of a concrete (leaf-free, validated) value.
Sequence build_schedule(const json& s, int64_t steps_per_epoch, const std::string& outer_unit) {
  std::string unit = s.value("unit", outer_unit);
  int64_t u = unit == "epoch" ? steps_per_epoch : 1;
  const std::string& kind = s.at("schedule").get_ref<const std::string&>();
  auto num = [&](const char* key) { return s.at(key).get<double>(); };
  auto steps = [&](const json& v) { return v.get<int64_t>() * u; };
  if (kind == "constant") return Sequence::constant(num("value"));
  if (kind == "multistep") {
    std::vector<int64_t> milestones;
    for (const json& m : s.at("milestones")) milestones.push_back(steps(m));
    std::sort(milestones.begin(), milestones.end());  // sampled milestones may come in any order
    return multistep(num("init"), std::move(milestones), num("gamma"));
  }
  if (kind == "step_decay") return step_decay(num("init"), steps(s.at("every")), num("gamma"));
  if (kind == "exponential") return exponential(num("init"), num("gamma"), u);
  if (kind == "cosine") return cosine(num("init"), num("final"), steps(s.at("length")));
  if (kind == "warmup_linear")
    return warmup_linear(num("init"), steps(s.at("warmup")),
                         build_schedule(s.at("after"), steps_per_epoch, unit));
  if (kind == "wsd")
    return wsd(num("peak"), steps(s.at("warmup")), steps(s.at("decay_start")), steps(s.at("decay")),
               num("final"), s.at("shape").get<std::string>());
  std::vector<std::pair<int64_t, double>> points;  // piecewise
  for (const json& p : s.at("points")) points.emplace_back(steps(p.at(0)), p.at(1).get<double>());
  return piecewise(points);
}

Sequence build(const json& v, int64_t steps_per_epoch) {
  if (v.is_string()) return Sequence::text(v.get<std::string>());
  if (v.is_boolean()) return Sequence::constant(v.get<bool>() ? 1 : 0);
  if (v.is_number()) return Sequence::constant(v.get<double>());
  return build_schedule(v, steps_per_epoch, "step");
}

uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [0, 1), a pure function of its arguments.
double uniform01(uint64_t seed, uint64_t counter, uint64_t leaf) {
  return double(mix(mix(mix(seed) ^ counter) ^ leaf) >> 11) * 0x1.0p-53;
}

}  // namespace

const std::vector<ScheduleShape>& schedule_shapes() {
  using K = ScheduleField;
  static const std::vector<ScheduleShape> kShapes = {
      {"constant", {{"value", K::kValue}}, true},
      {"multistep",
       {{"init", K::kValue}, {"milestones", K::kUnitsList}, {"gamma", K::kFactor}},
       true},
      {"step_decay", {{"init", K::kValue}, {"every", K::kUnits}, {"gamma", K::kFactor}}, false},
      {"exponential", {{"init", K::kValue}, {"gamma", K::kFactor}}, false},
      {"cosine", {{"init", K::kValue}, {"final", K::kValue}, {"length", K::kUnits}}, false},
      {"warmup_linear", {{"init", K::kValue}, {"warmup", K::kUnits}, {"after", K::kAfter}}, false},
      {"piecewise", {{"points", K::kPoints}}, true},
      {"wsd",
       {{"peak", K::kValue},
        {"warmup", K::kUnitsFrom0},
        {"decay_start", K::kUnitsFrom0},
        {"decay", K::kUnits},
        {"final", K::kValue},
        {"shape", K::kShape}},
       false},
  };
  return kShapes;
}

bool Param::admits(const json& value) const {
  switch (kind) {
    case DistKind::kGrid:
    case DistKind::kChoice:
      return std::find(values.begin(), values.end(), value) != values.end();
    case DistKind::kUniform:
    case DistKind::kLogUniform:
      return value.is_number() && value.get<double>() >= lo && value.get<double>() <= hi;
    case DistKind::kInt:
      return value.is_number_integer() && double(value.get<int64_t>()) >= lo &&
             double(value.get<int64_t>()) <= hi;
  }
  return false;
}

std::vector<NamedField> setting_fields(const Field& object) {
  if (!object.is_object()) object.fail("expected an object, got " + brief(object.json()));
  std::vector<NamedField> out;
  for (const auto& [key, value] : object.json().items()) {
    Field f = object[key];
    if (key != "betas") {
      out.push_back({key, f});
      continue;
    }
    if (object.has("beta1") || object.has("beta2"))
      f.fail("give either betas or beta1/beta2, not both");
    if (f.items(2) != 2) f.fail("expected [beta1, beta2], got " + brief(f.json()));
    out.push_back({"beta1", f[0]});
    out.push_back({"beta2", f[1]});
  }
  std::sort(out.begin(), out.end(),
            [](const NamedField& a, const NamedField& b) { return a.name < b.name; });
  return out;
}

namespace {

// Whether a value has the form of a schedule or a distribution (an object with "schedule", or
// with the one key of a distribution).
bool looks_variable(const json& v) {
  return v.is_object() && (v.contains("schedule") ||
                           (v.size() == 1 && std::find(std::begin(kDistNames), std::end(kDistNames),
                                                       v.begin().key()) != std::end(kDistNames)));
}

}  // namespace

json fixed_settings(const std::vector<NamedField>& fixed, const SpaceRules& rules) {
  json out = json::object();
  for (const NamedField& s : fixed) {
    const SettingInfo* info = setting_info(s, rules);
    if (!info) {
      // An external trainer's own setting: any JSON value (a list of layer widths, an object of
      // options) is passed to it as it is.
      if (s.field.json().is_null() || looks_variable(s.field.json()))
        s.field.fail("expected a value, got " + brief(s.field.json()) +
                     " (schedules and distributions go under hyperparameters)");
      out[s.name] = s.field.json();
      continue;
    }
    Rule rule = rule_for(info);
    check_scalar(s.field, rule, " (schedules and distributions go under hyperparameters)");
    const json& v = s.field.json();
    if (rule.type == Rule::kInteger)
      out[s.name] = v.get<int64_t>();
    else if (rule.type == Rule::kNumber)
      out[s.name] = v.get<double>();
    else
      out[s.name] = v;
  }
  return out;
}

SearchSpace::SearchSpace(const std::vector<NamedField>& hyperparameters, const SpaceRules& rules) {
  Parser parser(rules, &params_);
  for (const NamedField& h : hyperparameters) {
    parser.hyperparam(h, names_.size());
    names_.push_back(h.name);
    values_.push_back(h.field.json());
  }
}

Param model_leaf(const Field& field, const std::string& key) {
  std::vector<Param> leaves;
  Parser(SpaceRules{}, &leaves).model_field(field, key);
  return std::move(leaves.front());
}

void SearchSpace::add_model_leaves(std::vector<Param> leaves) {
  for (Param& p : leaves) params_.push_back(std::move(p));
}

std::string SearchSpace::written_at(const Param& leaf) const {
  return leaf.in_model() ? leaf.name : "hyperparameters." + names_[leaf.hyperparam];
}

const json* SearchSpace::value_of(const std::string& name) const {
  auto it = std::lower_bound(names_.begin(), names_.end(), name);
  if (it == names_.end() || *it != name) return nullptr;
  return &values_[it - names_.begin()];
}

uint64_t SearchSpace::grid_size() const {
  uint64_t size = 1;
  for (const Param& p : params_) {
    if (p.kind != DistKind::kGrid) continue;
    if (size > UINT64_MAX / p.values.size()) return UINT64_MAX;
    size *= p.values.size();
  }
  return size;
}

Params SearchSpace::draw(uint64_t seed, uint64_t counter,
                         std::optional<uint64_t> grid_index) const {
  std::vector<double> u(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) u[i] = uniform01(seed, counter, i);
  return at(u, grid_index);
}

namespace {

// A numeric leaf's range on the scale its unit coordinate is linear in.
std::pair<double, double> unit_bounds(const Param& p) {
  if (p.kind == DistKind::kLogUniform) return {std::log(p.lo), std::log(p.hi)};
  if (p.kind == DistKind::kInt) return {p.lo - 0.5, p.hi + 0.5};
  return {p.lo, p.hi};
}

}  // namespace

std::vector<double> SearchSpace::unit_coordinates(const Params& params) const {
  std::vector<double> u;
  for (const Param& p : params_) {
    auto [lo, hi] = unit_bounds(p);
    double x = params.at(p.name).get<double>();
    if (p.kind == DistKind::kLogUniform) x = std::log(x);
    u.push_back(std::clamp((x - lo) / (hi - lo), 0.0, 1.0));
  }
  return u;
}

Params SearchSpace::from_unit_coordinates(const std::vector<double>& u) const {
  Params out = Params::object();
  for (size_t q = 0; q < u.size(); ++q) {
    const Param& p = params_[q];
    auto [lo, hi] = unit_bounds(p);
    double x = lo + u[q] * (hi - lo);
    if (p.kind == DistKind::kLogUniform) x = std::exp(x);
    if (p.kind == DistKind::kInt)
      out[p.name] = int64_t(std::clamp(std::round(x), p.lo, p.hi));
    else
      out[p.name] = std::clamp(x, p.lo, p.hi);
  }
  return out;
}

Params SearchSpace::at(const std::vector<double>& point, std::optional<uint64_t> grid_index) const {
  Params out = Params::object();
  uint64_t rest = grid_index.value_or(0);
  for (size_t i = 0; i < params_.size(); ++i) {
    const Param& p = params_[i];
    const double u = point.at(i);
    json v;
    switch (p.kind) {
      case DistKind::kGrid:
        if (grid_index) {
          v = p.values[rest % p.values.size()];
          rest /= p.values.size();
          break;
        }
        [[fallthrough]];
      case DistKind::kChoice:
        v = p.values[size_t(u * double(p.values.size()))];
        break;
      case DistKind::kUniform:
        v = p.lo + u * (p.hi - p.lo);
        break;
      case DistKind::kLogUniform:
        v = std::clamp(std::exp(std::log(p.lo) + u * (std::log(p.hi) - std::log(p.lo))), p.lo,
                       p.hi);
        break;
      case DistKind::kInt:
        v = std::min(int64_t(p.hi), int64_t(p.lo) + int64_t(u * (p.hi - p.lo + 1)));
        break;
    }
    out[p.name] = std::move(v);
  }
  return out;
}

bool is_wsd_schedule(const json& value) {
  return value.is_object() && value.value("schedule", "") == "wsd";
}

bool SearchSpace::draws(const std::string& name) const {
  return std::any_of(params_.begin(), params_.end(),
                     [&](const Param& p) { return p.name == name; });
}

json SearchSpace::with_params(size_t index, const Params& params) const {
  json value = values_[index];
  for (const Param& p : params_)
    if (p.hyperparam == index) value[p.where] = params.at(p.name);
  return value;
}

int64_t SearchSpace::cooldown_end(const std::string& name, const Params& params,
                                  int64_t steps_per_epoch) const {
  size_t index = std::find(names_.begin(), names_.end(), name) - names_.begin();
  if (index == names_.size()) throw SpecError(name + ": no such hyper-parameter");
  const json value = with_params(index, params);
  if (!is_wsd_schedule(value)) throw SpecError(name + ": not a wsd schedule");
  int64_t u = value.value("unit", "step") == "epoch" ? steps_per_epoch : 1;
  return (value.at("decay_start").get<int64_t>() + value.at("decay").get<int64_t>()) * u;
}

json SearchSpace::model_with(json model, const Params& params) const {
  for (const Param& p : params_) {
    if (!p.in_model()) continue;
    auto it = params.find(p.name);
    if (it == params.end()) throw SpecError(p.name + ": missing parameter");
    if (!p.admits(*it)) throw SpecError(p.name + ": value " + brief(*it) + " is not in its range");
    model[p.where] = *it;
  }
  return model;
}

Hyperparams SearchSpace::instantiate(const Params& params, int64_t steps_per_epoch) const {
  if (!params.is_object()) throw SpecError("params: expected an object, got " + brief(params));
  for (const Param& p : params_) {
    auto it = params.find(p.name);
    if (it == params.end()) throw SpecError(p.name + ": missing parameter");
    if (!p.admits(*it)) throw SpecError(p.name + ": value " + brief(*it) + " is not in its range");
  }
  if (params.size() != params_.size())
    for (const auto& item : params.items())
      if (std::none_of(params_.begin(), params_.end(),
                       [&](const Param& p) { return p.name == item.key(); }))
        throw SpecError(item.key() + ": unknown parameter");
  Hyperparams out;
  for (size_t i = 0; i < names_.size(); ++i) {
    try {
      out.emplace(names_[i], build(with_params(i, params), steps_per_epoch));
    } catch (const std::invalid_argument& e) {
      throw SpecError(names_[i] + ": " + e.what());
    }
  }
  return out;
}

}  // namespace hippo
