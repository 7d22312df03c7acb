// The Fashion-MNIST reader and the data order of data.h.
#include "worker/engine/data.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>

namespace hippo::worker {
namespace {

const char* kDir = "/usr/share/datasets/fashion-mnist";

TEST(DataTest, ReadsBothSplitsOncePerProcess) {
  auto train = load_fashion_mnist(kDir, "train");
  EXPECT_EQ(train->count, 60000);
  EXPECT_EQ(train->rows, 28);
  EXPECT_EQ(train->cols, 28);
  EXPECT_EQ(int64_t(train->pixels.size()), 60000 * 784);
  EXPECT_EQ(train->labels[0], 9);  // the first training image is an ankle boot
  auto test = load_fashion_mnist(kDir, "t10k");
  EXPECT_EQ(test->count, 10000);
  std::vector<int> per_class(10);
  for (int32_t l : test->labels) per_class.at(l)++;
  EXPECT_EQ(per_class, std::vector<int>(10, 1000));
  EXPECT_EQ(load_fashion_mnist(kDir, "train").get(), train.get());
  EXPECT_THROW(load_fashion_mnist(kDir, "valid"), std::invalid_argument);
  EXPECT_THROW(load_fashion_mnist("/nonexistent", "train"), std::runtime_error);
}

TEST(DataTest, PermutationIsAPureFunctionOfSeedAndEpoch) {
  std::vector<int32_t> p = permutation(1000, 5, 3);
  std::vector<int32_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int32_t> identity(1000);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(p, identity);
  EXPECT_EQ(p, permutation(1000, 5, 3));
  EXPECT_NE(p, permutation(1000, 5, 4));
  EXPECT_NE(p, permutation(1000, 6, 3));
}

TEST(DataTest, ConstantBatchDropsTheRemainderOfEachEpoch) {
  SampleOrder order(10, 1);
  std::vector<int32_t> got(3);
  int64_t pos = 0;
  const std::vector<int32_t> epoch0 = permutation(10, 1, 0), epoch1 = permutation(10, 1, 1);
  for (int step = 0; step < 3; ++step) {
    pos = order.take(pos, 3, got.data());
    EXPECT_EQ(got, std::vector<int32_t>(epoch0.begin() + 3 * step, epoch0.begin() + 3 * step + 3));
  }
  EXPECT_EQ(pos, 9);
  pos = order.take(pos, 3, got.data());  // sample 9 of epoch 0 is dropped
  EXPECT_EQ(got, std::vector<int32_t>(epoch1.begin(), epoch1.begin() + 3));
  EXPECT_EQ(pos, 13);
}

TEST(DataTest, ChangedBatchSizeContinuesFromTheSameOffset) {
  SampleOrder order(10, 1);
  std::vector<int32_t> got(5);
  const std::vector<int32_t> epoch0 = permutation(10, 1, 0), epoch1 = permutation(10, 1, 1);
  int64_t pos = order.take(0, 2, got.data());
  pos = order.take(pos, 5, got.data());
  EXPECT_EQ(got, std::vector<int32_t>(epoch0.begin() + 2, epoch0.begin() + 7));
  pos = order.take(pos, 3, got.data());  // exactly fills the epoch
  EXPECT_EQ(pos, 10);
  pos = order.take(pos, 4, got.data());
  EXPECT_EQ(std::vector<int32_t>(got.begin(), got.begin() + 4),
            std::vector<int32_t>(epoch1.begin(), epoch1.begin() + 4));
  EXPECT_EQ(pos, 14);
  // A fresh order (another process) reads the same from the same position.
  SampleOrder fresh(10, 1);
  std::vector<int32_t> again(5);
  EXPECT_EQ(fresh.take(7, 3, again.data()), 10);
  EXPECT_EQ(std::vector<int32_t>(again.begin(), again.begin() + 3),
            std::vector<int32_t>(epoch0.begin() + 7, epoch0.end()));
  EXPECT_THROW(order.take(0, 11, got.data()), std::invalid_argument);
  EXPECT_THROW(order.take(0, 0, got.data()), std::invalid_argument);
}

// A position no training produces (a forged checkpoint's) is refused, never read out of bounds.
TEST(DataTest, PositionOutsideTheDataIsRefused) {
  EXPECT_EQ(next_position(10, 0, 3), 3);
  EXPECT_EQ(next_position(10, 9, 3), 13);   // the rest of epoch 0 is dropped
  EXPECT_EQ(next_position(10, 10, 3), 13);  // offset N of epoch 0 is offset 0 of epoch 1
  EXPECT_EQ(next_position(10, 27, 3), 30);
  SampleOrder order(10, 1);
  std::vector<int32_t> got(3);
  for (int64_t bad : {int64_t{-1}, int64_t{-10}, INT64_MIN, INT64_MAX, INT64_MAX - 19}) {
    EXPECT_THROW(next_position(10, bad, 3), std::invalid_argument) << bad;
    EXPECT_THROW(order.take(bad, 3, got.data()), std::invalid_argument) << bad;
  }
  EXPECT_EQ(next_position(10, INT64_MAX - 20, 5), INT64_MAX - 12);  // offset 7: a new epoch
}

}  // namespace
}  // namespace hippo::worker
