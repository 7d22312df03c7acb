#include "searchers/searcher.h"

#include <algorithm>
#include <map>
#include <stdexcept>

#include "searchers/basic.h"
#include "searchers/cmaes.h"
#include "searchers/external.h"
#include "searchers/gp.h"
#include "searchers/halving.h"
#include "searchers/median_stop.h"
#include "searchers/nsga2.h"
#include "searchers/pbt.h"
#include "searchers/tpe.h"

namespace hippo {
namespace {

std::map<std::string, SearcherKind>& registry() {
  // Built-ins are added here, not by static registrars, so that they are always linked in.
  static std::map<std::string, SearcherKind> kinds = {
      {"grid", grid_searcher_kind()},
      {"random", random_searcher_kind()},
      {"sobol", sobol_searcher_kind()},
      {"external", external_searcher_kind()},
      {"sha", sha_searcher_kind()},
      {"asha", asha_searcher_kind()},
      {"hyperband", hyperband_searcher_kind()},
      {"median_stop", median_stop_searcher_kind()},
      {"pbt", pbt_searcher_kind()},
      {"tpe", tpe_searcher_kind()},
      {"gp", gp_searcher_kind()},
      {"cmaes", cmaes_searcher_kind()},
      {"nsga2", nsga2_searcher_kind()},
      {"moasha", moasha_searcher_kind()},
  };
  return kinds;
}

}  // namespace

void register_searcher(const std::string& name, SearcherKind kind) {
  if (!registry().emplace(name, std::move(kind)).second)
    throw std::invalid_argument("searcher \"" + name + "\" is registered twice");
}

const SearcherKind& searcher_kind(const Field& name) {
  const std::string& n = name.text();
  auto it = registry().find(n);
  if (it != registry().end()) return it->second;
  std::string known;
  for (const auto& [k, kind] : registry()) known += (known.empty() ? "" : ", ") + k;
  name.fail("unknown searcher " + brief(name.json()) + " (known: " + known + ")");
}

std::string searchers_of_several_objectives() {
  std::string names;
  for (const auto& [name, kind] : registry())
    if (kind.several_objectives) names += (names.empty() ? "" : ", ") + name;
  return names;
}

std::vector<Operation> Searcher::enqueue(const Params&) {
  throw std::invalid_argument(
      "it takes no configuration while it runs (tpe, gp, cmaes, median_stop, asha and moasha "
      "do; random, sobol, sha and hyperband draw their trials ahead: put it in the spec's "
      "\"enqueue\")");
}

std::unique_ptr<Searcher> make_searcher(const StudySpec& spec) {
  auto it = registry().find(spec.searcher.name);
  if (it == registry().end())
    throw SpecError("searcher.name: unknown searcher \"" + spec.searcher.name + "\"");
  return it->second.make(spec);
}

nlohmann::json with_parallel(const nlohmann::json& spec, int64_t workers) {
  if (!spec.is_object() || !spec.contains("searcher")) return spec;
  const nlohmann::json& searcher = spec["searcher"];
  if (!searcher.is_object() || searcher.contains("parallel") || !searcher.contains("name") ||
      !searcher["name"].is_string())
    return spec;
  auto it = registry().find(searcher["name"].get<std::string>());
  if (it == registry().end()) return spec;
  const std::vector<std::string>& options = it->second.options;
  if (std::find(options.begin(), options.end(), "parallel") == options.end()) return spec;
  nlohmann::json out = spec;
  out["searcher"]["parallel"] = std::max<int64_t>(1, workers);
  return out;
}

std::optional<int64_t> parallel_of(const nlohmann::json& spec) {
  if (!spec.is_object() || !spec.contains("searcher") || !spec["searcher"].is_object()) return {};
  const nlohmann::json& searcher = spec["searcher"];
  if (!searcher.contains("parallel") || !searcher["parallel"].is_number_integer()) return {};
  return searcher["parallel"].get<int64_t>();
}

}  // namespace hippo
