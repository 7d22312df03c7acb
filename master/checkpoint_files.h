// The one naming rule of checkpoint files (as LevelDB's filename.h): the master names every file
// a worker writes, "state-<incarnation>-<state id>.ckpt", in the checkpoint directory. The
// incarnation is random per start of a master, so names of one start never meet another's.
#pragma once

#include <cstdint>
#include <string>

namespace hippo::master {

std::string checkpoint_file_name(const std::string& incarnation, int64_t state);
// Whether `file` was named by the master start with this incarnation.
bool named_by(const std::string& incarnation, const std::string& file);
// Removes dir/file; a file that is already gone is fine, and "" names no file.
void remove_checkpoint_file(const std::string& dir, const std::string& file);

}  // namespace hippo::master
