// Device groups (device_group.h): what --devices accepts, and where the stages of a pipeline go.
#include "worker/engine/device_group.h"

#include <gtest/gtest.h>

namespace hippo::worker {
namespace {

TEST(DeviceGroupTest, ParsesCpuThreadsAndGpuRanges) {
  const DeviceGroup cpu = DeviceGroup::parse("cpu:4");
  EXPECT_FALSE(cpu.cuda);
  EXPECT_EQ(cpu.count, 4);
  EXPECT_EQ(cpu.home(), "cpu");
  const DeviceGroup one = DeviceGroup::parse("cuda:3");
  EXPECT_TRUE(one.cuda);
  EXPECT_EQ(one.first, 3);
  EXPECT_EQ(one.count, 1);
  EXPECT_EQ(one.home(), "cuda:3");
  const DeviceGroup range = DeviceGroup::parse("cuda:2-5");
  EXPECT_EQ(range.first, 2);
  EXPECT_EQ(range.count, 4);
  EXPECT_EQ(range.home(), "cuda:2");
  EXPECT_EQ(DeviceGroup::of_device("cpu").home(), "cpu");
  EXPECT_EQ(DeviceGroup::of_device("cuda:1").home(), "cuda:1");
}

TEST(DeviceGroupTest, RefusesMalformedGroupsNamingThem) {
  auto error = [](const std::string& text) {
    try {
      DeviceGroup::parse(text);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  for (const char* text : {"cpu:0", "cpu:257", "cpu:", "cpu:x", "cpu:-1"})
    EXPECT_EQ(error(text),
              "devices \"" + std::string(text) + "\": expected cpu:N with N from 1 to 256");
  for (const char* text :
       {"cuda:", "cuda:3-1", "cuda:1-", "cuda:-2", "cuda:a", "cuda:0-1-2", "cuda:99999", "cuda:0 "})
    EXPECT_EQ(error(text),
              "devices \"" + std::string(text) + "\": expected cuda:A or cuda:A-B with A <= B");
  for (const char* text : {"", "gpu:0", "cpu", "CUDA:0", "cuda0"})
    EXPECT_EQ(error(text),
              "devices \"" + std::string(text) + "\": expected cpu:N, cuda:A or cuda:A-B");
}

TEST(DeviceGroupTest, StagesGoToTheFirstGpusInContiguousRuns) {
  const DeviceGroup four = DeviceGroup::parse("cuda:0-3");
  EXPECT_EQ(four.stage_gpus(1), (std::vector<int>{0}));
  EXPECT_EQ(four.stage_gpus(2), (std::vector<int>{0, 1}));  // the first two GPUs
  EXPECT_EQ(four.stage_gpus(4), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(four.stage_gpus(8), (std::vector<int>{0, 0, 1, 1, 2, 2, 3, 3}));
  EXPECT_EQ(four.stage_gpus(6), (std::vector<int>{0, 0, 1, 2, 2, 3}));
  const DeviceGroup one = DeviceGroup::parse("cuda:1");  // every stage on one GPU
  EXPECT_EQ(one.stage_gpus(4), (std::vector<int>{1, 1, 1, 1}));
  const DeviceGroup upper = DeviceGroup::parse("cuda:4-5");
  EXPECT_EQ(upper.stage_gpus(3), (std::vector<int>{4, 4, 5}));
}

}  // namespace
}  // namespace hippo::worker
