// Kernel launches, function attributes and occupancy (doc/design/kernels.md).  A launch
// is one one-way Launch record on the stream: it never waits for the server.  What CUDA
// refuses at the launch itself (the configuration, too much dynamic shared memory, a
// cooperative grid that does not fit) is refused here, from the device table and the
// kernel's cached attributes and occupancy; errors of the kernel's execution come back at
// the next synchronising call, as native ones do.
#include <algorithm>
#include <vector>

#include "api.hpp"
#include "launch.hpp"
#include "launch_params.hpp"
#include "modules.hpp"

using namespace funnel::client;
namespace ipc = funnel::ipc;

namespace {

// The registered kernel behind `func`, ready on `device` (module loaded, layout known).
// A pointer that is no registered kernel is an invalid handle in CUDA 13 (kernels are
// cudaKernel_t handles): cudaErrorInvalidResourceHandle, as the H100 answers natively.
cudaError_t ready_kernel(const void* func, int device, Kernel*& out) {
  Kernel* k = func != nullptr ? find_kernel(func) : nullptr;
  if (k == nullptr) return cudaErrorInvalidResourceHandle;
  Runtime& rt = Runtime::get();
  if (cudaError_t e = to_cuda(rt.ready()); e != cudaSuccess) return e;
  if (cudaError_t e = to_cuda(kernel_ready(*k, rt, device)); e != cudaSuccess) return e;
  out = k;
  return cudaSuccess;
}

cudaError_t launch(const void* func, const LaunchSpec& l, void** args) {
  Kernel* k = func != nullptr ? find_kernel(func) : nullptr;
  if (k == nullptr) return cudaErrorInvalidResourceHandle;  // as ready_kernel
  return launch_kernel(*k, l, args);
}

// The launch configuration of cudaLaunchKernelExC (and cudaOccupancyMaxActiveClusters).
cudaError_t read_config(const cudaLaunchConfig_t* config, bool per_thread, LaunchSpec& l) {
  if (config == nullptr) return cudaErrorInvalidValue;
  l = LaunchSpec{config->gridDim, config->blockDim, config->dynamicSmemBytes, config->stream, per_thread};
  return apply_launch_attributes(config->attrs, config->numAttrs, "cudaLaunchKernelExC", l);
}

cudaError_t launch_ex(const cudaLaunchConfig_t* config, const void* func, void** args, bool per_thread) {
  LaunchSpec l;
  if (cudaError_t e = read_config(config, per_thread, l); e != cudaSuccess) return e;
  return launch(func, l, args);
}

cudaError_t func_attributes(cudaFuncAttributes* attr, const void* func) {
  if (attr == nullptr) return cudaErrorInvalidValue;
  const int dev = current_device();
  Kernel* k = nullptr;
  if (cudaError_t e = ready_kernel(func, dev, k); e != cudaSuccess) return e;
  ipc::FuncAttributes a;
  if (cudaError_t e = kernel_attributes(*k, dev, a); e != cudaSuccess) return e;
  *attr = cudaFuncAttributes{};
  attr->sharedSizeBytes = a.shared_size_bytes;
  attr->constSizeBytes = a.const_size_bytes;
  attr->localSizeBytes = a.local_size_bytes;
  attr->maxThreadsPerBlock = static_cast<int>(a.max_threads_per_block);
  attr->numRegs = static_cast<int>(a.num_regs);
  attr->ptxVersion = static_cast<int>(a.ptx_version);
  attr->binaryVersion = static_cast<int>(a.binary_version);
  attr->cacheModeCA = static_cast<int>(a.cache_mode_ca);
  attr->maxDynamicSharedSizeBytes = static_cast<int>(a.max_dynamic_shared_size_bytes);
  attr->preferredShmemCarveout = static_cast<int>(a.preferred_shmem_carveout);
  attr->clusterDimMustBeSet = static_cast<int>(a.cluster_dim_must_be_set);
  attr->requiredClusterWidth = static_cast<int>(a.required_cluster[0]);
  attr->requiredClusterHeight = static_cast<int>(a.required_cluster[1]);
  attr->requiredClusterDepth = static_cast<int>(a.required_cluster[2]);
  attr->clusterSchedulingPolicyPreference = static_cast<int>(a.cluster_scheduling_policy_preference);
  attr->nonPortableClusterSizeAllowed = static_cast<int>(a.non_portable_cluster_size_allowed);
  return cudaSuccess;
}

cudaError_t set_attribute(const void* func, cudaFuncAttribute attr, int value) {
  const int dev = current_device();
  Kernel* k = nullptr;
  if (cudaError_t e = ready_kernel(func, dev, k); e != cudaSuccess) return e;
  return set_kernel_attribute(*k, dev, attr, value);
}

cudaError_t occupancy(int* blocks, const void* func, int block_size, size_t dynamic_shared, unsigned flags) {
  if (blocks == nullptr || block_size <= 0) return cudaErrorInvalidValue;
  if ((flags & ~unsigned{cudaOccupancyDisableCachingOverride}) != 0) return cudaErrorInvalidValue;
  const int dev = current_device();
  Kernel* k = nullptr;
  if (cudaError_t e = ready_kernel(func, dev, k); e != cudaSuccess) return e;
  return kernel_occupancy(*k, dev, block_size, dynamic_shared, flags, *blocks);
}

cudaError_t available_smem(size_t* bytes, const void* func, int blocks, int block_size) {
  if (bytes == nullptr || blocks <= 0 || block_size <= 0) return cudaErrorInvalidValue;
  const int dev = current_device();
  Kernel* k = nullptr;
  if (cudaError_t e = ready_kernel(func, dev, k); e != cudaSuccess) return e;
  return kernel_available_smem(*k, dev, blocks, block_size, *bytes);
}

// cudaOccupancyMaxActiveClusters and MaxPotentialClusterSize: `query` (launch.hpp) of the kernel
// on the current device.
using ClusterQuery = cudaError_t (*)(Kernel&, int, const LaunchSpec&, int&);
cudaError_t cluster_query(int* out, const void* func, const cudaLaunchConfig_t* config, ClusterQuery query) {
  if (out == nullptr) return cudaErrorInvalidValue;
  LaunchSpec l;
  if (cudaError_t e = read_config(config, false, l); e != cudaSuccess) return e;
  const int dev = current_device();
  Kernel* k = nullptr;
  if (cudaError_t e = ready_kernel(func, dev, k); e != cudaSuccess) return e;
  return query(*k, dev, l, *out);
}

LaunchSpec spec(dim3 grid, dim3 block, size_t shared, cudaStream_t stream, bool per_thread, uint32_t flags = 0) {
  LaunchSpec l;
  l.grid = grid, l.block = block, l.shared = shared, l.stream = stream, l.per_thread = per_thread, l.flags = flags;
  return l;
}

}  // namespace

// nvcc's kernel stubs (<<<>>>): the handle is the host stub's address (__cudaGetKernel).
FUNNEL_API cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void** args, size_t shared,
                                          cudaStream_t stream) {
  return guarded(__func__, [&] { return launch(kernel, spec(grid, block, shared, stream, false), args); });
}
FUNNEL_API cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 grid, dim3 block, void** args, size_t shared,
                                               cudaStream_t stream) {
  return guarded(__func__, [&] { return launch(kernel, spec(grid, block, shared, stream, true), args); });
}
FUNNEL_API cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t shared,
                                        cudaStream_t stream) {
  return guarded(__func__, [&] { return launch(func, spec(grid, block, shared, stream, false), args); });
}
FUNNEL_API cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 grid, dim3 block, void** args, size_t shared,
                                             cudaStream_t stream) {
  return guarded(__func__, [&] { return launch(func, spec(grid, block, shared, stream, true), args); });
}
FUNNEL_API cudaError_t cudaLaunchCooperativeKernel(const void* func, dim3 grid, dim3 block, void** args, size_t shared,
                                                   cudaStream_t stream) {
  return guarded(__func__,
                 [&] { return launch(func, spec(grid, block, shared, stream, false, ipc::kLaunchCooperative), args); });
}
FUNNEL_API cudaError_t cudaLaunchCooperativeKernel_ptsz(const void* func, dim3 grid, dim3 block, void** args,
                                                        size_t shared, cudaStream_t stream) {
  return guarded(__func__,
                 [&] { return launch(func, spec(grid, block, shared, stream, true, ipc::kLaunchCooperative), args); });
}
FUNNEL_API cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
  return guarded(__func__, [&] { return launch_ex(config, func, args, false); });
}
FUNNEL_API cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t* config, const void* func, void** args) {
  return guarded(__func__, [&] { return launch_ex(config, func, args, true); });
}

// Kernel handles are host stub addresses: cudaLaunchKernel and the cudaFunc* calls
// accept them as they accept the stub.
FUNNEL_API cudaError_t cudaGetKernel(cudaKernel_t* kernel, const void* entry) {
  return guarded(__func__, [&] {
    if (kernel == nullptr) return cudaErrorInvalidValue;
    if (find_kernel(entry) == nullptr) return cudaErrorInvalidDeviceFunction;
    *kernel = reinterpret_cast<cudaKernel_t>(const_cast<void*>(entry));
    return cudaSuccess;
  });
}
// The cudaFunction_t is the kernel's record: a CUfunction of funnel's driver front (cuLaunchKernel,
// cuFuncGetAttribute, ...), and a handle the runtime's calls take as they take the stub.  Attaches,
// as CUDA initialises the runtime here.
FUNNEL_API cudaError_t cudaGetFuncBySymbol(cudaFunction_t* fn, const void* symbol) {
  return guarded(__func__, [&] {
    if (fn == nullptr) return cudaErrorInvalidValue;
    Kernel* k = find_kernel(symbol);
    if (k == nullptr) return cudaErrorInvalidDeviceFunction;
    // As under CUDA, the runtime is initialised: its context is current for the driver front.
    if (cudaError_t e = to_cuda(Runtime::get().ready()); e != cudaSuccess) return e;
    *fn = reinterpret_cast<cudaFunction_t>(k);
    return cudaSuccess;
  });
}
FUNNEL_API cudaError_t cudaFuncGetName(const char** name, const void* func) {
  return guarded(__func__, [&] {
    if (name == nullptr) return cudaErrorInvalidValue;
    Kernel* k = find_kernel(func);
    if (k == nullptr) return cudaErrorInvalidDeviceFunction;
    *name = k->name.c_str();
    return cudaSuccess;
  });
}
FUNNEL_API cudaError_t cudaFuncGetParamInfo(const void* func, size_t index, size_t* offset, size_t* size) {
  return guarded(__func__, [&] {
    Kernel* k = nullptr;
    if (cudaError_t e = ready_kernel(func, current_device(), k); e != cudaSuccess) return e;
    if (index >= k->layout.size()) return cudaErrorInvalidValue;
    if (offset != nullptr) *offset = ipc::param_offset(k->layout[index]);
    if (size != nullptr) *size = ipc::param_size(k->layout[index]);
    return cudaSuccess;
  });
}

FUNNEL_API cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func) {
  return guarded(__func__, [&] { return func_attributes(attr, func); });
}
FUNNEL_API cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  return guarded(__func__, [&] { return set_attribute(func, attr, value); });
}
FUNNEL_API cudaError_t cudaFuncSetCacheConfig(const void* func, cudaFuncCache config) {
  return guarded(__func__, [&] {
    const int dev = current_device();
    Kernel* k = nullptr;
    if (cudaError_t e = ready_kernel(func, dev, k); e != cudaSuccess) return e;
    return set_kernel_cache_config(*k, dev, config);
  });
}
// Deprecated and without effect on Volta and later GPUs: checked, then accepted.
FUNNEL_API cudaError_t cudaFuncSetSharedMemConfig(const void* func, cudaSharedMemConfig config) {
  return guarded(__func__, [&] {
    if (config < cudaSharedMemBankSizeDefault || config > cudaSharedMemBankSizeEightByte) return cudaErrorInvalidValue;
    Kernel* k = nullptr;
    return ready_kernel(func, current_device(), k);
  });
}

FUNNEL_API cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void* func, int block_size,
                                                                     size_t dynamic_shared) {
  return guarded(__func__, [&] { return occupancy(blocks, func, block_size, dynamic_shared, 0); });
}
FUNNEL_API cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, const void* func,
                                                                              int block_size, size_t dynamic_shared,
                                                                              unsigned flags) {
  return guarded(__func__, [&] { return occupancy(blocks, func, block_size, dynamic_shared, flags); });
}
FUNNEL_API cudaError_t cudaOccupancyAvailableDynamicSMemPerBlock(size_t* bytes, const void* func, int blocks,
                                                                 int block_size) {
  return guarded(__func__, [&] { return available_smem(bytes, func, blocks, block_size); });
}
FUNNEL_API cudaError_t cudaOccupancyMaxPotentialClusterSize(int* size, const void* func,
                                                            const cudaLaunchConfig_t* config) {
  return guarded(__func__, [&] { return cluster_query(size, func, config, kernel_max_cluster_size); });
}
FUNNEL_API cudaError_t cudaOccupancyMaxActiveClusters(int* clusters, const void* func,
                                                      const cudaLaunchConfig_t* config) {
  return guarded(__func__, [&] { return cluster_query(clusters, func, config, kernel_max_active_clusters); });
}
