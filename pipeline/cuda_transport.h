// Transport between pipeline stages that run on CUDA devices of one process (library
// hippo_pipeline_cuda, built with CUDA; NCCL is used when it was found). Stage s runs on GPU
// devices[s] and computes on streams[s]. Every link of the program (program.h: links) is set up
// when the transport is made, since NCCL communicators cannot safely be made while others have
// transfers in flight. Sends never wait; a receive waits on the host only for a same-GPU send not
// yet issued. All ordering on the devices is by events between streams:
//
// - Two stages on one GPU (link_kind kDeviceCopy): send copies the buffer into a staging buffer
//   on the sender's stream and queues it with an event recorded after the copy; receive takes the
//   channel's next message from the queue, checks that it is the expected one (op, micro-batch,
//   chunk, size), makes the receiver's stream wait for the event and copies the staging buffer
//   into its own on its stream. Both copies are device to device.
// - Two GPUs (kNccl): one two-rank communicator per link and a communication stream on each side,
//   so the k-th send of a channel meets its k-th receive and no channel waits behind another's
//   traffic. send copies the buffer into a staging buffer on the sender's stream (so the caller
//   may reuse it at once: sends are buffered, as the simulator assumes), then ncclSend's it on
//   the communication stream after that copy; receive makes the communication stream wait for
//   the receiver's stream (the buffer is no longer in use), ncclRecv's into the buffer, and makes
//   the receiver's stream wait for that. NCCL carries no tags: a message is identified by its
//   position on its channel, which the simulator checks for every generated program; the message
//   itself is not checked.
//
// A staging buffer is reused once the event recorded after the last read of it has passed (the
// host checks; it never makes a stream wait for another stage's progress, which could deadlock
// two GPUs waiting for each other), else another is allocated: their number is bounded by the
// messages a program has in flight on a link.
//
// Device-wide synchronization (cudaFree, cudaDeviceSynchronize) while NCCL transfers are in
// flight can deadlock two GPUs that wait for each other's next transfer: stages must not free
// device memory during a program (the pipelined engine keeps its buffers between steps).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <vector>

#include "pipeline/interpreter.h"
#include "pipeline/program.h"

struct CUstream_st;  // CUDA's stream (cudaStream_t is CUstream_st*)

namespace hippo::pipeline {

class CudaTransport : public Transport {
 public:
  // One device and one stream per stage of `program`. Throws std::invalid_argument when the
  // sizes disagree, a device is not there, or two GPUs must talk in a build without NCCL;
  // std::runtime_error when CUDA or NCCL fails.
  CudaTransport(const Program& program, std::vector<int> devices,
                std::vector<CUstream_st*> streams);
  ~CudaTransport() override;
  CudaTransport(const CudaTransport&) = delete;
  CudaTransport& operator=(const CudaTransport&) = delete;

  void send(int from, const Instruction& message, std::span<const float> data) override;
  void receive(int from, const Instruction& message, std::span<float> data) override;
  // Wakes every waiting receive (it throws) and aborts the NCCL communicators, so that pending
  // transfers end with an error instead of hanging.
  void abort() override;

  // The CUDA devices of this machine; 0 when there is no driver or no device.
  static int device_count();

 private:
  struct LinkState;  // cuda_transport.cc
  // The state of the link of `message` (a send as its sender executes it) from stage `from`.
  LinkState& link(int from, const Instruction& message);

  std::vector<int> devices_;
  std::vector<CUstream_st*> streams_;
  // Made in the constructor, never changed after: looking one up needs no lock.
  std::map<Link, std::unique_ptr<LinkState>> links_;
  std::atomic<bool> aborted_ = false;
};

}  // namespace hippo::pipeline
