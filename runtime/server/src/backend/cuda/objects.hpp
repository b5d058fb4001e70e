// What the cuda backend hands out: streams, events, modules and kernels, each holding the
// driver handle (and a share of the backend's state, so that destruction order does not
// matter).
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/cuda/device.hpp"
#include "backend/cuda/driver.hpp"
#include "backend/cuda/launch_graphs.hpp"
#include "funnel/server/backend.hpp"

namespace funnel::server::cuda {

class CudaStream final : public BackendStream {
 public:
  CudaStream(std::shared_ptr<const Shared> shared, int device, CUstream stream,
             std::shared_ptr<BackendPartition> partition = nullptr)
      : shared_(std::move(shared)), device_(device), stream_(stream), partition_(std::move(partition)),
        graphs_(*shared_, device) {}
  ~CudaStream() override {
    // Returns at once; the driver frees the stream once its work completed.
    if (ok(shared_->bind(device_))) FUNNEL_CU(shared_->drv, cuStreamDestroy, stream_);
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  int device() const noexcept override { return device_; }
  CUstream handle() const noexcept { return stream_; }

  // Known idle: a query found the stream empty and nothing was enqueued since, so the
  // next query needs no driver call (an empty cudaStreamSynchronize is a round trip
  // the client waits for).  Everything that enqueues goes through enqueue_on().
  bool known_idle() const noexcept { return idle_.load(std::memory_order_relaxed); }
  void set_idle(bool idle) noexcept { idle_.store(idle, std::memory_order_relaxed); }
  bool partitioned() const noexcept { return partition_ != nullptr; }
  // The launch graphs of this stream (launch_batch); only its client's worker touches them.
  LaunchGraphs& graphs() noexcept { return graphs_; }

 private:
  std::shared_ptr<const Shared> shared_;
  int device_;
  CUstream stream_;
  std::shared_ptr<BackendPartition> partition_;  // destroyed after the stream
  std::atomic<bool> idle_{false};
  LaunchGraphs graphs_;  // an exec destroyed while it runs is freed once it is done
};

class CudaEvent final : public BackendEvent {
 public:
  CudaEvent(std::shared_ptr<const Shared> shared, int device, CUevent event, bool pooled)
      : shared_(std::move(shared)), device_(device), event_(event), pooled_(pooled) {}
  ~CudaEvent() override {
    if (pooled_) {
      std::lock_guard lk(shared_->pool_mu);
      auto& free = shared_->pool[static_cast<size_t>(device_)];
      if (free.size() < Shared::kPoolLimit) {
        free.push_back(event_);
        return;
      }
    }
    if (ok(shared_->bind(device_))) FUNNEL_CU(shared_->drv, cuEventDestroy, event_);
  }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  int device() const noexcept { return device_; }
  CUevent handle() const noexcept { return event_; }

 private:
  std::shared_ptr<const Shared> shared_;
  int device_;
  CUevent event_;
  bool pooled_;
};

class CudaModule final : public BackendModule {
 public:
  CudaModule(std::shared_ptr<const Shared> shared, CUlibrary lib) : shared_(std::move(shared)), lib_(lib) {}
  ~CudaModule() override { FUNNEL_CU(shared_->drv, cuLibraryUnload, lib_); }
  CudaModule(const CudaModule&) = delete;
  CudaModule& operator=(const CudaModule&) = delete;
  CUlibrary handle() const noexcept { return lib_; }

 private:
  std::shared_ptr<const Shared> shared_;
  CUlibrary lib_;
};

// Owned by its module's user (the worker), which keeps the module alive longer.
class CudaKernel final : public BackendKernel {
 public:
  CudaKernel(CUkernel k, std::vector<uint32_t> offsets) : kernel_(k), offsets_(std::move(offsets)) {}
  CUkernel handle() const noexcept { return kernel_; }
  const std::vector<uint32_t>& offsets() const noexcept { return offsets_; }

 private:
  CUkernel kernel_;
  std::vector<uint32_t> offsets_;
};

// Every BackendStream/BackendEvent the server hands back was made by this backend.
inline CudaStream& as_cuda(BackendStream& s) noexcept { return static_cast<CudaStream&>(s); }
// The stream that the caller is about to enqueue work on (copies, memsets, event
// records and waits, stream-ordered allocations, launches): no longer known idle.
inline CudaStream& enqueue_on(BackendStream& bs) noexcept {
  CudaStream& s = as_cuda(bs);
  s.set_idle(false);
  return s;
}
inline CudaEvent& as_cuda(BackendEvent& e) noexcept { return static_cast<CudaEvent&>(e); }

inline void* host_pointer(uint64_t address) noexcept {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(address));
}
inline CUdeviceptr device_pointer(uint64_t address) noexcept { return static_cast<CUdeviceptr>(address); }

}  // namespace funnel::server::cuda
