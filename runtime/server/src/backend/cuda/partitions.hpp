// SM partitions of the cuda backend (FUNNEL_GPU_FRACTION, doc/configuration.md): green
// contexts over some of a device's SM groups.  CudaBackend::sm_groups and create_partition
// make them (partitions.cpp).
#pragma once
#include <cstdint>
#include <memory>

#include "backend/cuda/device.hpp"
#include "funnel/server/backend.hpp"

namespace funnel::server::cuda {

// A green context over some SM groups of a device.  It retains the device's primary
// context; its streams (cuGreenCtxStreamCreate) run kernels on its SMs only, and use
// the primary context's memory, libraries and events like any other stream.
class CudaPartition final : public BackendPartition {
 public:
  CudaPartition(std::shared_ptr<const Shared> shared, int device, CUgreenCtx ctx, uint32_t sms)
      : shared_(std::move(shared)), device_(device), ctx_(ctx), sms_(sms) {}
  ~CudaPartition() override { FUNNEL_CU(shared_->drv, cuGreenCtxDestroy, ctx_); }
  CudaPartition(const CudaPartition&) = delete;
  CudaPartition& operator=(const CudaPartition&) = delete;
  int device() const noexcept override { return device_; }
  uint32_t sm_count() const noexcept override { return sms_; }
  CUgreenCtx handle() const noexcept { return ctx_; }

 private:
  std::shared_ptr<const Shared> shared_;
  int device_;
  CUgreenCtx ctx_;
  uint32_t sms_;
};

}  // namespace funnel::server::cuda
