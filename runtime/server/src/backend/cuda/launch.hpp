// A launch as the driver takes it: the launch configuration and the kernel arguments.
#pragma once
#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include "backend/cuda/driver.hpp"
#include "backend/cuda/objects.hpp"
#include "funnel/server/backend.hpp"

namespace funnel::server::cuda {

// A CUlaunchConfig with the attributes a LaunchDesc asks for (it points into itself: not
// copyable).
struct LaunchConfig {
  CUlaunchConfig config{};
  CUlaunchAttribute attrs[3];
  LaunchConfig(const LaunchDesc& l, CUstream stream) noexcept {
    unsigned n = 0;
    if (l.cluster[0] != 0 || l.cluster[1] != 0 || l.cluster[2] != 0) {
      attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      attrs[n].value.clusterDim.x = std::max(l.cluster[0], 1u);
      attrs[n].value.clusterDim.y = std::max(l.cluster[1], 1u);
      attrs[n].value.clusterDim.z = std::max(l.cluster[2], 1u);
      ++n;
    }
    if (l.cooperative) {
      attrs[n].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
      attrs[n].value.cooperative = 1;
      ++n;
    }
    if (l.priority != 0) {
      attrs[n].id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
      attrs[n].value.priority = l.priority;
      ++n;
    }
    config.gridDimX = l.grid[0];
    config.gridDimY = l.grid[1];
    config.gridDimZ = l.grid[2];
    config.blockDimX = l.block[0];
    config.blockDimY = l.block[1];
    config.blockDimZ = l.block[2];
    config.sharedMemBytes = l.shared_bytes;
    config.hStream = stream;
    config.attrs = n != 0 ? attrs : nullptr;
    config.numAttrs = n;
  }
  LaunchConfig(const LaunchConfig&) = delete;
  LaunchConfig& operator=(const LaunchConfig&) = delete;
};

// Kernel arguments as cuLaunchKernelEx and kernel nodes take them: one pointer per parameter
// into the packed buffer (the caller checked that the buffer is exactly the kernel's
// parameter size).  Points into itself: not copyable.
class KernelArgs {
 public:
  KernelArgs(const CudaKernel& k, std::span<const std::byte> params) {
    const auto& offsets = k.offsets();
    if (offsets.empty()) return;
    args_ = inline_;
    if (offsets.size() > kInline) {
      heap_.resize(offsets.size());
      args_ = heap_.data();
    }
    auto* base = const_cast<std::byte*>(params.data());
    for (size_t i = 0; i < offsets.size(); ++i) args_[i] = base + offsets[i];
  }
  KernelArgs(const KernelArgs&) = delete;
  KernelArgs& operator=(const KernelArgs&) = delete;
  void** get() const noexcept { return args_; }  // nullptr for a kernel without parameters

 private:
  static constexpr size_t kInline = 32;
  void* inline_[kInline];
  std::vector<void*> heap_;
  void** args_ = nullptr;
};

}  // namespace funnel::server::cuda
