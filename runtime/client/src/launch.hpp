// Kernel launches of both fronts (cudaLaunchKernel*, cuLaunchKernel*) and the checks CUDA
// makes at the launch itself, from the device table and the kernel's cached attributes and
// occupancy (doc/design/kernels.md).
#pragma once
#include "api.hpp"
#include <vector>

#include "modules.hpp"

namespace funnel::client {

struct LaunchSpec {
  dim3 grid, block;
  size_t shared = 0;
  cudaStream_t stream = nullptr;
  bool per_thread = false;
  uint32_t flags = 0;
  uint32_t cluster[3] = {0, 0, 0};
  int32_t priority = 0;
};

// What CUDA checks before a launch reaches the GPU, against the device's limits (CUDA 13:
// cudaErrorInvalidValue for each).
cudaError_t check_shape(const LaunchSpec& l, const ipc::DeviceRecord& d);
// The kernel's attributes on `device` (FuncGetAttributes), asked for once; the kernel must be
// ready.
cudaError_t kernel_attributes(Kernel& k, int device, ipc::FuncAttributes& out);
// Blocks of `threads` threads and `shared` bytes of dynamic shared memory per multiprocessor
// (Occupancy with `flags`), asked for once (until forget_limits).
cudaError_t kernel_blocks_per_sm(Kernel& k, int device, uint32_t threads, uint64_t shared, int& out,
                                 uint32_t flags = 0);
// After cudaFuncSetAttribute / cudaFuncSetCacheConfig: ask again.
void forget_limits(Kernel& k);
// What CUDA refuses from the kernel's own limits (dynamic shared memory, cooperative size).
cudaError_t check_kernel(Kernel& k, const LaunchSpec& l, int device, const ipc::DeviceRecord& d);
// Occupancy of a ready kernel (checked arguments): resident blocks of `block_size` threads with
// `dynamic_shared` bytes (cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags: kernel_blocks_per_sm's
// answer, kept; libraries ask before each launch, cudaOccupancyMaxPotentialBlockSize once per
// block size), and the
// dynamic shared memory left per block at `blocks` blocks (cudaOccupancyAvailableDynamicSMemPerBlock).
cudaError_t kernel_occupancy(Kernel& k, int device, int block_size, size_t dynamic_shared, unsigned flags, int& blocks);
cudaError_t kernel_available_smem(Kernel& k, int device, int blocks, int block_size, size_t& bytes);
// The checks of a launch of `k` on `device` and its Launch record: the command and the packed
// parameters (a launch's, or a graph's kernel node's).
cudaError_t prepare_launch(Kernel& k, const LaunchSpec& l, int device, void** args, ipc::LaunchCmd& c,
                           std::vector<std::byte>& params);
// One one-way Launch record of `k` on l.stream with the arguments `args` (one pointer per
// parameter, as cudaLaunchKernel and cuLaunchKernel take them); loads the module first if needed.
cudaError_t launch_kernel(Kernel& k, const LaunchSpec& l, void** args);

// cudaLaunchKernelExC's and cuLaunchKernelEx's attributes (the same numbers and values) into
// `l`: cooperative, cluster dimension, priority; others refused naming `call` and the attribute.
cudaError_t apply_launch_attributes(const cudaLaunchAttribute* attrs, unsigned n, const char* call, LaunchSpec& l);
// cudaFuncSetAttribute / cuFuncSetAttribute (the same attribute numbers), checked here and sent
// one-way; cudaFuncSetCacheConfig / cuFuncSetCacheConfig.
cudaError_t set_kernel_attribute(Kernel& k, int device, int attr, int value);
cudaError_t set_kernel_cache_config(Kernel& k, int device, int config);
// cudaOccupancyMaxActiveClusters / cuOccupancyMaxActiveClusters for a ready kernel.
cudaError_t kernel_max_active_clusters(Kernel& k, int device, const LaunchSpec& l, int& clusters);
// cudaOccupancyMaxPotentialClusterSize / cuOccupancyMaxPotentialClusterSize (the cluster
// dimensions of `l` are not used).
cudaError_t kernel_max_cluster_size(Kernel& k, int device, const LaunchSpec& l, int& size);

}  // namespace funnel::client
