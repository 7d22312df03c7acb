#include "pipeline/cuda_transport.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <string>

#ifdef HIPPO_HAVE_NCCL
#include <nccl.h>
#endif

namespace hippo::pipeline {
namespace {

void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string("CUDA error ") + cudaGetErrorName(status) + ": " +
                             cudaGetErrorString(status) + " in " + call);
}

#ifdef HIPPO_HAVE_NCCL
void check(ncclResult_t status, const char* call) {
  if (status != ncclSuccess)
    throw std::runtime_error(std::string("NCCL error: ") + ncclGetErrorString(status) + " in " +
                             call);
}
#endif

#define CHECK(call) check((call), #call)

// Whether everything before `event` has run; not yet is no error (and must not stay behind as
// the thread's last error, which the next kernel launch's check reads).
bool passed(cudaEvent_t event) {
  const cudaError_t status = cudaEventQuery(event);
  if (status == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  CHECK(status);
  return true;
}

#ifdef HIPPO_HAVE_NCCL
// An event recorded on `after` that `waiting` waits for (both on the current device); the event
// is released at once (CUDA keeps it until the wait is resolved).
void order(cudaStream_t after, cudaStream_t waiting) {
  cudaEvent_t event;
  CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  CHECK(cudaEventRecord(event, after));
  CHECK(cudaStreamWaitEvent(waiting, event, 0));
  CHECK(cudaEventDestroy(event));
}
#endif

// A buffer on the sender's device that holds a sent message until it has been read.
struct Staging {
  float* data = nullptr;  // [capacity]
  size_t capacity = 0;
  cudaEvent_t written = nullptr;  // recorded after the sender's copy into it
  cudaEvent_t read = nullptr;     // recorded after its last read (ncclSend, or the receiver's copy)
  bool queued = false;            // holds a message that is not yet received (same GPU)
};

struct Message {
  Instruction send;  // as the sender executed it
  Staging* staging;
  size_t size;
};

}  // namespace

struct CudaTransport::LinkState {
  LinkKind kind = LinkKind::kDeviceCopy;
  int devices[2] = {0, 0};  // the sender's, the receiver's
  std::mutex mutex;         // guards the staging buffers' flags and the queue
  std::condition_variable arrived;
  std::vector<std::unique_ptr<Staging>> staging;
  std::deque<Message> queue;  // same GPU: sent, not yet received
  // Two GPUs: rank 0 the sender, rank 1 the receiver, a communication stream on each side.
  cudaStream_t streams[2] = {nullptr, nullptr};
#ifdef HIPPO_HAVE_NCCL
  ncclComm_t comms[2] = {nullptr, nullptr};  // null once aborted (abort frees them)
  // Held by a side's thread while it hands NCCL a call on its communicator, and by abort()
  // before it frees that communicator: abort never frees one that a call is being given (NCCL
  // may abort a communicator whose calls are queued or running, never one being called with).
  // One per side, so that the sender and the receiver never wait for each other here.
  std::mutex comm_use[2];
#endif

  // Errors cannot be reported from here; what is left is released as far as CUDA allows.
  ~LinkState() {
    for (int side = 0; side < 2; ++side) {
      if (!streams[side]) continue;
      cudaSetDevice(devices[side]);
      cudaStreamSynchronize(streams[side]);
#ifdef HIPPO_HAVE_NCCL
      if (comms[side]) ncclCommDestroy(comms[side]);
#endif
      cudaStreamDestroy(streams[side]);
    }
    cudaSetDevice(devices[0]);
    for (const auto& s : staging) {
      cudaEventDestroy(s->written);
      cudaEventDestroy(s->read);
      cudaFree(s->data);
    }
  }

  // A staging buffer of at least n floats that nothing reads any more, marked queued; made when
  // there is none (on the sender's device, which is current).
  Staging& take_staging(size_t n) {
    std::lock_guard lock(mutex);
    for (const auto& s : staging) {
      if (!s->queued && s->capacity >= n && passed(s->read)) {
        s->queued = true;
        return *s;
      }
    }
    auto fresh = std::make_unique<Staging>();
    fresh->capacity = n;
    CHECK(cudaMalloc(&fresh->data, std::max<size_t>(1, n) * sizeof(float)));
    CHECK(cudaEventCreateWithFlags(&fresh->written, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&fresh->read, cudaEventDisableTiming));
    fresh->queued = true;
    staging.push_back(std::move(fresh));
    return *staging.back();
  }
};

int CudaTransport::device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device is an answer here, not an error
    return 0;
  }
  return count;
}

CudaTransport::CudaTransport(const Program& program, std::vector<int> devices,
                             std::vector<CUstream_st*> streams)
    : devices_(std::move(devices)), streams_(std::move(streams)) {
  if (static_cast<int>(devices_.size()) != program.stages ||
      static_cast<int>(streams_.size()) != program.stages)
    throw std::invalid_argument("CudaTransport: " + std::to_string(devices_.size()) +
                                " devices and " + std::to_string(streams_.size()) +
                                " streams for " + std::to_string(program.stages) + " stages");
  const int available = device_count();
  for (int device : devices_) {
    if (device < 0 || device >= available)
      throw std::invalid_argument("cuda:" + std::to_string(device) +
                                  " requested, this machine has " + std::to_string(available) +
                                  " CUDA devices");
  }
  for (const Link& l : links(program)) {
    auto state = std::make_unique<LinkState>();
    state->kind = link_kind(l, devices_);
    state->devices[0] = devices_[l.from];
    state->devices[1] = devices_[l.to];
    if (state->kind == LinkKind::kNccl) {
#ifdef HIPPO_HAVE_NCCL
      CHECK(ncclCommInitAll(state->comms, 2, state->devices));
      float* probe[2] = {nullptr, nullptr};
      for (int side = 0; side < 2; ++side) {
        CHECK(cudaSetDevice(state->devices[side]));
        CHECK(cudaStreamCreateWithFlags(&state->streams[side], cudaStreamNonBlocking));
        CHECK(cudaMalloc(&probe[side], sizeof(float)));
      }
      // NCCL may connect a link at its first send and receive (lazily, NCCL >= 2.22), which
      // blocks until both sides have posted: were that the stages' first message, from their two
      // threads, a schedule in which each waits on another link first could deadlock. One float
      // exchanged here, both sides from this thread in one group, connects the link now.
      CHECK(ncclGroupStart());
      CHECK(ncclSend(probe[0], 1, ncclFloat, 1, state->comms[0], state->streams[0]));
      CHECK(ncclRecv(probe[1], 1, ncclFloat, 0, state->comms[1], state->streams[1]));
      CHECK(ncclGroupEnd());
      for (int side = 0; side < 2; ++side) {
        CHECK(cudaSetDevice(state->devices[side]));
        CHECK(cudaStreamSynchronize(state->streams[side]));
        CHECK(cudaFree(probe[side]));
      }
#else
      throw std::invalid_argument(
          "pipeline stages " + std::to_string(l.from) + " and " + std::to_string(l.to) +
          " run on cuda:" + std::to_string(state->devices[0]) +
          " and cuda:" + std::to_string(state->devices[1]) +
          ": moving data between GPUs needs NCCL, and this hippo was built without it");
#endif
    }
    links_.emplace(l, std::move(state));
  }
}

CudaTransport::~CudaTransport() = default;

CudaTransport::LinkState& CudaTransport::link(int from, const Instruction& message) {
  const auto it = links_.find({from, message.peer, pipeline::channel(message.op)});
  if (it == links_.end())
    throw std::logic_error("CudaTransport: stage " + std::to_string(from) + "'s " +
                           describe(message) + " is on a link the program does not have");
  return *it->second;
}

void CudaTransport::send(int from, const Instruction& message, std::span<const float> data) {
  if (aborted_) throw std::runtime_error("pipeline aborted: another stage failed");
  LinkState& l = link(from, message);
  CHECK(cudaSetDevice(devices_[from]));
  cudaStream_t compute = streams_[from];
  Staging& staging = l.take_staging(data.size());
  CHECK(cudaMemcpyAsync(staging.data, data.data(), data.size_bytes(), cudaMemcpyDeviceToDevice,
                        compute));
  CHECK(cudaEventRecord(staging.written, compute));
  if (l.kind == LinkKind::kDeviceCopy) {
    {
      std::lock_guard lock(l.mutex);
      l.queue.push_back({message, &staging, data.size()});
    }
    l.arrived.notify_all();
    return;
  }
#ifdef HIPPO_HAVE_NCCL
  CHECK(cudaStreamWaitEvent(l.streams[0], staging.written, 0));
  {
    std::lock_guard use(l.comm_use[0]);
    if (aborted_) throw std::runtime_error("pipeline aborted: another stage failed");
    CHECK(ncclGroupStart());
    CHECK(ncclSend(staging.data, data.size(), ncclFloat, 1, l.comms[0], l.streams[0]));
    CHECK(ncclGroupEnd());
  }
  std::lock_guard lock(l.mutex);
  CHECK(cudaEventRecord(staging.read, l.streams[0]));
  staging.queued = false;  // free again once `read` has passed
#endif
}

void CudaTransport::receive(int from, const Instruction& message, std::span<float> data) {
  if (aborted_) throw std::runtime_error("pipeline aborted: another stage failed");
  const int to = message.peer;
  LinkState& l = link(from, message);
  CHECK(cudaSetDevice(devices_[to]));
  cudaStream_t compute = streams_[to];
  if (l.kind == LinkKind::kDeviceCopy) {
    std::unique_lock lock(l.mutex);
    l.arrived.wait(lock, [&] { return aborted_ || !l.queue.empty(); });
    if (aborted_) throw std::runtime_error("pipeline aborted: another stage failed");
    const Message got = l.queue.front();
    l.queue.pop_front();
    const std::string at = "stage " + std::to_string(to) + " expected stage " +
                           std::to_string(from) + "'s " + describe(message);
    if (!(got.send == message)) throw std::runtime_error(at + ", got its " + describe(got.send));
    if (got.size != data.size())
      throw std::runtime_error(at + " of " + std::to_string(data.size()) + " floats, got " +
                               std::to_string(got.size));
    CHECK(cudaStreamWaitEvent(compute, got.staging->written, 0));
    CHECK(cudaMemcpyAsync(data.data(), got.staging->data, data.size_bytes(),
                          cudaMemcpyDeviceToDevice, compute));
    CHECK(cudaEventRecord(got.staging->read, compute));
    got.staging->queued = false;
    return;
  }
#ifdef HIPPO_HAVE_NCCL
  order(compute, l.streams[1]);
  {
    std::lock_guard use(l.comm_use[1]);
    if (aborted_) throw std::runtime_error("pipeline aborted: another stage failed");
    CHECK(ncclGroupStart());
    CHECK(ncclRecv(data.data(), data.size(), ncclFloat, 0, l.comms[1], l.streams[1]));
    CHECK(ncclGroupEnd());
  }
  order(l.streams[1], compute);
#endif
}

void CudaTransport::abort() {
  aborted_ = true;  // no call starts on a communicator from here on
  for (auto& [key, l] : links_) {
#ifdef HIPPO_HAVE_NCCL
    for (int side = 0; side < 2; ++side) {
      // Waits for a call being handed to NCCL (the links were connected when made, so that
      // takes no peer); calls already queued or running on the GPU are what the abort stops.
      std::lock_guard use(l->comm_use[side]);
      if (l->comms[side]) ncclCommAbort(l->comms[side]);  // frees the communicator
      l->comms[side] = nullptr;
    }
#endif
    std::lock_guard lock(l->mutex);
    l->arrived.notify_all();
  }
}

}  // namespace hippo::pipeline
