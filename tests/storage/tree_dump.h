// A canonical text form of a stage tree (every stage field, every trial with its sequences, the
// counts), so that two trees can be compared across processes by comparing strings.
#pragma once

#include <string>

#include "stagetree/tree.h"

namespace hippo {

std::string dump_tree(const StageTree& tree);

}  // namespace hippo
