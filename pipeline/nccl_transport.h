// Transport between the GPUs of one process through NCCL (library hippo_pipeline_nccl, built only
// when CUDA and NCCL are found). Stage s runs on CUDA device devices[s] and computes on
// compute_streams[s]; nothing here blocks the calling thread, the order is kept by streams and
// events:
//
// - Each (sender, receiver, channel) has its own two-rank communicator and a communication stream
//   on each side, so the k-th send of a channel meets the k-th receive (program.h) and no channel
//   waits behind another's traffic.
// - send copies the buffer into a staging buffer on the sender's compute stream (so the caller
//   may reuse it at once: sends are buffered, as the simulator assumes), then ncclSend's the
//   staging buffer on the communication stream after an event recorded on the compute stream.
//   A staging buffer is reused once the event recorded after its send has completed.
// - receive makes the communication stream wait for the receiver's compute stream (the buffer is
//   no longer in use), ncclRecv's into the buffer, and makes the compute stream wait for an event
//   recorded after it, so the next kernel that reads the buffer sees the data.
//
// NCCL carries no tags: a message is identified by its position on its channel, which the
// simulator checks for every generated program; the message itself is not checked here.
// Several communicators share each GPU; their kernels wait for their peers on separate streams,
// which needs the GPU to run them concurrently (it does for the few channels of a pipeline).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "pipeline/interpreter.h"

namespace hippo::pipeline {

class NcclTransport : public Transport {
 public:
  // devices[s] and compute_streams[s] for each stage s; the devices must differ (NCCL needs one
  // rank per GPU), else std::invalid_argument.
  NcclTransport(std::vector<int> devices, std::vector<cudaStream_t> compute_streams);
  ~NcclTransport() override;
  NcclTransport(const NcclTransport&) = delete;
  NcclTransport& operator=(const NcclTransport&) = delete;

  void send(int from, const Instruction& message, std::span<const float> data) override;
  void receive(int from, const Instruction& message, std::span<float> data) override;
  // Aborts every communicator, so pending transfers end with an error instead of hanging.
  void abort() override;

  // The CUDA devices of this machine; 0 when there is no driver or no device.
  static int device_count();

 private:
  struct Staging {
    float* data = nullptr;  // [capacity] on the sender's device
    size_t capacity = 0;
    cudaEvent_t sent = nullptr;  // recorded after the ncclSend that reads it
  };
  struct Link {
    ncclComm_t comms[2] = {nullptr, nullptr};      // rank 0: sender, rank 1: receiver
    cudaStream_t streams[2] = {nullptr, nullptr};  // on the sender's and the receiver's device
    std::vector<Staging> staging;                  // the sender's, touched by its thread only
  };
  Link& link(int from, int to, Channel channel);  // created on first use

  std::vector<int> devices_;
  std::vector<cudaStream_t> compute_streams_;
  std::mutex mutex_;  // guards links_ (not the links' contents) and aborted_
  std::map<std::tuple<int, int, Channel>, Link> links_;
  bool aborted_ = false;
};

}  // namespace hippo::pipeline
