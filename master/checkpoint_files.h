// The master's operations on checkpoint files in its own directory. Their naming rule is
// protocol/checkpoint_storage.h (workers read it too): at start the master removes the files of its
// plan's incarnations that no row names (sweep_checkpoint_files), and nothing else that is there.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "protocol/checkpoint_storage.h"

namespace hippo {
class SearchPlan;
}

namespace hippo::master {

using protocol::checkpoint_file_name;
using protocol::incarnation_of;

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
