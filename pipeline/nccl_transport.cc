#include "pipeline/nccl_transport.h"

#include <set>
#include <stdexcept>
#include <string>

namespace hippo::pipeline {
namespace {

void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string("CUDA error ") + cudaGetErrorName(status) + ": " +
                             cudaGetErrorString(status) + " in " + call);
}

void check(ncclResult_t status, const char* call) {
  if (status != ncclSuccess)
    throw std::runtime_error(std::string("NCCL error: ") + ncclGetErrorString(status) + " in " +
                             call);
}

#define CHECK(call) check((call), #call)

// An event recorded on `after` that `waiting` waits for; the event is released at once (CUDA
// keeps it alive until the wait is resolved).
void order(cudaStream_t after, cudaStream_t waiting) {
  cudaEvent_t event;
  CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  CHECK(cudaEventRecord(event, after));
  CHECK(cudaStreamWaitEvent(waiting, event, 0));
  CHECK(cudaEventDestroy(event));
}

}  // namespace

int NcclTransport::device_count() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

NcclTransport::NcclTransport(std::vector<int> devices, std::vector<cudaStream_t> compute_streams)
    : devices_(std::move(devices)), compute_streams_(std::move(compute_streams)) {
  if (devices_.size() != compute_streams_.size())
    throw std::invalid_argument("NcclTransport: one compute stream per device");
  if (std::set<int>(devices_.begin(), devices_.end()).size() != devices_.size())
    throw std::invalid_argument("NcclTransport: every stage needs a GPU of its own");
  const int available = device_count();
  for (int device : devices_) {
    if (device < 0 || device >= available)
      throw std::invalid_argument("NcclTransport: cuda:" + std::to_string(device) +
                                  " requested, this machine has " + std::to_string(available) +
                                  " CUDA devices");
  }
}

NcclTransport::~NcclTransport() {
  // Errors cannot be reported from here; what is left is released as far as CUDA allows.
  for (auto& [key, link] : links_) {
    const int sides[2] = {devices_[std::get<0>(key)], devices_[std::get<1>(key)]};
    for (int side = 0; side < 2; ++side) {
      cudaSetDevice(sides[side]);
      if (!aborted_) {  // aborted communicators are already freed
        cudaStreamSynchronize(link.streams[side]);
        ncclCommDestroy(link.comms[side]);
      }
      if (link.streams[side]) cudaStreamDestroy(link.streams[side]);
    }
    cudaSetDevice(sides[0]);
    for (Staging& staging : link.staging) {
      cudaEventDestroy(staging.sent);
      cudaFree(staging.data);
    }
  }
}

NcclTransport::Link& NcclTransport::link(int from, int to, Channel channel) {
  std::lock_guard lock(mutex_);
  if (aborted_) throw std::runtime_error("pipeline aborted: another stage failed");
  auto [it, created] = links_.try_emplace({from, to, channel});
  Link& link = it->second;
  if (!created) return link;
  const int pair[2] = {devices_[from], devices_[to]};
  try {
    CHECK(ncclCommInitAll(link.comms, 2, pair));
    for (int side = 0; side < 2; ++side) {
      CHECK(cudaSetDevice(pair[side]));
      CHECK(cudaStreamCreateWithFlags(&link.streams[side], cudaStreamNonBlocking));
    }
  } catch (...) {
    links_.erase(it);  // what was made is leaked: NCCL and CUDA are in trouble anyway
    throw;
  }
  return link;
}

void NcclTransport::send(int from, const Instruction& message, std::span<const float> data) {
  Link& link = this->link(from, message.peer, channel(message.op));
  CHECK(cudaSetDevice(devices_[from]));
  Staging* staging = nullptr;
  for (Staging& s : link.staging) {
    if (s.capacity >= data.size() && cudaEventQuery(s.sent) == cudaSuccess) {
      staging = &s;
      break;
    }
  }
  if (!staging) {
    Staging fresh;
    fresh.capacity = data.size();
    CHECK(cudaMalloc(&fresh.data, std::max<size_t>(1, data.size()) * sizeof(float)));
    CHECK(cudaEventCreateWithFlags(&fresh.sent, cudaEventDisableTiming));
    link.staging.push_back(fresh);
    staging = &link.staging.back();
  }
  cudaStream_t compute = compute_streams_[from];
  CHECK(cudaMemcpyAsync(staging->data, data.data(), data.size_bytes(), cudaMemcpyDeviceToDevice,
                        compute));
  order(compute, link.streams[0]);
  CHECK(ncclGroupStart());
  CHECK(ncclSend(staging->data, data.size(), ncclFloat, 1, link.comms[0], link.streams[0]));
  CHECK(ncclGroupEnd());
  CHECK(cudaEventRecord(staging->sent, link.streams[0]));
}

void NcclTransport::receive(int from, const Instruction& message, std::span<float> data) {
  const int to = message.peer;
  Link& link = this->link(from, to, channel(message.op));
  CHECK(cudaSetDevice(devices_[to]));
  cudaStream_t compute = compute_streams_[to];
  order(compute, link.streams[1]);
  CHECK(ncclGroupStart());
  CHECK(ncclRecv(data.data(), data.size(), ncclFloat, 0, link.comms[1], link.streams[1]));
  CHECK(ncclGroupEnd());
  order(link.streams[1], compute);
}

void NcclTransport::abort() {
  std::lock_guard lock(mutex_);
  aborted_ = true;
  for (auto& [key, link] : links_) {
    for (ncclComm_t comm : link.comms) ncclCommAbort(comm);  // safe beside a running call
  }
}

}  // namespace hippo::pipeline
