// Device management.  Everything about a device is answered from the channel's
// device table (filled by the server at attach): no round trip.
#include <cstdlib>
#include <cstring>

#include "api.hpp"
#include "host_func.hpp"

using namespace funnel::client;
using funnel::ipc::DeviceRecord;
using funnel::ipc::kMaxDeviceAttributes;

namespace {

cudaError_t check_device(int device) noexcept {
  if (cudaError_t e = attach(); e != cudaSuccess) return e;
  if (device < 0 || device >= Runtime::get().device_count()) return cudaErrorInvalidDevice;
  return cudaSuccess;
}

int attr(const DeviceRecord& d, cudaDeviceAttr a) noexcept {
  const auto i = static_cast<uint32_t>(a);
  return i < kMaxDeviceAttributes ? d.attributes[i] : 0;
}

void fill_properties(cudaDeviceProp& p, const DeviceRecord& d) noexcept {
  std::memset(&p, 0, sizeof p);
  static_assert(sizeof p.name == sizeof d.name);
  std::memcpy(p.name, d.name, sizeof p.name);
  p.name[sizeof p.name - 1] = '\0';
  std::memcpy(p.uuid.bytes, d.uuid, sizeof p.uuid.bytes);
  p.totalGlobalMem = d.total_memory;
  auto sz = [&](cudaDeviceAttr a) { return static_cast<size_t>(static_cast<unsigned>(attr(d, a))); };
  p.sharedMemPerBlock = sz(cudaDevAttrMaxSharedMemoryPerBlock);
  p.regsPerBlock = attr(d, cudaDevAttrMaxRegistersPerBlock);
  p.warpSize = attr(d, cudaDevAttrWarpSize);
  p.memPitch = sz(cudaDevAttrMaxPitch);
  p.maxThreadsPerBlock = attr(d, cudaDevAttrMaxThreadsPerBlock);
  p.maxThreadsDim[0] = attr(d, cudaDevAttrMaxBlockDimX);
  p.maxThreadsDim[1] = attr(d, cudaDevAttrMaxBlockDimY);
  p.maxThreadsDim[2] = attr(d, cudaDevAttrMaxBlockDimZ);
  p.maxGridSize[0] = attr(d, cudaDevAttrMaxGridDimX);
  p.maxGridSize[1] = attr(d, cudaDevAttrMaxGridDimY);
  p.maxGridSize[2] = attr(d, cudaDevAttrMaxGridDimZ);
  p.totalConstMem = sz(cudaDevAttrTotalConstantMemory);
  p.major = attr(d, cudaDevAttrComputeCapabilityMajor);
  p.minor = attr(d, cudaDevAttrComputeCapabilityMinor);
  p.textureAlignment = sz(cudaDevAttrTextureAlignment);
  p.texturePitchAlignment = sz(cudaDevAttrTexturePitchAlignment);
  p.multiProcessorCount = attr(d, cudaDevAttrMultiProcessorCount);
  p.integrated = attr(d, cudaDevAttrIntegrated);
  p.canMapHostMemory = attr(d, cudaDevAttrCanMapHostMemory);
  p.maxTexture1D = attr(d, cudaDevAttrMaxTexture1DWidth);
  p.maxTexture2D[0] = attr(d, cudaDevAttrMaxTexture2DWidth);
  p.maxTexture2D[1] = attr(d, cudaDevAttrMaxTexture2DHeight);
  p.maxTexture3D[0] = attr(d, cudaDevAttrMaxTexture3DWidth);
  p.maxTexture3D[1] = attr(d, cudaDevAttrMaxTexture3DHeight);
  p.maxTexture3D[2] = attr(d, cudaDevAttrMaxTexture3DDepth);
  p.surfaceAlignment = sz(cudaDevAttrSurfaceAlignment);
  p.concurrentKernels = attr(d, cudaDevAttrConcurrentKernels);
  p.ECCEnabled = attr(d, cudaDevAttrEccEnabled);
  p.pciBusID = attr(d, cudaDevAttrPciBusId);
  p.pciDeviceID = attr(d, cudaDevAttrPciDeviceId);
  p.pciDomainID = attr(d, cudaDevAttrPciDomainId);
  p.tccDriver = attr(d, cudaDevAttrTccDriver);
  p.asyncEngineCount = attr(d, cudaDevAttrAsyncEngineCount);
  p.unifiedAddressing = attr(d, cudaDevAttrUnifiedAddressing);
  p.memoryBusWidth = attr(d, cudaDevAttrGlobalMemoryBusWidth);
  p.l2CacheSize = attr(d, cudaDevAttrL2CacheSize);
  p.persistingL2CacheMaxSize = attr(d, cudaDevAttrMaxPersistingL2CacheSize);
  p.maxThreadsPerMultiProcessor = attr(d, cudaDevAttrMaxThreadsPerMultiProcessor);
  p.streamPrioritiesSupported = attr(d, cudaDevAttrStreamPrioritiesSupported);
  p.globalL1CacheSupported = attr(d, cudaDevAttrGlobalL1CacheSupported);
  p.localL1CacheSupported = attr(d, cudaDevAttrLocalL1CacheSupported);
  p.sharedMemPerMultiprocessor = sz(cudaDevAttrMaxSharedMemoryPerMultiprocessor);
  p.regsPerMultiprocessor = attr(d, cudaDevAttrMaxRegistersPerMultiprocessor);
  p.managedMemory = attr(d, cudaDevAttrManagedMemory);
  p.isMultiGpuBoard = attr(d, cudaDevAttrIsMultiGpuBoard);
  p.multiGpuBoardGroupID = attr(d, cudaDevAttrMultiGpuBoardGroupID);
  p.hostNativeAtomicSupported = attr(d, cudaDevAttrHostNativeAtomicSupported);
  p.pageableMemoryAccess = attr(d, cudaDevAttrPageableMemoryAccess);
  p.concurrentManagedAccess = attr(d, cudaDevAttrConcurrentManagedAccess);
  p.computePreemptionSupported = attr(d, cudaDevAttrComputePreemptionSupported);
  p.canUseHostPointerForRegisteredMem = attr(d, cudaDevAttrCanUseHostPointerForRegisteredMem);
  p.cooperativeLaunch = attr(d, cudaDevAttrCooperativeLaunch);
  p.sharedMemPerBlockOptin = sz(cudaDevAttrMaxSharedMemoryPerBlockOptin);
  p.pageableMemoryAccessUsesHostPageTables = attr(d, cudaDevAttrPageableMemoryAccessUsesHostPageTables);
  p.directManagedMemAccessFromHost = attr(d, cudaDevAttrDirectManagedMemAccessFromHost);
  p.maxBlocksPerMultiProcessor = attr(d, cudaDevAttrMaxBlocksPerMultiprocessor);
  p.accessPolicyMaxWindowSize = attr(d, cudaDevAttrMaxAccessPolicyWindowSize);
  p.reservedSharedMemPerBlock = sz(cudaDevAttrReservedSharedMemoryPerBlock);
  p.hostRegisterSupported = attr(d, cudaDevAttrHostRegisterSupported);
  p.sparseCudaArraySupported = attr(d, cudaDevAttrSparseCudaArraySupported);
  p.hostRegisterReadOnlySupported = attr(d, cudaDevAttrHostRegisterReadOnlySupported);
  p.timelineSemaphoreInteropSupported = attr(d, cudaDevAttrTimelineSemaphoreInteropSupported);
  p.memoryPoolsSupported = attr(d, cudaDevAttrMemoryPoolsSupported);
  p.gpuDirectRDMASupported = attr(d, cudaDevAttrGPUDirectRDMASupported);
  p.gpuDirectRDMAFlushWritesOptions = static_cast<unsigned>(attr(d, cudaDevAttrGPUDirectRDMAFlushWritesOptions));
  p.gpuDirectRDMAWritesOrdering = attr(d, cudaDevAttrGPUDirectRDMAWritesOrdering);
  p.memoryPoolSupportedHandleTypes = static_cast<unsigned>(attr(d, cudaDevAttrMemoryPoolSupportedHandleTypes));
  p.deferredMappingCudaArraySupported = attr(d, cudaDevAttrDeferredMappingCudaArraySupported);
  p.ipcEventSupported = attr(d, cudaDevAttrIpcEventSupport);
  p.clusterLaunch = attr(d, cudaDevAttrClusterLaunch);
  p.hostNumaMultinodeIpcSupported = attr(d, cudaDevAttrHostNumaMultinodeIpcSupported);
  p.deviceNumaConfig = attr(d, cudaDevAttrNumaConfig);
  p.deviceNumaId = attr(d, cudaDevAttrNumaId);
  p.mpsEnabled = attr(d, cudaDevAttrMpsEnabled);
  p.hostNumaId = attr(d, cudaDevAttrHostNumaId);
}

}  // namespace

FUNNEL_API cudaError_t cudaGetDeviceCount(int* count) {
  return guarded(__func__, [&] {
    if (count == nullptr) return cudaErrorInvalidValue;
    *count = 0;
    if (cudaError_t e = attach(); e != cudaSuccess) return e;
    *count = Runtime::get().device_count();
    return *count == 0 ? cudaErrorNoDevice : cudaSuccess;
  });
}

FUNNEL_API cudaError_t cudaSetDevice(int device) {
  return guarded(__func__, [&] {
    if (cudaError_t e = check_device(device); e != cudaSuccess) return e;
    current_device() = device;
    return cudaSuccess;
  });
}

FUNNEL_API cudaError_t cudaGetDevice(int* device) {
  return guarded(__func__, [&] {
    if (device == nullptr) return cudaErrorInvalidValue;
    *device = current_device();
    return cudaSuccess;
  });
}

FUNNEL_API cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  return guarded(__func__, [&] {
    if (prop == nullptr) return cudaErrorInvalidValue;
    if (cudaError_t e = check_device(device); e != cudaSuccess) return e;
    fill_properties(*prop, Runtime::get().device(device));
    return cudaSuccess;
  });
}

FUNNEL_API cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr a, int device) {
  return guarded(__func__, [&] {
    if (value == nullptr || static_cast<uint32_t>(a) >= kMaxDeviceAttributes) return cudaErrorInvalidValue;
    if (cudaError_t e = check_device(device); e != cudaSuccess) return e;
    *value = attr(Runtime::get().device(device), a);
    return cudaSuccess;
  });
}

FUNNEL_API cudaError_t cudaDeviceGetPCIBusId(char* pciBusId, int len, int device) {
  return guarded(__func__, [&] {
    if (cudaError_t e = check_device(device); e != cudaSuccess) return e;
    return copy_text(pciBusId, len, Runtime::get().device(device).pci_bus_id);
  });
}

// The device whose PCI id is `pciBusId`, in any form the driver accepts: [domain:]bus:device.function
// in hex, any case.
FUNNEL_API cudaError_t cudaDeviceGetByPCIBusId(int* device, const char* pciBusId) {
  return guarded(__func__, [&] {
    if (device == nullptr || pciBusId == nullptr) return cudaErrorInvalidValue;
    if (cudaError_t e = attach(); e != cudaSuccess) return e;
    return device_by_pci_bus_id(pciBusId, *device);
  });
}

// The device that matches `prop` best: the compute capability nearest to the one asked for (the
// same major first), then the most multiprocessors; the fields left 0 or -1 ask for nothing.
FUNNEL_API cudaError_t cudaChooseDevice(int* device, const cudaDeviceProp* prop) {
  return guarded(__func__, [&] {
    if (device == nullptr || prop == nullptr) return cudaErrorInvalidValue;
    if (cudaError_t e = attach(); e != cudaSuccess) return e;
    Runtime& rt = Runtime::get();
    int best = 0;
    long best_score = -1;
    for (int d = 0; d < rt.device_count(); ++d) {
      const auto& r = rt.device(d);
      const int major = attr(r, cudaDevAttrComputeCapabilityMajor), minor = attr(r, cudaDevAttrComputeCapabilityMinor);
      long score = 0;
      if (prop->major > 0) score += major == prop->major ? 1000000 : 0;
      if (prop->major > 0 && prop->minor >= 0) score += 1000 - std::abs(minor - prop->minor);
      score = score * 1000 + attr(r, cudaDevAttrMultiProcessorCount);
      if (score > best_score) best = d, best_score = score;
    }
    *device = best;
    return cudaSuccess;
  });
}

// Explicit initialisation: the device checked and attached; with cudaInitDeviceFlagsAreValid its
// flags set as cudaSetDeviceFlags does.  The current device does not change.
FUNNEL_API cudaError_t cudaInitDevice(int device, unsigned int deviceFlags, unsigned int flags) {
  return guarded(__func__, [&] {
    if ((flags & ~unsigned{cudaInitDeviceFlagsAreValid}) != 0) return cudaErrorInvalidValue;
    if (cudaError_t e = check_device(device); e != cudaSuccess) return e;
    return (flags & cudaInitDeviceFlagsAreValid) != 0 ? set_context_flags(device, deviceFlags, "cudaInitDevice")
                                                      : cudaSuccess;
  });
}

// The cache and shared-memory bank preferences of a device: kept per process and answered back.
// They change nothing on the GPUs funnel serves (Hopper sizes L1 and shared memory per kernel,
// cudaFuncSetAttribute's carveout; its banks are four bytes), as under CUDA.
FUNNEL_API cudaError_t cudaDeviceSetCacheConfig(cudaFuncCache config) {
  return guarded(__func__, [&] {
    if (config < cudaFuncCachePreferNone || config > cudaFuncCachePreferEqual) return cudaErrorInvalidValue;
    if (cudaError_t e = check_device(current_device()); e != cudaSuccess) return e;
    cache_config(current_device()).store(config);
    return cudaSuccess;
  });
}

FUNNEL_API cudaError_t cudaDeviceGetCacheConfig(cudaFuncCache* config) {
  return guarded(__func__, [&] {
    if (config == nullptr) return cudaErrorInvalidValue;
    if (cudaError_t e = check_device(current_device()); e != cudaSuccess) return e;
    *config = static_cast<cudaFuncCache>(cache_config(current_device()).load());
    return cudaSuccess;
  });
}

FUNNEL_API cudaError_t cudaDeviceSetSharedMemConfig(cudaSharedMemConfig config) {
  return guarded(__func__, [&] {
    if (config < cudaSharedMemBankSizeDefault || config > cudaSharedMemBankSizeEightByte) return cudaErrorInvalidValue;
    return check_device(current_device());
  });
}

FUNNEL_API cudaError_t cudaDeviceGetSharedMemConfig(cudaSharedMemConfig* config) {
  return guarded(__func__, [&] {
    if (config == nullptr) return cudaErrorInvalidValue;
    if (cudaError_t e = check_device(current_device()); e != cudaSuccess) return e;
    *config = cudaSharedMemBankSizeFourByte;
    return cudaSuccess;
  });
}

FUNNEL_API cudaError_t cudaDeviceSynchronize() {
  return guarded(__func__, [&] {
    const int dev = current_device();
    const uint64_t uses = hf_uses();
    const cudaError_t e = to_cuda(Runtime::get().call(Opcode::DeviceSynchronize, dev, 0, nullptr, 0));
    if (e == cudaSuccess) hf_synchronized(dev, std::nullopt, uses);
    return e;
  });
}

FUNNEL_API cudaError_t cudaDeviceReset() {
  return guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    const int dev = current_device();
    const cudaError_t e = to_cuda(rt.call(Opcode::DeviceReset, dev, 0, nullptr, 0));
    // The server freed everything of ours on this device: forget it here too.
    rt.tables.drop_device(dev);
    return e;
  });
}

FUNNEL_API cudaError_t cudaDeviceSetLimit(cudaLimit limit, size_t value) {
  return guarded(__func__, [&] { return set_limit(current_device(), static_cast<uint32_t>(limit), value); });
}

FUNNEL_API cudaError_t cudaDeviceGetLimit(size_t* value, cudaLimit limit) {
  return guarded(__func__, [&] {
    if (value == nullptr) return cudaErrorInvalidValue;
    uint64_t v = 0;
    const cudaError_t e = get_limit(current_device(), static_cast<uint32_t>(limit), v);
    if (e == cudaSuccess) *value = v;
    return e;
  });
}

// The current device's context flags, shared with the driver front (set_context_flags says what
// they do in funnel).  cudaDeviceMapHost is always on, as since CUDA 11.
FUNNEL_API cudaError_t cudaSetDeviceFlags(unsigned int flags) {
  return guarded(__func__, [&] { return set_context_flags(current_device(), flags, "cudaSetDeviceFlags"); });
}

FUNNEL_API cudaError_t cudaGetDeviceFlags(unsigned int* flags) {
  return guarded(__func__, [&] {
    if (flags == nullptr) return cudaErrorInvalidValue;
    *flags = context_flags(current_device()).load() | cudaDeviceMapHost;
    return cudaSuccess;
  });
}

// The profiled range of this process on the current device (the server's context is profiled
// while any client's range is open).
FUNNEL_API cudaError_t cudaProfilerStart() {
  return guarded(__func__, [&] { return profiler(current_device(), true); });
}

FUNNEL_API cudaError_t cudaProfilerStop() {
  return guarded(__func__, [&] { return profiler(current_device(), false); });
}

FUNNEL_API cudaError_t cudaCtxResetPersistingL2Cache() {
  return guarded(__func__, [&] {
    if (cudaError_t e = attach(); e != cudaSuccess) return e;
    return reset_persisting_l2(current_device());
  });
}

FUNNEL_API cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  return guarded(__func__, [&] {
    if (cudaError_t e = attach(); e != cudaSuccess) return e;
    return can_access_peer(can, device, peer);
  });
}

// The list is checked and taken; funnel picks devices as cudaSetDevice says (the list's first
// device is not made current: CUDA's choice among them happens at context creation, which the
// server does for every client).
FUNNEL_API cudaError_t cudaSetValidDevices(int* devices, int len) {
  return guarded(__func__, [&] {
    if (len < 0 || (len > 0 && devices == nullptr)) return cudaErrorInvalidValue;
    if (cudaError_t e = attach(); e != cudaSuccess) return e;
    const int n = Runtime::get().device_count();
    for (int i = 0; i < len; ++i)
      if (devices[i] < 0 || devices[i] >= n) return cudaErrorInvalidDevice;
    return cudaSuccess;
  });
}

// Priorities are answered locally: 0 (least) and -5 (greatest), as an H100 reports them.
FUNNEL_API cudaError_t cudaDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  return guarded(__func__, [&] {
    if (leastPriority != nullptr) *leastPriority = 0;
    if (greatestPriority != nullptr) *greatestPriority = -5;
    return cudaSuccess;
  });
}

FUNNEL_API cudaError_t cudaDriverGetVersion(int* v) {
  return guarded(__func__, [&] {
    if (v == nullptr) return cudaErrorInvalidValue;
    *v = 13000;
    return cudaSuccess;
  });
}

FUNNEL_API cudaError_t cudaRuntimeGetVersion(int* v) {
  return guarded(__func__, [&] {
    if (v == nullptr) return cudaErrorInvalidValue;
    *v = 13000;
    return cudaSuccess;
  });
}

FUNNEL_API cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  return guarded(__func__, [&] {
    Reply r;
    const cudaError_t e = to_cuda(Runtime::get().call(Opcode::MemGetInfo, current_device(), 0, nullptr, 0, &r));
    if (e != cudaSuccess) return e;
    if (free_bytes != nullptr) *free_bytes = r.value[0];
    if (total != nullptr) *total = r.value[1];
    return cudaSuccess;
  });
}
