#include "pipeline/shape.h"

namespace hippo::pipeline {

const char* schedule_name(Schedule schedule) {
  switch (schedule) {
    case Schedule::kGPipe:
      return "gpipe";
    case Schedule::kOneFOneB:
      return "1f1b";
    case Schedule::kInterleaved:
      return "interleaved";
    case Schedule::kBPipe:
      return "bpipe";
  }
  return "?";
}

std::optional<Schedule> parse_schedule(std::string_view name) {
  for (Schedule s :
       {Schedule::kGPipe, Schedule::kOneFOneB, Schedule::kInterleaved, Schedule::kBPipe}) {
    if (name == schedule_name(s)) return s;
  }
  return std::nullopt;
}

std::string check_shape(const PipelineShape& shape) {
  auto out_of_range = [](const char* field, int value, int max) {
    return std::string(field) + ": expected an integer from 1 to " + std::to_string(max) +
           ", got " + std::to_string(value);
  };
  if (shape.stages < 1 || shape.stages > kMaxStages)
    return out_of_range("stages", shape.stages, kMaxStages);
  if (shape.microbatches < 1 || shape.microbatches > kMaxMicrobatches)
    return out_of_range("microbatches", shape.microbatches, kMaxMicrobatches);
  if (shape.chunks < 1 || shape.chunks > kMaxChunks)
    return out_of_range("chunks", shape.chunks, kMaxChunks);
  if (shape.vocab_parallel && (shape.stages < 2 || (shape.schedule != Schedule::kOneFOneB &&
                                                    shape.schedule != Schedule::kInterleaved)))
    return std::string(
               "vocab_parallel: needs at least 2 stages and the 1f1b or interleaved "
               "schedule, got ") +
           std::to_string(shape.stages) + " stages of " + schedule_name(shape.schedule);
  if (shape.schedule != Schedule::kInterleaved) {
    if (shape.chunks != 1)
      return "chunks: only the interleaved schedule has more than one chunk per stage, got " +
             std::to_string(shape.chunks) + " with " + schedule_name(shape.schedule);
    return "";
  }
  if (shape.chunks > 1 && shape.stages < 2)
    return "chunks: interleaving needs at least 2 stages, got 1";
  if (shape.microbatches % shape.stages != 0)
    return "microbatches: interleaved needs a multiple of stages (" + std::to_string(shape.stages) +
           "), got " + std::to_string(shape.microbatches);
  return "";
}

}  // namespace hippo::pipeline
