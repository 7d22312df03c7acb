// Which checkpoints the master keeps for later studies once no running study needs them. Pure
// functions: the StudyDriver applies what they choose (plan rows, files).
//
// A state that no running study needs may still save a later study its training: a new trial
// whose hyper-parameter sequences start the same way forks from it instead of training from a
// fresh model (a coarse grid, then a finer one around its best). Keeping it costs its file's
// bytes. The master keeps, under a disk budget (`--keep-checkpoints`), the states of highest
//
//   value = step x trials_through x 2^(-age / 7 days) / bytes
//
//   step            the steps a later trial through the state skips (from a fresh model);
//   trials_through  the trials of any study whose path passes through it: a state that many
//                   trials shared (a branch point near the root) is the likeliest to lie on a new
//                   trial's path, and a stage's end beats a snapshot inside it (same trials, more
//                   steps);
//   age             since a running study last needed it (a half-life of one week).
//
// Highest value first, each kept while its bytes fit in what is left of the budget (one that does
// not fit is skipped; a smaller one after it may still fit); ties go to the older state. The
// budget covers the whole checkpoint directory: the states running studies need count against it
// first and are never evicted, so the kept ones shrink as a running study's grow.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "stagetree/tree.h"

namespace hippo::master {

// 2 GB: hundreds of MLP or CNN states (0.4-10 MB each), a handful of gpt ones; small next to a
// laptop's free disk, and `--keep-checkpoints 0` restores deleting every state at a study's end.
constexpr int64_t kDefaultKeepCheckpointBytes = 2'000'000'000;

struct RetentionCandidate {
  int64_t id = 0;  // the master's state id
  int64_t step = 0;
  int64_t bytes = 0;  // its file
  int64_t trials_through = 0;
  double age_s = 0;  // since a running study last needed it
  bool operator==(const RetentionCandidate&) const = default;
};

double retention_value(const RetentionCandidate& c);

// The ids of the candidates kept under `budget_bytes`, by the rule above.
std::vector<int64_t> choose_retained(std::vector<RetentionCandidate> candidates,
                                     int64_t budget_bytes);

// For every stage: the trials whose path passes through its end (those ending in it or below).
std::unordered_map<StageId, int64_t> trials_through_ends(const StageTree& tree);
// The trials whose path passes through the state after `step` steps of `stage`.
int64_t trials_through(const StageTree& tree, const std::unordered_map<StageId, int64_t>& ends,
                       StageId stage, int64_t step);

// "20GB", "512MiB", "1.5G", "0" -> bytes (K, M, G, T are powers of 1000 with B or alone, of
// 1024 with iB). std::invalid_argument naming the text for anything else.
int64_t parse_size(const std::string& text);
// 2147483648 -> "2.1 GB".
std::string format_size(int64_t bytes);

}  // namespace hippo::master
