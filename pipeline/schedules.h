// The four schedule generators. Each returns a Program (program.h) for p stages and m
// micro-batches; the last instruction of every stage is its optimizer step.
//
// - gpipe:       all forwards, then all backwards. Every stage stashes all m micro-batches.
// - 1f1b:        stage s runs min(p-1-s, m) warm-up forwards, then alternates one forward and one
//                backward, then drains the remaining backwards. Stage s stashes min(p-s, m).
// - interleaved: 1F1B over v model chunks per device (Megatron-LM's schedule; chunk c of device d
//                is pipeline position c*p + d); m must be a multiple of p.
// - bpipe:       1F1B where stage x < p-1-x keeps at most cap = ceil((p+1)/2) stashes: before a
//                forward or reload that would exceed the cap it evicts (lends) the stash needed
//                last to its partner p-1-x, and reloads each lent stash before its backward. The
//                partner holds the lent stashes in its own memory, so no stage holds more than cap.
//
// Vocabulary parallelism (shape.vocab_parallel; 1f1b and interleaved): the program with one more
// warm-up forward per stage, and each micro-batch's embedding, output-layer and embedding-
// gradient passes and their messages put into every stage's list at instants of its timeline
// (program.h lists the passes; pipeline/README.md explains why this never deadlocks).
//
// Bubble: the fraction of device time not spent computing, 1 - sum(busy) / (p * makespan) (see
// simulator.h). With the same forward cost f and backward cost b on every stage and free
// communication, gpipe and 1f1b both have makespan (m+p-1)(f+b), so their bubble is exactly
// (p-1)/(m+p-1) for any f and b (tests use f=1, b=2 and f=b=1). Interleaving with each chunk
// costing 1/v of a stage divides the idle time by v: bubble (p-1)/(v*m+p-1).
//
// Gradient order: every generator runs the backwards of one (stage, chunk) in ascending
// micro-batch order. The gradients of a chunk are therefore accumulated in the same order as in
// an unpipelined run over the same micro-batches, which is what makes a pipelined trial's
// parameters equal, bit for bit, to the same trial trained on one device.
#pragma once

#include "pipeline/program.h"
#include "pipeline/shape.h"

namespace hippo::pipeline {

// The program for `shape`; throws std::invalid_argument with check_shape's message if invalid.
Program generate(const PipelineShape& shape);

// BPipe's cap on the stashed micro-batches of any stage: ceil((p+1)/2).
int bpipe_cap(int stages);

}  // namespace hippo::pipeline
