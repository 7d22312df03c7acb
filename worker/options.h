// How the operator started this worker (hippo-worker's flags; main.cc parses them).
#pragma once

#include <string>

#include "protocol/auth.h"

namespace hippo::worker {

struct Options {
  std::string master;
  std::string device = "cpu";
  int threads = 1;
  std::string checkpoints = "checkpoints";
  int cache_states = 4;
  int heartbeat_ms = 1000;
  std::string name;
  protocol::ClientKeys keys;        // --master-key and --key, the local key, or none (--insecure)
  bool allow_trainers = false;      // --allow-exec trainer: run the commands of external models
  double trainer_timeout_s = 3600;  // the longest an external trainer may go without a line
  double trainer_idle_s = 60;       // a long-lived trainer that trains nothing this long is ended
  // --devices: the device group that runs the stages of a pipelined job ("cpu:N": N stage
  // threads; "cuda:A-B": GPUs A..B); its size is the most pipeline stages this worker takes.
  std::string devices = "cpu:1";
  int device_count = 1;
};

// Parses --devices: "cpu:N" (1 <= N <= 256), "cuda:A" or "cuda:A-B" (A <= B). CUDA devices must be
// present. Returns the problem, or "" and fills device_count.
std::string parse_devices(Options& o);

}  // namespace hippo::worker
