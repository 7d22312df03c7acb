#include "searchers/spec.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include "pipeline/shape.h"
#include "protocol/names.h"
#include "searchers/searcher.h"
#include "stagetree/hash.h"
#include "stagetree/settings.h"

namespace hippo {
namespace {

using nlohmann::json;

constexpr int64_t kMaxWidth = 1 << 20;            // layer widths and channels
constexpr int64_t kMaxSteps = 1'000'000'000'000;  // lengths in steps
constexpr int64_t kMaxEpochs = 1'000'000;
constexpr int64_t kMaxContext = 4096, kMaxVocab = 1 << 20;  // gpt's limits (worker/engine/gpt.h)

void check_sizes(const Field& list, size_t min_size) {
  for (size_t i = 0, n = list.items(min_size); i < n; ++i) list[i].integer(1, kMaxWidth);
}

// The fields a model of this type takes; fails on an unknown type.
std::vector<std::string_view> model_keys(const Field& type) {
  const std::string& t = type.text();
  if (t == "mlp") return {"type", "hidden"};
  if (t == "cnn") return {"type", "channels", "fc"};
  if (t == "gpt") return {"type", "layers", "heads", "dim", "context", "vocab", "tied"};
  if (t == "external") return {"type", "command", "long_lived"};
  type.fail("unknown model type " + brief(type.json()) + " (known: mlp, cnn, gpt, external)");
}

// A gpt model with every field, "tied" included (default true), as integers: one model, one JSON.
json parse_gpt(const Field& f) {
  json out = {{"type", "gpt"},
              {"layers", f["layers"].integer(1, 1024)},
              {"heads", f["heads"].integer(1, 1024)},
              {"dim", f["dim"].integer(1, 65536)},
              {"context", f["context"].integer(1, kMaxContext)},
              {"vocab", f["vocab"].integer(1, kMaxVocab)},
              {"tied", f.has("tied") ? f["tied"].boolean() : true}};
  if (out["dim"].get<int64_t>() % out["heads"].get<int64_t>() != 0)
    f["heads"].fail(out["heads"].dump() + " heads do not divide dim " + out["dim"].dump());
  return out;
}

// A model without leaves, as the study keeps it (gpt: with every field).
json parse_model(const Field& f) {
  f.check_keys(model_keys(f["type"]));
  const std::string& t = f["type"].text();
  if (t == "mlp") {
    check_sizes(f["hidden"], 1);
  } else if (t == "cnn") {
    check_sizes(f["channels"], 1);
    check_sizes(f["fc"], 0);
  } else if (t == "external") {
    Field command = f["command"];
    for (size_t i = 0, n = command.items(1); i < n; ++i)
      if (command[i].text().empty()) command[i].fail("expected a non-empty string");
    if (f.has("long_lived")) f["long_lived"].boolean();
  } else {
    return parse_gpt(f);
  }
  return f.json();
}

// The fields of a built-in model written as distributions (no field of one is an object
// otherwise), by name. An external model's fields are its trainer's command: it has none.
std::vector<Param> parse_model_leaves(const Field& model) {
  model.check_keys(model_keys(model["type"]));  // a distribution over no field is refused as such
  std::vector<Param> leaves;
  if (model["type"].text() == "external") return leaves;
  for (const auto& [key, value] : model.json().items()) {
    if (key == "type" || !value.is_object()) continue;
    if (key == "context")
      model[key].fail(
          "is one for the whole study (the data's samples are windows of context tokens); "
          "expected an integer, got " +
          brief(value));
    leaves.push_back(model_leaf(model[key], key));
  }
  return leaves;
}

// The sample counts of each data set's splits: Fashion-MNIST's images; for fortunes the windows
// of context + 1 characters of worker/engine/text_data.h's splits, (tokens - 1) / context (the
// worker refuses a corpus of other sizes; tests/searchers check that these agree with text_data.h).
constexpr int64_t kFortunesTrainTokens = 588288, kFortunesEvalTokens = 68654;
constexpr int64_t kFortunesVocab = 96;
// The same text in the tokens of the `bpe32k` tokenizer (worker/engine/bpe.h).
constexpr int64_t kFortunesBpe32kTrainTokens = 158863, kFortunesBpe32kEvalTokens = 18425;
constexpr int64_t kBpe32kVocab = 32768;

constexpr int64_t kFashionMnistTrain = 60000, kFashionMnistEval = 10000;
constexpr int64_t kMaxSamples = 1'000'000'000'000;

// An external model's data: any name, with train_samples and eval_samples when the study needs
// them (epoch units need train_samples), and any other fields for the trainer. `fashion-mnist`
// keeps its sizes (the whole data set) as defaults; other names have none.
DataSpec parse_external_data(const Field& f) {
  DataSpec d;
  d.name = f["name"].text();
  if (d.name.empty() || d.name.size() > 64)
    f["name"].fail("expected a name of 1 to 64 characters, got " + brief(f["name"].json()));
  const bool fmnist = d.name == "fashion-mnist";
  d.train_samples = fmnist ? kFashionMnistTrain : 0;
  d.eval_samples = fmnist ? kFashionMnistEval : 0;
  if (f.has("train_samples"))
    d.train_samples = f["train_samples"].integer(1, fmnist ? kFashionMnistTrain : kMaxSamples);
  if (f.has("eval_samples"))
    d.eval_samples = f["eval_samples"].integer(1, fmnist ? kFashionMnistEval : kMaxSamples);
  for (const auto& [key, value] : f.json().items())
    if (key != "name" && key != "train_samples" && key != "eval_samples") d.fields[key] = value;
  return d;
}

DataSpec parse_data(const Field& f, const Field& model) {
  if (model["type"].text() == "external") return parse_external_data(f);
  f.check_keys({"name", "train_samples", "eval_samples", "tokenizer"});
  DataSpec d;
  d.name = f["name"].text();
  const std::string& type = model["type"].text();
  if (f.has("tokenizer") && d.name != "fortunes")
    f["tokenizer"].fail("only the fortunes text takes a tokenizer");
  if (d.name == "fashion-mnist") {
    if (type == "gpt")
      f["name"].fail("model gpt reads \"fortunes\", not " + brief(f["name"].json()));
  } else if (d.name == "fortunes") {
    if (type == "mlp" || type == "cnn")
      f["name"].fail("model " + type + " reads \"fashion-mnist\", not \"fortunes\"");
    int64_t train_tokens = kFortunesTrainTokens, eval_tokens = kFortunesEvalTokens;
    int64_t vocab = kFortunesVocab;
    if (f.has("tokenizer")) {  // absent: characters
      if (f["tokenizer"].text() != "bpe32k")
        f["tokenizer"].fail("unknown tokenizer " + brief(f["tokenizer"].json()) +
                            " (known: bpe32k; absent: characters)");
      d.fields["tokenizer"] = "bpe32k";
      train_tokens = kFortunesBpe32kTrainTokens, eval_tokens = kFortunesBpe32kEvalTokens;
      vocab = kBpe32kVocab;
    }
    if (type == "gpt") {
      const int64_t context = model["context"].integer(1, kMaxContext);
      d.train_samples = (train_tokens - 1) / context;
      d.eval_samples = (eval_tokens - 1) / context;
      if (model["vocab"].integer(1, kMaxVocab) < vocab)
        model["vocab"].fail("the fortunes data has " + std::to_string(vocab) +
                            " tokens, more than a vocabulary of " +
                            std::to_string(model["vocab"].integer(1, kMaxVocab)));
    }
  } else {
    f["name"].fail("unknown data set " + brief(f["name"].json()) +
                   " (known: fashion-mnist, fortunes; an external model reads any)");
  }
  const int64_t train = d.train_samples, eval = d.eval_samples;
  if (f.has("train_samples")) d.train_samples = f["train_samples"].integer(1, train);
  if (f.has("eval_samples")) d.eval_samples = f["eval_samples"].integer(1, eval);
  return d;
}

// The metrics built-in models report at every evaluation (worker/job_runner.cc).
constexpr std::string_view kBuiltinMetrics[] = {"accuracy", "loss", "params"};

std::string parse_metric_name(const Field& f, bool builtin_model) {
  const std::string& name = f.text();
  if (builtin_model && std::find(std::begin(kBuiltinMetrics), std::end(kBuiltinMetrics), name) ==
                           std::end(kBuiltinMetrics))
    f.fail("expected \"accuracy\", \"loss\" or \"params\" for a built-in model, got " +
           brief(f.json()));
  if (name.empty()) f.fail("expected a metric name");
  return name;
}

// One objective: {"metric", "mode"} (or the searcher object itself, in the form of one metric).
Objective parse_objective(const Field& f, bool builtin_model) {
  Objective o;
  o.metric = parse_metric_name(f["metric"], builtin_model);
  const std::string& mode = f["mode"].text();
  if (mode != "max" && mode != "min")
    f["mode"].fail("expected \"max\" or \"min\", got " + brief(f["mode"].json()));
  o.maximize = mode == "max";
  return o;
}

Constraint parse_constraint(const Field& f, bool builtin_model) {
  f.check_keys({"metric", "min", "max"});
  Constraint c;
  c.metric = parse_metric_name(f["metric"], builtin_model);
  if (!f.has("min") && !f.has("max")) f.fail("expected min and/or max: a constraint needs a bound");
  if (f.has("min")) c.min = f["min"].number();
  if (f.has("max")) c.max = f["max"].number();
  if (c.min && c.max && *c.min > *c.max)
    f["min"].fail("is more than max (" + brief(f["max"].json()) + "): no value could hold");
  return c;
}

Goals parse_goals(const Field& f, bool builtin_model) {
  Goals g;
  if (f.has("objectives")) {
    for (const char* single : {"metric", "mode"})
      if (f.has(single)) f[single].fail("give either metric and mode or objectives, not both");
    Field list = f["objectives"];
    const size_t n = list.items(1);
    if (n > kMaxObjectives)
      list.fail("has " + std::to_string(n) + " objectives, more than " +
                std::to_string(kMaxObjectives));
    for (size_t i = 0; i < n; ++i) {
      list[i].check_keys({"metric", "mode"});
      g.objectives.push_back(parse_objective(list[i], builtin_model));
      for (size_t j = 0; j < i; ++j)
        if (g.objectives[j].metric == g.objectives[i].metric)
          list[i]["metric"].fail("\"" + g.objectives[i].metric + "\" is objective " +
                                 std::to_string(j) + " already");
    }
  } else {
    g.objectives.push_back(parse_objective(f, builtin_model));
  }
  if (f.has("constraints")) {
    Field list = f["constraints"];
    const size_t n = list.items(1);
    if (n > kMaxConstraints)
      list.fail("has " + std::to_string(n) + " constraints, more than " +
                std::to_string(kMaxConstraints));
    for (size_t i = 0; i < n; ++i)
      g.constraints.push_back(parse_constraint(list[i], builtin_model));
  }
  return g;
}

SearcherSpec parse_searcher(const Field& f, bool builtin_model) {
  SearcherSpec s;
  s.name = f["name"].text();
  const SearcherKind& kind = searcher_kind(f["name"]);
  std::vector<std::string_view> keys = {"name",       "metric",      "mode",
                                        "objectives", "constraints", "max_trials"};
  keys.insert(keys.end(), kind.options.begin(), kind.options.end());
  f.check_keys(keys);
  s.goals = parse_goals(f, builtin_model);
  if (s.goals.several() && !kind.several_objectives)
    f["objectives"].fail("searcher " + s.name + " optimizes one objective; with several use " +
                         searchers_of_several_objectives());
  s.metric = s.goals.objectives[0].metric;
  s.maximize = s.goals.objectives[0].maximize;
  if (f.has("max_trials")) s.max_trials = f["max_trials"].integer(1, 1'000'000'000);
  for (const std::string& key : kind.options)
    if (f.has(key)) s.options[key] = f.json()[key];
  return s;
}

// Checks "pipeline" against the generators' rules (pipeline/schedules.h) and the model.
PipelineSpec parse_pipeline(const Field& f, const json& model) {
  f.check_keys({"stages", "microbatches", "schedule", "chunks", "vocab_parallel"});
  PipelineSpec p;
  p.stages = static_cast<int>(f["stages"].integer(1, pipeline::kMaxStages));
  if (f.has("microbatches"))
    p.microbatches = static_cast<int>(f["microbatches"].integer(1, pipeline::kMaxMicrobatches));
  if (f.has("schedule")) p.schedule = f["schedule"].text();
  std::optional<pipeline::Schedule> schedule = pipeline::parse_schedule(p.schedule);
  if (!schedule)
    f["schedule"].fail("unknown schedule " + brief(f["schedule"].json()) +
                       " (known: " + pipeline::kScheduleNames + ")");
  if (f.has("chunks")) p.chunks = static_cast<int>(f["chunks"].integer(1, pipeline::kMaxChunks));
  if (f.has("vocab_parallel")) p.vocab_parallel = f["vocab_parallel"].boolean();
  // check_shape names the field first: "microbatches: ...".
  std::string problem =
      pipeline::check_shape({p.stages, p.microbatches, *schedule, p.chunks, p.vocab_parallel});
  if (!problem.empty()) {
    std::string field = problem.substr(0, problem.find(':'));
    std::string what = problem.substr(problem.find(':') + 2);
    if (f.has(field)) f[field].fail(what);
    f.fail(what);
  }
  if (p.stages > 1 && model.at("type") != "gpt")
    f["stages"].fail("only a gpt model can be cut into pipeline stages, model.type is " +
                     brief(model.at("type")));
  // The engine cuts a gpt by blocks: the embedding, each transformer block, the head.
  if (model.at("type") == "gpt" && p.stages * p.chunks > model.at("layers").get<int64_t>() + 2)
    f["stages"].fail(std::to_string(p.stages * p.chunks) +
                     " pipeline positions (stages x chunks) for a gpt of " +
                     std::to_string(model.at("layers").get<int64_t>() + 2) +
                     " blocks (the embedding, model.layers transformer blocks, the head)");
  if (p.vocab_parallel) {
    // Every stage gets whole vocabulary blocks, every position a transformer block.
    const int64_t vocab = model.at("vocab").get<int64_t>(),
                  layers = model.at("layers").get<int64_t>();
    const int64_t blocks = (vocab + pipeline::kVocabBlock - 1) / pipeline::kVocabBlock;
    if (blocks < p.stages)
      f["vocab_parallel"].fail("a vocabulary of " + std::to_string(vocab) + " tokens is " +
                               std::to_string(blocks) + " blocks of " +
                               std::to_string(pipeline::kVocabBlock) + ", fewer than the " +
                               std::to_string(p.stages) + " stages");
    if (layers < p.stages * p.chunks)
      f["vocab_parallel"].fail(
          std::to_string(p.stages * p.chunks) + " pipeline positions (stages x chunks) for " +
          std::to_string(layers) + " transformer blocks: each position needs one");
  }
  return p;
}

// Every batch size the spec lists (fixed, constant, or the values of a grid or choice) must split
// into the micro-batches.
void check_microbatches(const StudySpec& s, const Field& microbatches) {
  std::vector<int64_t> sizes;
  if (s.fixed.contains("batch_size")) sizes.push_back(s.fixed["batch_size"].get<int64_t>());
  const json* v = s.space.value_of("batch_size");
  if (v && v->is_number()) sizes.push_back(v->get<int64_t>());
  for (const Param& p : s.space.params())
    if (p.name == "batch_size")
      for (const json& x : p.values) sizes.push_back(x.get<int64_t>());
  for (int64_t size : sizes)
    if (size % s.pipeline.microbatches != 0)
      microbatches.fail(std::to_string(s.pipeline.microbatches) +
                        " micro-batches do not divide a batch size of " + std::to_string(size));
}

// Why epoch units cannot be used, or "" when every trial has one batch size for all its steps.
std::string epoch_problem(const json& fixed, const Field& hyperparameters) {
  if (fixed.contains("batch_size")) return "";
  if (!hyperparameters.has("batch_size")) return "no batch_size is given";
  const json& v = hyperparameters.json()["batch_size"];
  if (v.is_object() && v.contains("schedule")) return "batch_size varies within a trial";
  return "";
}

// The largest batch size any trial can have (0 when there is none or it follows a schedule).
int64_t largest_batch_size(const StudySpec& s) {
  if (s.fixed.contains("batch_size")) return s.fixed["batch_size"].get<int64_t>();
  int64_t largest = 0;
  const json* v = s.space.value_of("batch_size");
  if (v && v->is_number()) largest = v->get<int64_t>();
  for (const Param& p : s.space.params()) {
    if (p.name != "batch_size") continue;
    for (const json& x : p.values) largest = std::max(largest, x.get<int64_t>());
    largest = std::max(largest, int64_t(p.hi));
  }
  return largest;
}

std::string hex64(uint64_t x) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(x));
  return buf;
}

// The root key of the trials of `s` whose model is `model`.
std::string root_key_for(const StudySpec& s, json model) {
  // Whether a trainer serves one stage or many changes no result.
  model.erase("long_lived");
  json data = {{"name", s.data.name},
               {"train_samples", s.data.train_samples},
               {"eval_samples", s.data.eval_samples}};
  if (!s.data.fields.empty()) data["fields"] = s.data.fields;
  json identity = {{"model", model},
                   {"data", data},
                   {"seed", s.seed},
                   {"fixed", s.fixed},
                   {"hyperparameters", s.space.names()}};
  // Micro-batches change the sums; 1 is left out so that the root keys of older studies stay.
  if (s.pipeline.microbatches != 1) identity["microbatches"] = s.pipeline.microbatches;
  return hex64(fnv1a("hippo-root-v1 " + identity.dump()));
}

// A model leaf's values, numbered from 0.
uint64_t value_count(const Param& leaf) {
  return leaf.kind == DistKind::kInt ? static_cast<uint64_t>(leaf.hi - leaf.lo) + 1
                                     : leaf.values.size();
}
json value_at(const Param& leaf, uint64_t i) {
  return leaf.kind == DistKind::kInt ? json(static_cast<int64_t>(leaf.lo) + static_cast<int64_t>(i))
                                     : leaf.values[i];
}
// Where value i of a model leaf is written: "model.hidden.grid[1]"; an int's bounds are
// "model.layers.int[0]" and "[1]", the values between them just "model.layers.int".
std::string value_path(const Param& leaf, uint64_t i) {
  if (leaf.kind != DistKind::kInt)
    return leaf.name + (leaf.kind == DistKind::kGrid ? ".grid[" : ".choice[") + std::to_string(i) +
           "]";
  if (i == 0) return leaf.name + ".int[0]";
  if (i + 1 == value_count(leaf)) return leaf.name + ".int[1]";
  return leaf.name + ".int";
}

// Every architecture of a model with leaves (a value of each leaf), checked as the same model
// written with those values would be: by the model's rules, the data's (gpt: its vocabulary) and
// the pipeline's (gpt: its blocks). Returns their models as parse_model makes them, in grid order
// (the first leaf varies fastest). An error names the value ("model.hidden.grid[1][0]: ..."): each
// value is first tried with the other leaves at their first values, so that an error of its own
// is told alone; one that depends on several leaves says their values.
std::vector<json> check_architectures(const Field& root, const std::vector<Param>& leaves) {
  uint64_t count = 1;
  for (const Param& leaf : leaves)
    count =
        std::min(count * std::min(value_count(leaf), kMaxArchitectures + 1), kMaxArchitectures + 1);
  if (count > kMaxArchitectures)
    root["model"].fail("more than " + std::to_string(kMaxArchitectures) +
                       " architectures (the product of the numbers of values of the model's "
                       "distributions): each is a stage tree root of its own");
  const json& written = root["model"].json();
  // The architecture with leaf k at its value at[k]. With name_all, an error lists the values of
  // all leaves but the one its path names; without, only when its path names none.
  auto check = [&](const std::vector<uint64_t>& at, bool name_all) {
    json model = written;
    for (size_t k = 0; k < leaves.size(); ++k) model[leaves[k].where] = value_at(leaves[k], at[k]);
    try {
      json parsed = parse_model(Field(model, root["model"].path()));
      parse_data(root["data"], Field(parsed, root["model"].path()));
      if (root.has("pipeline")) parse_pipeline(root["pipeline"], parsed);
      return parsed;
    } catch (const SpecError& e) {
      std::string message = e.what();
      std::optional<size_t> named;
      for (size_t k = 0; k < leaves.size() && !named; ++k) {
        const std::string& name = leaves[k].name;
        if (message.compare(0, name.size(), name) == 0 &&
            std::string_view(".[:").find(message[name.size()]) != std::string_view::npos) {
          message = value_path(leaves[k], at[k]) + message.substr(name.size());
          named = k;
        }
      }
      std::string values;
      for (size_t k = 0; k < leaves.size(); ++k) {
        const bool told = named == k && value_path(leaves[k], at[k]) != leaves[k].name + ".int";
        if (told || (named && !name_all)) continue;
        values += (values.empty() ? "" : ", ") + leaves[k].name + " = " +
                  value_at(leaves[k], at[k]).dump();
      }
      throw SpecError(values.empty() ? message : message + " (with " + values + ")");
    }
  };
  const std::vector<uint64_t> first(leaves.size(), 0);
  for (size_t k = 0; k < leaves.size(); ++k) {
    const uint64_t n = value_count(leaves[k]);
    std::vector<uint64_t> values;  // a grid's or choice's every value, an int's bounds
    if (leaves[k].kind == DistKind::kInt)
      values = {0, n - 1};
    else
      for (uint64_t i = 0; i < n; ++i) values.push_back(i);
    for (uint64_t i : values) {
      std::vector<uint64_t> at = first;
      at[k] = i;
      check(at, false);
    }
  }
  std::vector<json> models;
  for (std::vector<uint64_t> at = first;;) {
    models.push_back(check(at, true));
    size_t k = 0;
    while (k < leaves.size() && ++at[k] == value_count(leaves[k])) at[k++] = 0;
    if (k == leaves.size()) return models;
  }
}

}  // namespace

Span parse_span(const Field& f) {
  if (!f.is_object() || f.json().size() != 1)
    f.fail("expected {\"steps\": N} or {\"epochs\": E}, got " + brief(f.json()));
  f.check_keys({"steps", "epochs"});
  if (f.has("steps")) return {f["steps"].integer(1, kMaxSteps), false};
  return {f["epochs"].integer(1, kMaxEpochs), true};
}

int64_t StudySpec::steps_per_epoch(const Params& params) const {
  int64_t batch = 0;
  if (fixed.contains("batch_size")) {
    batch = fixed["batch_size"].get<int64_t>();
  } else if (const json* v = space.value_of("batch_size")) {
    if (v->is_number())
      batch = v->get<int64_t>();
    else if (!v->contains("schedule"))
      batch = params.at("batch_size").get<int64_t>();
  }
  return batch > 0 ? data.train_samples / batch : 0;
}

Span StudySpec::latest_cooldown_end(const std::string& name) const {
  const json& value = *space.value_of(name);
  // The largest value of a length field: its constant, or the top of its leaf's range.
  auto largest = [&](const char* key) {
    const json& v = value.at(key);
    if (v.is_number()) return v.get<int64_t>();
    int64_t most = 0;
    for (const Param& p : space.params()) {
      if (p.name != name + "." + key) continue;
      for (const json& x : p.values) most = std::max(most, x.get<int64_t>());
      most = std::max(most, int64_t(p.hi));
    }
    return most;
  };
  return {largest("decay_start") + largest("decay"), value.value("unit", "step") == "epoch"};
}

Span StudySpec::longest_length() const {
  return length_end_of.empty() ? length : latest_cooldown_end(length_end_of);
}

int64_t StudySpec::length_steps(const Params& params) const {
  if (!length_end_of.empty())
    return space.cooldown_end(length_end_of, params, steps_per_epoch(params));
  return length.steps(steps_per_epoch(params));
}

std::vector<int64_t> StudySpec::eval_steps(const Params& params) const {
  int64_t u = steps_per_epoch(params);
  int64_t end = length_steps(params);
  std::vector<int64_t> steps;
  if (eval_every)
    for (int64_t s = eval_every->steps(u); s < end; s += eval_every->steps(u)) steps.push_back(s);
  steps.push_back(end);
  return steps;
}

void StudySpec::check_params(const Params& params) const {
  hyperparams(params);
  model_of(params);
}

Hyperparams StudySpec::hyperparams(const Params& params) const {
  return space.instantiate(params, steps_per_epoch(params));
}

json StudySpec::model_of(const Params& params) const {
  return parse_model(Field(space.model_with(model, params), "model"));
}

std::string StudySpec::root_key_of(const Params& params) const {
  return root_key_for(*this, model_of(params));
}

const json& StudySpec::model_with_root_key(const std::string& key) const {
  auto it = architectures.find(key);
  if (it == architectures.end())
    throw std::invalid_argument("study " + name + " has no architecture of root key " + key);
  return it->second;
}

Goals goals_of(const json& spec) {
  Field root(spec, "");
  bool builtin = !(root["model"]["type"].json() == "external");
  return parse_goals(root["searcher"], builtin);
}

double Constraint::violation(double value) const {
  if (!std::isfinite(value)) return std::numeric_limits<double>::infinity();
  return (min && value < *min ? *min - value : 0) + (max && value > *max ? value - *max : 0);
}

std::vector<bool> Goals::directions() const {
  std::vector<bool> d;
  for (const Objective& o : objectives) d.push_back(o.maximize);
  return d;
}

std::vector<std::string> Goals::metrics() const {
  std::vector<std::string> names;
  auto add = [&](const std::string& m) {
    if (std::find(names.begin(), names.end(), m) == names.end()) names.push_back(m);
  };
  for (const Objective& o : objectives) add(o.metric);
  for (const Constraint& c : constraints) add(c.metric);
  return names;
}

namespace {

// `"length": {"steps": N}`, `{"epochs": E}`, or `{"end_of": NAME}` naming a top-level wsd schedule
// whose cooldown ends each trial. A fixed length must cover every wsd cooldown (with U constant
// over the trials; a drawn batch size leaves that to each trial's own run).
template <typename SpanParser>
void parse_length(const Field& root, StudySpec& s, const SpanParser& span) {
  Field length = root["length"];
  if (length.is_object() && length.has("end_of")) {
    length.check_keys({"end_of"});
    const std::string& name = length["end_of"].text();
    const json* value = s.space.value_of(name);
    if (!value || !is_wsd_schedule(*value))
      length["end_of"].fail("\"" + name + "\" is not a hyper-parameter with a wsd schedule" +
                            (value ? "" : " (no such hyper-parameter)"));
    s.length_end_of = name;
    return;
  }
  s.length = span(length);
  // With a drawn batch size every trial has its own U: nothing to compare here.
  const int64_t u = s.space.draws("batch_size") ? 0 : s.steps_per_epoch(Params::object());
  if (u == 0) return;
  for (const std::string& name : s.space.names()) {
    const json* value = s.space.value_of(name);
    if (!is_wsd_schedule(*value)) continue;
    const int64_t end = s.latest_cooldown_end(name).steps(u);
    if (end > s.length.steps(u))
      Field(*value, "hyperparameters." + name + ".decay")
          .fail("the cooldown may end at step " + std::to_string(end) +
                ", after the study's length (" + std::to_string(s.length.steps(u)) +
                " steps); shorten it, or give \"length\": " + "{\"end_of\": \"" + name + "\"}");
  }
}

// `warm_start`: the studies as written, and their evaluations as the master resolved them at
// submit (master/warm_start.h), each trial's params checked against this study's space.
void parse_warm_start(const Field& f, StudySpec& s) {
  f.check_keys({"studies", "evaluations"});
  if (s.searcher.goals.multi())
    f.fail("a warm start seeds a searcher of one metric and mode (no objectives or constraints)");
  Field studies = f["studies"];
  for (size_t i = 0, n = studies.items(1); i < n; ++i) {
    const std::string& name = studies[i].text();
    if (name == s.name) studies[i].fail("\"" + name + "\" is this study itself");
    if (std::find(s.warm_start.begin(), s.warm_start.end(), name) != s.warm_start.end())
      studies[i].fail("\"" + name + "\" is named twice");
    s.warm_start.push_back(name);
  }
  if (!f.has("evaluations")) return;
  Field list = f["evaluations"];
  for (size_t i = 0, n = list.items(0); i < n; ++i) {
    Field e = list[i];
    e.check_keys({"study", "trial", "params", "values"});
    PriorTrial t;
    t.study = e["study"].text();
    if (std::find(s.warm_start.begin(), s.warm_start.end(), t.study) == s.warm_start.end())
      e["study"].fail("\"" + t.study + "\" is not one of warm_start.studies");
    t.trial = e["trial"].integer(1, INT64_MAX);
    if (!e["params"].is_object()) e["params"].fail("expected an object: a value for every leaf");
    t.params = e["params"].json();
    try {
      s.check_params(t.params);
    } catch (const SpecError& err) {
      throw SpecError(e["params"].path() + "." + err.what());
    }
    Field values = e["values"];
    for (size_t j = 0, m = values.items(1); j < m; ++j) {
      if (values[j].items(2) != 2) values[j].fail("expected [step, value]");
      const double v = values[j][1].number();
      if (!std::isfinite(v)) values[j][1].fail("expected a finite value");
      t.values[values[j][0].integer(1, INT64_MAX)] = v;
    }
    s.prior.push_back(std::move(t));
  }
}

}  // namespace

StudySpec parse_spec(const json& spec) {
  Field root(spec, "");
  root.check_keys({"name", "model", "data", "seed", "fixed", "hyperparameters", "searcher",
                   "length", "eval", "pipeline", "budget", "enqueue", "warm_start"});
  StudySpec s;
  s.name = root["name"].text();
  // Bounded, and never what reads as an id: one rule for every command (protocol/names.h).
  if (std::string why = protocol::study_name_error(s.name); !why.empty()) root["name"].fail(why);
  Field model = root["model"];
  std::vector<Param> model_leaves = parse_model_leaves(model);
  std::vector<json> architectures;  // their models, in grid order
  if (model_leaves.empty()) {
    s.model = parse_model(model);
    architectures = {s.model};
  } else {
    s.model = model.json();
    architectures = check_architectures(root, model_leaves);
  }
  // The data is the same for every architecture (gpt's context, which shapes it, is not drawn).
  s.data = parse_data(root["data"], Field(architectures.front(), model.path()));
  if (root.has("seed")) s.seed = root["seed"].integer(0, INT64_MAX);

  static const json kEmpty = json::object();
  Field fixed = root.has("fixed") ? root["fixed"] : Field(kEmpty, "fixed");
  Field hyperparameters =
      root.has("hyperparameters") ? root["hyperparameters"] : Field(kEmpty, "hyperparameters");
  SpaceRules rules;
  rules.builtin = !s.external_model();
  std::vector<NamedField> fixed_fields = setting_fields(fixed);
  std::vector<NamedField> hp_fields = setting_fields(hyperparameters);
  s.fixed = fixed_settings(fixed_fields, rules);
  for (const NamedField& h : hp_fields)
    if (s.fixed.contains(h.name)) h.field.fail("\"" + h.name + "\" is also given under fixed");
  rules.no_epochs = s.data.train_samples == 0
                        ? "data.train_samples is not given (an epoch is floor(train_samples / "
                          "batch_size) steps)"
                        : epoch_problem(s.fixed, hyperparameters);
  s.no_epochs = rules.no_epochs;
  s.space = SearchSpace(hp_fields, rules);
  s.space.add_model_leaves(std::move(model_leaves));
  if (rules.builtin) {
    for (const SettingInfo& info : builtin_settings()) {
      std::string name(info.name);
      if (s.fixed.contains(name) || s.space.value_of(name)) continue;
      if (info.default_text)
        s.fixed[name] = std::string(*info.default_text);
      else if (info.type == SettingType::kBool && info.default_number)
        s.fixed[name] = *info.default_number != 0;
      else if (info.default_number)
        s.fixed[name] = *info.default_number;
      else
        fixed.fail("missing " + name +
                   " (a built-in model needs it under fixed or hyperparameters)");
    }
  }
  int64_t batch = largest_batch_size(s);
  if (s.data.train_samples > 0 && batch > s.data.train_samples)
    (s.fixed.contains("batch_size") ? fixed : hyperparameters)["batch_size"].fail(
        "a batch size of " + std::to_string(batch) + " is more than data.train_samples (" +
        std::to_string(s.data.train_samples) + ")");

  s.searcher = parse_searcher(root["searcher"], rules.builtin);
  auto span = [&](const Field& f) {
    Span out = parse_span(f);
    if (out.epochs && !rules.no_epochs.empty())
      f["epochs"].fail("epoch units are not possible here: " + rules.no_epochs);
    return out;
  };
  parse_length(root, s, span);
  if (root.has("eval")) {
    Field eval = root["eval"];
    eval.check_keys({"every", "at_end"});
    if (eval.has("every")) s.eval_every = span(eval["every"]);
    // The end of every trial is always evaluated (searchers judge a trial by its last value);
    // at_end says so explicitly, for specs whose trials end at different steps.
    if (eval.has("at_end") && !eval["at_end"].boolean())
      eval["at_end"].fail(
          "the end of every trial is always evaluated (searchers judge a trial by its last "
          "value); leave at_end out or make it true");
  }

  if (root.has("pipeline")) {
    if (s.external_model()) root["pipeline"].fail("an external trainer cannot be pipelined");
    s.pipeline = parse_pipeline(root["pipeline"], architectures.front());
    if (root["pipeline"].has("microbatches"))
      check_microbatches(s, root["pipeline"]["microbatches"]);
  }

  if (root.has("budget")) {
    Field budget = root["budget"];
    budget.check_keys({"steps", "wall_s"});
    if (budget.has("steps") == budget.has("wall_s"))
      budget.fail("expected {\"steps\": N} or {\"wall_s\": T}, got " + brief(budget.json()));
    if (budget.has("steps")) s.budget_steps = budget["steps"].integer(1, INT64_MAX);
    if (budget.has("wall_s")) {
      s.budget_wall_s = budget["wall_s"].number();
      if (!(*s.budget_wall_s > 0))
        budget["wall_s"].fail("expected a number of seconds > 0, got " +
                              brief(budget["wall_s"].json()));
    }
  }

  if (root.has("enqueue")) {
    Field list = root["enqueue"];
    for (size_t i = 0, n = list.items(1); i < n; ++i) {
      if (!list[i].is_object()) list[i].fail("expected an object: a value for every leaf");
      try {
        s.check_params(list[i].json());
      } catch (const SpecError& e) {
        throw SpecError(list[i].path() + "." + e.what());
      }
      s.enqueued.push_back(list[i].json());
    }
    if (!searcher_kind(root["searcher"]["name"]).takes_enqueued)
      list.fail("searcher " + s.searcher.name + " does not take enqueued configurations");
    if (s.searcher.max_trials && static_cast<int64_t>(s.enqueued.size()) > *s.searcher.max_trials)
      list.fail("more configurations than max_trials (" + std::to_string(*s.searcher.max_trials) +
                ")");
  }

  s.root_key = root_key_for(s, s.model);
  for (json& m : architectures) {
    std::string key = root_key_for(s, m);
    s.architectures.emplace(std::move(key), std::move(m));
  }
  if (root.has("warm_start")) parse_warm_start(root["warm_start"], s);
  // Validates the searcher's own options.
  if (!make_searcher(s)->learns() && !s.warm_start.empty())
    root["warm_start"].fail("searcher " + s.searcher.name +
                            " learns nothing from evaluations, so earlier ones cannot seed it: a "
                            "warm start seeds tpe, gp and cmaes, alone or as the sampler of asha, "
                            "sha, hyperband or median_stop (\"sampler\": {\"name\": \"tpe\"})");
  return s;
}

StudySpec parse_spec_text(std::string_view text) {
  return parse_spec(parse_json_text(text));
}

StudySpec load_spec(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw SpecError(path + ": cannot read: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw SpecError(path + ": cannot read: " + std::strerror(errno));
  return parse_spec_text(text.str());
}

}  // namespace hippo
