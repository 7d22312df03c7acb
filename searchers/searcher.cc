#include "searchers/searcher.h"

#include <algorithm>
#include <map>
#include <stdexcept>

#include "searchers/basic.h"
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
      {"external", external_searcher_kind()},
      {"sha", sha_searcher_kind()},
      {"asha", asha_searcher_kind()},
      {"hyperband", hyperband_searcher_kind()},
      {"median_stop", median_stop_searcher_kind()},
      {"pbt", pbt_searcher_kind()},
      {"tpe", tpe_searcher_kind()},
      {"gp", gp_searcher_kind()},
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

std::unique_ptr<Searcher> make_searcher(const StudySpec& spec) {
  auto it = registry().find(spec.searcher.name);
  if (it == registry().end())
    throw SpecError("searcher.name: unknown searcher \"" + spec.searcher.name + "\"");
  return it->second.make(spec);
}

}  // namespace hippo
