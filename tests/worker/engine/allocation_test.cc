// The engine's step loop allocates no memory: after its first steps (which size the buffers), a
// step of each model (mlp, cnn, gpt) and optimizer calls neither malloc nor operator new, in any
// thread, also across an epoch boundary. (Not yet the gpt pipelined over CPU threads: its
// interpreter allocates per step.) This executable replaces glibc's
// malloc family with counting wrappers around glibc's own (__libc_malloc, ...), so every
// allocation of the process is seen; sanitizer builds have their own allocator, so there the
// test is skipped.
#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "tests/worker/engine/recipe.h"

// The sanitizer build (tests/CMakeLists.txt) has malloc of its own: nothing to count there.
#ifdef HIPPO_SANITIZED
#define HIPPO_COUNT_ALLOCATIONS 0
#else
#define HIPPO_COUNT_ALLOCATIONS 1
#endif

namespace {
std::atomic<int64_t> allocations{0};
}  // namespace

#if HIPPO_COUNT_ALLOCATIONS
extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);

void* malloc(size_t n) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_malloc(n);
}
void* calloc(size_t n, size_t size) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_calloc(n, size);
}
void* realloc(void* p, size_t n) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_realloc(p, n);
}
void* memalign(size_t alignment, size_t n) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_memalign(alignment, n);
}
void* aligned_alloc(size_t alignment, size_t n) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_memalign(alignment, n);
}
int posix_memalign(void** p, size_t alignment, size_t n) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  *p = __libc_memalign(alignment, n);
  return *p ? 0 : 12;  // ENOMEM
}
}
#endif

namespace hippo::worker {
namespace {

// The most allocations of any one step from `warm` to `to` (each after_step sees the count since
// the step before).
int64_t most_allocations_per_step(Engine& engine, TrainState& s, const Hyperparams& hp,
                                  const nlohmann::json& fixed, int64_t warm, int64_t to) {
  engine.train(s, warm, hp, fixed, {});
  int64_t before = allocations.load(), most = 0;
  engine.train(s, to, hp, fixed, [&](const StepDone&) {
    const int64_t now = allocations.load();
    most = std::max(most, now - before);
    before = allocations.load();  // what after_step itself did is not the step's
    return true;
  });
  return most;
}

TEST(AllocationTest, TheCounterSeesAllocations) {
  if (!HIPPO_COUNT_ALLOCATIONS) GTEST_SKIP() << "sanitizer build: its allocator is not counted";
  const int64_t before = allocations.load();
  void* (*volatile allocate)(size_t) = std::malloc;  // volatile: no call is optimized away
  void* p = allocate(100);
  std::free(p);
  std::vector<float>* volatile v = new std::vector<float>(1000);
  delete v;
  EXPECT_GE(allocations.load() - before, 2);
}

struct Case {
  std::string model, optimizer;
};

class StepLoopTest : public ::testing::TestWithParam<Case> {};

TEST_P(StepLoopTest, AllocatesNothing) {
  if (!HIPPO_COUNT_ALLOCATIONS) GTEST_SKIP() << "sanitizer build: its allocator is not counted";
  const Case c = GetParam();
  const RunConfig config = testing::small_config(c.model);
  for (int threads : {1, 2}) {
    SCOPED_TRACE(c.model + " " + c.optimizer + ", " + std::to_string(threads) + " threads");
    Engine engine(config, threads);
    TrainState s = engine.initial_state();
    // A constant batch size (a larger one sizes larger buffers once); 200 samples in batches of
    // 24: steps 8 and 16 start epochs 1 and 2.
    const Hyperparams hp = {{"lr", multistep(0.05, {6}, 0.5)}};
    nlohmann::json fixed = testing::recipe_fixed(c.optimizer);
    fixed["batch_size"] = 24;
    EXPECT_EQ(most_allocations_per_step(engine, s, hp, fixed, 2, 20), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, StepLoopTest,
                         ::testing::Values(Case{"mlp", "sgd"}, Case{"mlp", "adamw"},
                                           Case{"cnn", "sgd"}, Case{"cnn", "adam"},
                                           Case{"gpt", "adam"}, Case{"gpt", "sgd"}),
                         [](const auto& info) {
                           return info.param.model + "_" + info.param.optimizer;
                         });

}  // namespace
}  // namespace hippo::worker
