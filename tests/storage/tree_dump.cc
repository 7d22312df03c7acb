#include "tests/storage/tree_dump.h"

#include <sstream>

#include "stagetree/sequence_json.h"

namespace hippo {

std::string dump_tree(const StageTree& tree) {
  std::ostringstream out;
  for (const Stage& s : tree.stages()) {
    out << "stage " << s.id << " parent " << s.parent << " root " << s.root_key << " [" << s.start
        << ", " << s.end << ") trained " << s.trained_until << " rep " << s.representative
        << " children";
    for (StageId c : s.children) out << ' ' << c;
    out << '\n';
  }
  for (const auto& [id, t] : tree.trials()) {
    out << "trial " << id << " root " << t.root_key << " length " << t.length << " path";
    for (StageId s : tree.path(id)) out << ' ' << s;
    out << ' ' << to_json(t.hyperparams).dump() << '\n';
  }
  TreeCounts c = tree.counts();
  out << "counts trials " << c.trials << " stages " << c.stages << " unique " << c.steps_unique
      << " trial_based " << c.steps_trial_based << " critical " << c.critical_path_steps
      << " trained " << c.steps_trained << '\n';
  return out.str();
}

}  // namespace hippo
