// The shape of a pipeline schedule (how many stages, micro-batches, which schedule, chunks per
// stage) and the rules a shape must follow for its program to be generated (schedules.h). A
// study spec's "pipeline" is checked against these rules alone, without the generators.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace hippo::pipeline {

enum class Schedule { kGPipe, kOneFOneB, kInterleaved, kBPipe };

// "gpipe", "1f1b", "interleaved", "bpipe"
const char* schedule_name(Schedule schedule);
std::optional<Schedule> parse_schedule(std::string_view name);
constexpr const char* kScheduleNames = "gpipe, 1f1b, interleaved, bpipe";

struct PipelineShape {
  int stages = 1;        // p >= 1
  int microbatches = 1;  // m >= 1 (interleaved: a multiple of p)
  Schedule schedule = Schedule::kOneFOneB;
  int chunks = 1;  // v >= 1; more than 1 only for interleaved (and then p >= 2)
  // The embedding and output layer cut by vocabulary across all stages (1f1b or interleaved,
  // p >= 2): the program gets their passes (program.h).
  bool vocab_parallel = false;
};

// The vocabulary of a vocabulary-parallel pipeline is cut into blocks of this many tokens (the
// last may be shorter): each stage gets whole blocks, and the softmax reduces them in block order.
constexpr int kVocabBlock = 4096;

// Limits that keep programs and timelines a sensible size.
constexpr int kMaxStages = 256;
constexpr int kMaxMicrobatches = 4096;
constexpr int kMaxChunks = 64;

// Empty when `shape` can be generated, else what is wrong, naming the field, e.g.
// "microbatches: interleaved needs a multiple of stages (6), got 8".
std::string check_shape(const PipelineShape& shape);

}  // namespace hippo::pipeline
