// The CUDA transport: which links a program uses and how each is carried (everywhere); between
// two stages on one GPU by device copies (needs a CUDA device) and between two GPUs by NCCL
// (needs two): messages on two channels in both directions, each landing in order in the
// receiver's buffer. The GPU tests skip, with the reason, without the devices.
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "pipeline/program.h"
#include "pipeline/schedules.h"

#ifdef HIPPO_HAVE_CUDA_TRANSPORT
#include <cuda_runtime.h>

#include "pipeline/cuda_transport.h"
#include "tests/cuda_devices.h"
#endif

namespace hippo::pipeline {
namespace {

Link act(int from, int to) {
  return {from, to, Channel::kActivation};
}
Link grad(int from, int to) {
  return {from, to, Channel::kGradient};
}

TEST(TransportSelection, LinksOfEachScheduleAndTheirKinds) {
  // 1F1B over 4 stages: neighbours only, activations forward, gradients back.
  const Program one_f_one_b = generate({4, 8, Schedule::kOneFOneB, 1});
  const std::vector<Link> chain = {act(0, 1),  grad(1, 0), act(1, 2),
                                   grad(2, 1), act(2, 3),  grad(3, 2)};
  EXPECT_EQ(links(one_f_one_b), chain);
  // Two stages per GPU: the pairs that share one copy on it, the middle link crosses by NCCL.
  const std::vector<int> two_per_gpu = {0, 0, 1, 1};
  std::vector<LinkKind> kinds;
  for (const Link& l : chain) kinds.push_back(link_kind(l, two_per_gpu));
  EXPECT_EQ(kinds,
            (std::vector<LinkKind>{LinkKind::kDeviceCopy, LinkKind::kDeviceCopy, LinkKind::kNccl,
                                   LinkKind::kNccl, LinkKind::kDeviceCopy, LinkKind::kDeviceCopy}));
  for (const Link& l : chain) {
    EXPECT_EQ(link_kind(l, {0, 1, 2, 3}), LinkKind::kNccl);        // a GPU per stage
    EXPECT_EQ(link_kind(l, {5, 5, 5, 5}), LinkKind::kDeviceCopy);  // all on one GPU
  }
  EXPECT_THROW(link_kind(act(2, 3), {0, 0, 1}), std::invalid_argument);

  // Interleaved: a micro-batch's next chunk comes back from the last stage to the first.
  const std::vector<Link> ring = links(generate({2, 4, Schedule::kInterleaved, 2}));
  EXPECT_EQ(ring, (std::vector<Link>{act(0, 1), grad(0, 1), act(1, 0), grad(1, 0)}));
  // BPipe: stage 0 lends stashes to its partner, stage 3, which gives them back.
  const std::vector<Link> lending = links(generate({4, 8, Schedule::kBPipe, 1}));
  EXPECT_NE(std::find(lending.begin(), lending.end(), Link{0, 3, Channel::kLend}), lending.end());
  EXPECT_NE(std::find(lending.begin(), lending.end(), Link{3, 0, Channel::kGiveBack}),
            lending.end());
  // One stage: no links at all.
  EXPECT_TRUE(links(generate({1, 4, Schedule::kOneFOneB, 1})).empty());
}

#ifdef HIPPO_HAVE_CUDA_TRANSPORT
// Two stages, messages 0 and 1 from stage 0 (activations of micro-batches 0 and 1) and message 2
// from stage 1 (the gradient of micro-batch 0), over the transport, on the devices given.
void exchange_three_messages(int device0, int device1) {
  constexpr size_t kSize = 1000;
  const int devices[2] = {device0, device1};
  cudaStream_t streams[2];
  float* buffers[2][3];  // [stage][message]
  for (int s = 0; s < 2; ++s) {
    ASSERT_EQ(cudaSetDevice(devices[s]), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&streams[s], cudaStreamNonBlocking), cudaSuccess);
    for (float*& b : buffers[s]) ASSERT_EQ(cudaMalloc(&b, kSize * sizeof(float)), cudaSuccess);
  }
  // On the stage's stream, as the stage's own work would (a send's buffer may be reused by work
  // that follows it there).
  auto fill = [&](int stage, int message, float base) {
    std::vector<float> host(kSize);
    for (size_t i = 0; i < kSize; ++i) host[i] = base + i;
    cudaSetDevice(devices[stage]);
    cudaMemcpyAsync(buffers[stage][message], host.data(), kSize * sizeof(float),
                    cudaMemcpyHostToDevice, streams[stage]);
    cudaStreamSynchronize(streams[stage]);
  };
  fill(0, 0, 100);
  fill(0, 1, 200);
  fill(1, 2, 300);
  // A program with the two links (only its links matter to the transport).
  Program program{"test",
                  2,
                  2,
                  1,
                  {{{Op::kSendActivation, 0, 0, 1}, {Op::kRecvGradient, 0, 0, 1}},
                   {{Op::kRecvActivation, 0, 0, 0}, {Op::kSendGradient, 0, 0, 0}}}};
  {
    CudaTransport transport(program, {devices[0], devices[1]}, {streams[0], streams[1]});
    std::thread first([&] {
      transport.send(0, {Op::kSendActivation, 0, 0, 1}, {buffers[0][0], kSize});
      fill(0, 0, -1);  // sends are buffered: the buffer may be reused at once
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
    auto value = [&](int stage, int message) {
      float v = 0;
      cudaSetDevice(devices[stage]);
      EXPECT_EQ(cudaStreamSynchronize(streams[stage]), cudaSuccess);
      cudaMemcpy(&v, buffers[stage][message] + 7, sizeof(float), cudaMemcpyDeviceToHost);
      return v;
    };
    EXPECT_EQ(value(1, 0), 107);
    EXPECT_EQ(value(1, 1), 207);
    EXPECT_EQ(value(0, 2), 307);
  }
  for (int s = 0; s < 2; ++s) {
    cudaSetDevice(devices[s]);
    for (float* b : buffers[s]) cudaFree(b);
    cudaStreamDestroy(streams[s]);
  }
}

TEST(CudaTransport, MovesBuffersBetweenTwoStagesOnOneGpuInChannelOrder) {
  HIPPO_NEED_CUDA_DEVICES(1);
  exchange_three_messages(0, 0);
}

TEST(CudaTransport, RefusesAMessageOtherThanTheExpectedOneOnOneGpu) {
  HIPPO_NEED_CUDA_DEVICES(1);
  cudaStream_t stream;
  float* buffer;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&buffer, 64 * sizeof(float)), cudaSuccess);
  Program program{
      "test", 2, 2, 1, {{{Op::kSendActivation, 0, 0, 1}}, {{Op::kRecvActivation, 0, 0, 0}}}};
  {
    CudaTransport transport(program, {0, 0}, {stream, stream});
    transport.send(0, {Op::kSendActivation, 1, 0, 1}, {buffer, 64});
    try {
      transport.receive(0, {Op::kSendActivation, 0, 0, 1}, {buffer, 64});
      ADD_FAILURE() << "no error";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(),
                   "stage 1 expected stage 0's send activation mb 0 to stage 1, got its send "
                   "activation mb 1 to stage 1");
    }
    transport.abort();  // a waiting receive ends instead of hanging
    EXPECT_THROW(transport.receive(0, {Op::kSendActivation, 0, 0, 1}, {buffer, 64}),
                 std::runtime_error);
  }
  cudaStreamSynchronize(stream);
  cudaFree(buffer);
  cudaStreamDestroy(stream);
}

TEST(CudaTransport, MovesBuffersBetweenTwoGpusByNcclInChannelOrder) {
#ifndef HIPPO_HAVE_NCCL
  GTEST_SKIP() << "built without NCCL";
#endif
  HIPPO_NEED_CUDA_DEVICES(2);
  exchange_three_messages(0, 1);
}

TEST(CudaTransport, RefusesADeviceThatIsNotThere) {
  const int devices = CudaTransport::device_count();
  const Program program = generate({2, 2, Schedule::kOneFOneB, 1});
  try {
    CudaTransport(program, {0, devices}, {nullptr, nullptr});
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "cuda:" + std::to_string(devices) +
                                         " requested, this machine has " + std::to_string(devices) +
                                         " CUDA devices");
  }
}
#endif

}  // namespace
}  // namespace hippo::pipeline
