#include "pipeline/interpreter.h"

#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

namespace hippo::pipeline {

namespace {

[[noreturn]] void no_vocab_passes() {
  throw std::logic_error("this pipeline stage has no vocabulary passes");
}

}  // namespace

void StageExecutor::embed_forward(int) {
  no_vocab_passes();
}
void StageExecutor::embed_backward(int) {
  no_vocab_passes();
}
void StageExecutor::vocab_forward(int) {
  no_vocab_passes();
}
void StageExecutor::vocab_backward(int) {
  no_vocab_passes();
}

void run_stage(const Program& program, int stage, StageExecutor& executor, Transport& transport) {
  for (const Instruction& ins : program.instructions.at(stage)) {
    const int mb = ins.microbatch, chunk = ins.chunk;
    auto receive = [&](Buffer into) {
      transport.receive(ins.peer, matching_send(program.stages, stage, ins),
                        executor.buffer(into, mb, chunk));
    };
    auto send = [&](Buffer from) { transport.send(stage, ins, executor.buffer(from, mb, chunk)); };
    auto receive_from_peer = [&](Buffer into) {  // a buffer per stage: the peer for the chunk
      transport.receive(ins.peer, matching_send(program.stages, stage, ins),
                        executor.buffer(into, mb, ins.peer));
    };
    switch (ins.op) {
      case Op::kForward:
        executor.forward(mb, chunk);
        break;
      case Op::kBackward:
        executor.backward(mb, chunk);
        break;
      case Op::kOptimizerStep:
        executor.optimizer_step();
        break;
      case Op::kRecvActivation:
        receive(Buffer::kActivationIn);
        break;
      case Op::kSendActivation:
        send(Buffer::kActivationOut);
        break;
      case Op::kRecvGradient:
        receive(Buffer::kGradientIn);
        break;
      case Op::kSendGradient:
        send(Buffer::kGradientOut);
        break;
      case Op::kEvict:
        send(Buffer::kStash);
        executor.release(Buffer::kStash, mb, chunk);
        break;
      case Op::kHold:
        receive(Buffer::kLoan);
        break;
      case Op::kReturn:
        send(Buffer::kLoan);
        executor.release(Buffer::kLoan, mb, chunk);
        break;
      case Op::kReload:
        receive(Buffer::kStash);
        break;
      case Op::kEmbedForward:
        executor.embed_forward(mb);
        break;
      case Op::kEmbedBackward:
        executor.embed_backward(mb);
        break;
      case Op::kVocabForward:
        executor.vocab_forward(mb);
        break;
      case Op::kVocabBackward:
        executor.vocab_backward(mb);
        break;
      case Op::kSendEmbedding:
        send(Buffer::kEmbedding);
        break;
      case Op::kRecvEmbedding:
        receive_from_peer(Buffer::kEmbeddingIn);
        break;
      case Op::kSendEmbedGradient:
        send(Buffer::kEmbedGradient);
        break;
      case Op::kRecvEmbedGradient:
        receive(Buffer::kEmbedGradient);
        break;
      case Op::kSendVocabInput:
        send(Buffer::kVocabInput);
        break;
      case Op::kRecvVocabInput:
        receive(Buffer::kVocabInput);
        break;
      case Op::kSendVocabStats:
        send(Buffer::kVocabStats);
        break;
      case Op::kRecvVocabStats:
        receive_from_peer(Buffer::kVocabStatsIn);
        break;
      case Op::kSendVocabGradient:
        send(Buffer::kVocabGradient);
        break;
      case Op::kRecvVocabGradient:
        receive_from_peer(Buffer::kVocabGradientIn);
        break;
    }
  }
}

void run_program(const Program& program, const std::vector<StageExecutor*>& executors,
                 Transport& transport) {
  if (static_cast<int>(executors.size()) != program.stages ||
      static_cast<int>(program.instructions.size()) != program.stages) {
    throw std::invalid_argument("run_program: " + std::to_string(executors.size()) +
                                " executors and " + std::to_string(program.instructions.size()) +
                                " instruction lists for " + std::to_string(program.stages) +
                                " stages");
  }
  std::mutex mutex;
  std::exception_ptr first_error;
  std::vector<std::thread> threads;
  for (int s = 0; s < program.stages; ++s) {
    threads.emplace_back([&, s] {
      try {
        run_stage(program, s, *executors[s], transport);
      } catch (...) {
        {
          std::lock_guard lock(mutex);
          if (!first_error) first_error = std::current_exception();
        }
        transport.abort();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace hippo::pipeline
