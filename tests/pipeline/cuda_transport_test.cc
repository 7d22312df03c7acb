// The NCCL transport between two GPUs: messages on two channels in both directions, each landing
// in order in the receiver's buffer. Skipped (with the reason) without NCCL or two CUDA devices.
#include <gtest/gtest.h>

#ifdef HIPPO_HAVE_NCCL
#include <thread>

#include "pipeline/nccl_transport.h"
#endif

namespace hippo::pipeline {
namespace {

#ifdef HIPPO_HAVE_NCCL
TEST(NcclTransport, MovesBuffersBetweenTwoGpusInChannelOrder) {
  const int devices = NcclTransport::device_count();
  if (devices < 2) GTEST_SKIP() << "needs 2 CUDA devices, this machine has " << devices;
  constexpr size_t kSize = 1000;
  cudaStream_t streams[2];
  float* buffers[2][3];  // [stage][message]
  for (int s = 0; s < 2; ++s) {
    ASSERT_EQ(cudaSetDevice(s), cudaSuccess);
    ASSERT_EQ(cudaStreamCreate(&streams[s]), cudaSuccess);
    for (float*& b : buffers[s]) ASSERT_EQ(cudaMalloc(&b, kSize * sizeof(float)), cudaSuccess);
  }
  auto fill = [&](int stage, int message, float base) {
    std::vector<float> host(kSize);
    for (size_t i = 0; i < kSize; ++i) host[i] = base + i;
    cudaSetDevice(stage);
    cudaMemcpy(buffers[stage][message], host.data(), kSize * sizeof(float), cudaMemcpyHostToDevice);
  };
  fill(0, 0, 100);  // activations mb 0 and 1 from stage 0, a gradient from stage 1
  fill(0, 1, 200);
  fill(1, 2, 300);
  NcclTransport transport({0, 1}, {streams[0], streams[1]});
  std::thread first([&] {
    transport.send(0, {Op::kSendActivation, 0, 0, 1}, {buffers[0][0], kSize});
    transport.send(0, {Op::kSendActivation, 1, 0, 1}, {buffers[0][1], kSize});
    transport.receive(1, {Op::kSendGradient, 0, 0, 0}, {buffers[0][2], kSize});
  });
  std::thread second([&] {
    transport.send(1, {Op::kSendGradient, 0, 0, 0}, {buffers[1][2], kSize});
    transport.receive(0, {Op::kSendActivation, 0, 0, 1}, {buffers[1][0], kSize});
    transport.receive(0, {Op::kSendActivation, 1, 0, 1}, {buffers[1][1], kSize});
  });
  first.join();
  second.join();
  auto first_value = [&](int stage, int message) {
    float value = 0;
    cudaSetDevice(stage);
    EXPECT_EQ(cudaStreamSynchronize(streams[stage]), cudaSuccess);
    cudaMemcpy(&value, buffers[stage][message] + 7, sizeof(float), cudaMemcpyDeviceToHost);
    return value;
  };
  EXPECT_EQ(first_value(1, 0), 107);
  EXPECT_EQ(first_value(1, 1), 207);
  EXPECT_EQ(first_value(0, 2), 307);
}

TEST(NcclTransport, RefusesTwoStagesOnOneGpu) {
  EXPECT_THROW(NcclTransport({0, 0}, {nullptr, nullptr}), std::invalid_argument);
}
#else
TEST(NcclTransport, MovesBuffersBetweenTwoGpusInChannelOrder) {
  GTEST_SKIP() << "built without CUDA and NCCL: no NCCL transport";
}
#endif

}  // namespace
}  // namespace hippo::pipeline
