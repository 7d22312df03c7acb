// The one naming rule of checkpoint files (as LevelDB's filename.h): the master names every file
// a worker writes, "state-<incarnation>-<state id>.ckpt", in the checkpoint directory; a worker
// writes it through a temporary file "<that name>.tmp.<16 hex digits>" (worker/engine/
// checkpoint.h). The incarnation (16 hex digits) is random per start of a master and recorded in
// the plan (a master_started event), so names of one start never meet another's, and a master
// knows which files in the directory are its plan's: at start it removes those that no row names
// (sweep_checkpoint_files), and nothing else that is there.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>

namespace hippo {
class SearchPlan;
}

namespace hippo::master {

std::string checkpoint_file_name(const std::string& incarnation, int64_t state);
// The incarnation in a checkpoint file's name or in a temporary file's name for one; nullopt for
// any other name.
std::optional<std::string> incarnation_of(const std::string& file);
// Removes dir/file (never a directory); a file that is already gone is fine, and "" names no file.
void remove_checkpoint_file(const std::string& dir, const std::string& file);
// Removes dir/file once the plan's current transaction has committed (at once outside one): the
// file of a row deleted in that transaction, which a rollback would bring back.
void remove_after_commit(SearchPlan& plan, const std::string& dir, const std::string& file);
// Removes the files in `dir` whose names follow the rule with an incarnation in `incarnations`
// (this plan's masters) and that are not in `named` (the plan's checkpoint rows): what a crash
// left between a commit and a removal, and temporary files of a worker that died mid-write.
// Returns how many it removed.
int64_t sweep_checkpoint_files(const std::string& dir, const std::set<std::string>& incarnations,
                               const std::set<std::string>& named);

}  // namespace hippo::master
