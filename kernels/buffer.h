// Buffer<T>: an owning handle to n values of T in a backend's memory (host memory for the CPU
// backend, device memory for a GPU backend), as the engine keeps its state: one contiguous buffer
// per kind (parameters, optimizer state, gradients, activations).
//
// Copying a Buffer copies its contents within the same backend's memory (a fork of a training
// state is one copy per buffer, device to device on a GPU); moving hands the memory over.
// Comparison is bit for bit. A default Buffer is empty and belongs to no backend. A Buffer shares
// the ownership of its backend, so a state outlives the engine that made it.
//
//   Buffer<float> params = Buffer<float>::from_host(backend, host.data(), host.size());
//   Buffer<float> fork = params;               // one copy in the backend's memory
//   std::vector<float> back = fork.to_host();  // for checkpoints and tests
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "kernels/kernels.h"

namespace hippo::kernels {

template <typename T>
class Buffer {
 public:
  Buffer() = default;
  // n zero values in be's memory.
  Buffer(std::shared_ptr<const Backend> be, int64_t n)
      : be_(std::move(be)),
        n_(n),
        p_(n > 0 ? static_cast<T*>(be_->allocate(n * int64_t{sizeof(T)})) : nullptr) {}
  static Buffer from_host(std::shared_ptr<const Backend> be, const T* src, int64_t n) {
    Buffer b(std::move(be), n);
    b.copy_from_host(src);
    return b;
  }

  Buffer(const Buffer& o) : Buffer() {
    if (o.be_) {
      Buffer b(o.be_, o.n_);
      if (o.n_ > 0) o.be_->copy(b.p_, o.p_, o.bytes());
      *this = std::move(b);
    }
  }
  Buffer& operator=(const Buffer& o) {
    if (this != &o) *this = Buffer(o);
    return *this;
  }
  Buffer(Buffer&& o) noexcept
      : be_(std::move(o.be_)), n_(std::exchange(o.n_, 0)), p_(std::exchange(o.p_, nullptr)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    std::swap(be_, o.be_);
    std::swap(n_, o.n_);
    std::swap(p_, o.p_);
    return *this;
  }
  ~Buffer() {
    if (p_) be_->deallocate(p_);
  }

  T* data() { return p_; }
  const T* data() const { return p_; }
  int64_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int64_t bytes() const { return n_ * int64_t{sizeof(T)}; }
  const Backend* backend() const { return be_.get(); }

  // Overwrites all size() values from src[size()] in host memory.
  void copy_from_host(const T* src) {
    if (n_ > 0) be_->copy_from_host(p_, src, bytes());
  }
  // The first n values (all by default) into host memory.
  std::vector<T> to_host(int64_t n = -1) const {
    std::vector<T> out(static_cast<size_t>(n < 0 || n > n_ ? n_ : n));
    if (!out.empty()) be_->copy_to_host(out.data(), p_, int64_t(out.size() * sizeof(T)));
    return out;
  }

  // Same size and the same bits (NaNs and signed zeros included).
  bool operator==(const Buffer& o) const {
    if (n_ != o.n_) return false;
    if (n_ == 0) return true;
    const std::vector<T> a = to_host(), b = o.to_host();
    return std::memcmp(a.data(), b.data(), static_cast<size_t>(bytes())) == 0;
  }

 private:
  std::shared_ptr<const Backend> be_;
  int64_t n_ = 0;
  T* p_ = nullptr;
};

}  // namespace hippo::kernels
