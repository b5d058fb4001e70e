// The CUDA driver API, opened at run time (dlopen "libcuda.so.1") so that funnel-server
// starts on machines without a driver, and the one place every driver call's result goes
// through (check, FUNNEL_CU).  Included only by the cuda backend (backend/cuda/).
//
// Every entry point is resolved with cuGetProcAddress_v2 by its BASE name for CUDA 13.0.
// The driver then returns the newest ABI of that symbol introduced at or before 13.0, so
// each pointer's type must be the cudaTypedefs.h PFN of exactly that version (the highest
// _vNNNNN <= 13000).  Careful: that is not always what cuda.h's macros pick: at 13000
// "cuCtxSynchronize" is cuCtxSynchronize_v2(CUcontext), while cuda.h's cuCtxSynchronize is
// the old (void) one.  The static_asserts below check each PFN against the declaration
// the header's macros select, so a mismatch shows up at compile time.
#pragma once
#include <cuda.h>
#include <cudaProfiler.h>
#include <cudaProfilerTypedefs.h>
#include <cudaTypedefs.h>

#include <string>
#include <type_traits>

#include "funnel/server/backend.hpp"

namespace funnel::server::cuda {

inline constexpr int kDriverApiVersion = 13000;  // CUDA 13.0

static_assert(static_cast<uint32_t>(CU_DEVICE_ATTRIBUTE_MAX) <= ipc::kMaxDeviceAttributes,
              "DeviceRecord::attributes is too small for this cuda.h");
static_assert(sizeof(CUdeviceptr) == sizeof(uint64_t));
static_assert(sizeof(size_t) == sizeof(uint64_t));

// X(base name, PFN type of the version that cuGetProcAddress returns at 13000)
#define FUNNEL_CU_FUNCTIONS(X)                                          \
  X(cuInit, PFN_cuInit_v2000)                                           \
  X(cuGetErrorName, PFN_cuGetErrorName_v6000)                           \
  X(cuGetErrorString, PFN_cuGetErrorString_v6000)                       \
  X(cuDeviceGetCount, PFN_cuDeviceGetCount_v2000)                       \
  X(cuDeviceGet, PFN_cuDeviceGet_v2000)                                 \
  X(cuDeviceGetName, PFN_cuDeviceGetName_v2000)                         \
  X(cuDeviceGetUuid, PFN_cuDeviceGetUuid_v11040)                        \
  X(cuDeviceTotalMem, PFN_cuDeviceTotalMem_v3020)                       \
  X(cuDeviceGetPCIBusId, PFN_cuDeviceGetPCIBusId_v4010)                 \
  X(cuDeviceGetAttribute, PFN_cuDeviceGetAttribute_v2000)               \
  X(cuDevicePrimaryCtxRetain, PFN_cuDevicePrimaryCtxRetain_v7000)       \
  X(cuDevicePrimaryCtxRelease, PFN_cuDevicePrimaryCtxRelease_v11000)    \
  X(cuDevicePrimaryCtxReset, PFN_cuDevicePrimaryCtxReset_v11000)        \
  X(cuCtxSetCurrent, PFN_cuCtxSetCurrent_v4000)                         \
  X(cuCtxGetStreamPriorityRange, PFN_cuCtxGetStreamPriorityRange_v5050) \
  X(cuCtxSetLimit, PFN_cuCtxSetLimit_v3010)                             \
  X(cuCtxGetLimit, PFN_cuCtxGetLimit_v3010)                             \
  X(cuMemGetInfo, PFN_cuMemGetInfo_v3020)                               \
  X(cuMemAlloc, PFN_cuMemAlloc_v3020)                                   \
  X(cuMemFree, PFN_cuMemFree_v3020)                                     \
  X(cuMemAllocAsync, PFN_cuMemAllocAsync_v11020)                        \
  X(cuMemFreeAsync, PFN_cuMemFreeAsync_v11020)                          \
  X(cuMemAddressReserve, PFN_cuMemAddressReserve_v10020)                \
  X(cuMemAddressFree, PFN_cuMemAddressFree_v10020)                      \
  X(cuMemCreate, PFN_cuMemCreate_v10020)                                \
  X(cuMemRelease, PFN_cuMemRelease_v10020)                              \
  X(cuMemMap, PFN_cuMemMap_v10020)                                      \
  X(cuMemUnmap, PFN_cuMemUnmap_v10020)                                  \
  X(cuMemSetAccess, PFN_cuMemSetAccess_v10020)                          \
  X(cuMemHostRegister, PFN_cuMemHostRegister_v6050)                     \
  X(cuMemHostUnregister, PFN_cuMemHostUnregister_v4000)                 \
  X(cuStreamCreateWithPriority, PFN_cuStreamCreateWithPriority_v5050)   \
  X(cuStreamDestroy, PFN_cuStreamDestroy_v4000)                         \
  X(cuStreamQuery, PFN_cuStreamQuery_v2000)                             \
  X(cuStreamSynchronize, PFN_cuStreamSynchronize_v2000)                 \
  X(cuStreamWaitEvent, PFN_cuStreamWaitEvent_v3020)                     \
  X(cuEventCreate, PFN_cuEventCreate_v2000)                             \
  X(cuEventDestroy, PFN_cuEventDestroy_v4000)                           \
  X(cuEventRecord, PFN_cuEventRecord_v2000)                             \
  X(cuStreamWriteValue32, PFN_cuStreamWriteValue32_v11070)              \
  X(cuStreamBatchMemOp, PFN_cuStreamBatchMemOp_v11070)                  \
  X(cuStreamWriteValue64, PFN_cuStreamWriteValue64_v11070)              \
  X(cuStreamWaitValue64, PFN_cuStreamWaitValue64_v11070)                \
  X(cuEventQuery, PFN_cuEventQuery_v2000)                               \
  X(cuEventElapsedTime, PFN_cuEventElapsedTime_v12080)                  \
  X(cuMemcpyHtoDAsync, PFN_cuMemcpyHtoDAsync_v3020)                     \
  X(cuMemcpyDtoHAsync, PFN_cuMemcpyDtoHAsync_v3020)                     \
  X(cuMemcpyDtoDAsync, PFN_cuMemcpyDtoDAsync_v3020)                     \
  X(cuMemcpyAsync, PFN_cuMemcpyAsync_v4000)                             \
  X(cuMemcpy2DAsync, PFN_cuMemcpy2DAsync_v3020)                         \
  X(cuMemcpy3DAsync, PFN_cuMemcpy3DAsync_v3020)                         \
  X(cuArray3DCreate, PFN_cuArray3DCreate_v3020)                         \
  X(cuArrayDestroy, PFN_cuArrayDestroy_v2000)                           \
  X(cuMipmappedArrayCreate, PFN_cuMipmappedArrayCreate_v5000)           \
  X(cuMipmappedArrayGetLevel, PFN_cuMipmappedArrayGetLevel_v5000)       \
  X(cuMipmappedArrayDestroy, PFN_cuMipmappedArrayDestroy_v5000)         \
  X(cuTexObjectCreate, PFN_cuTexObjectCreate_v5000)                     \
  X(cuTexObjectDestroy, PFN_cuTexObjectDestroy_v5000)                   \
  X(cuSurfObjectCreate, PFN_cuSurfObjectCreate_v5000)                   \
  X(cuSurfObjectDestroy, PFN_cuSurfObjectDestroy_v5000)                 \
  X(cuMemsetD8Async, PFN_cuMemsetD8Async_v3020)                         \
  X(cuMemsetD2D8Async, PFN_cuMemsetD2D8Async_v3020)                     \
  X(cuMemsetD16Async, PFN_cuMemsetD16Async_v3020)                       \
  X(cuMemsetD2D16Async, PFN_cuMemsetD2D16Async_v3020)                   \
  X(cuMemsetD32Async, PFN_cuMemsetD32Async_v3020)                       \
  X(cuMemsetD2D32Async, PFN_cuMemsetD2D32Async_v3020)                   \
  X(cuLibraryLoadData, PFN_cuLibraryLoadData_v12000)                   \
  X(cuLibraryUnload, PFN_cuLibraryUnload_v12000)                       \
  X(cuLibraryGetKernel, PFN_cuLibraryGetKernel_v12000)                 \
  X(cuLibraryGetGlobal, PFN_cuLibraryGetGlobal_v12000)                 \
  X(cuLibraryGetManaged, PFN_cuLibraryGetManaged_v12000)               \
  X(cuKernelGetFunction, PFN_cuKernelGetFunction_v12000)               \
  X(cuKernelGetParamInfo, PFN_cuKernelGetParamInfo_v12040)             \
  X(cuKernelGetAttribute, PFN_cuKernelGetAttribute_v12000)             \
  X(cuKernelSetAttribute, PFN_cuKernelSetAttribute_v12000)             \
  X(cuKernelSetCacheConfig, PFN_cuKernelSetCacheConfig_v12000)         \
  X(cuLaunchKernelEx, PFN_cuLaunchKernelEx_v11060)                     \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags,              \
    PFN_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags_v7000)    \
  X(cuStreamWaitValue32, PFN_cuStreamWaitValue32_v11070)                \
  X(cuOccupancyAvailableDynamicSMemPerBlock, PFN_cuOccupancyAvailableDynamicSMemPerBlock_v10020) \
  X(cuOccupancyMaxActiveClusters, PFN_cuOccupancyMaxActiveClusters_v11070) \
  X(cuOccupancyMaxPotentialClusterSize, PFN_cuOccupancyMaxPotentialClusterSize_v11070) \
  X(cuCtxResetPersistingL2Cache, PFN_cuCtxResetPersistingL2Cache_v11000) \
  X(cuTensorMapEncodeTiled, PFN_cuTensorMapEncodeTiled_v12000)         \
  X(cuStreamSetAttribute, PFN_cuStreamSetAttribute_v11000)             \
  X(cuDeviceGetDevResource, PFN_cuDeviceGetDevResource_v12040)             \
  X(cuDevSmResourceSplitByCount, PFN_cuDevSmResourceSplitByCount_v12040)   \
  X(cuDevResourceGenerateDesc, PFN_cuDevResourceGenerateDesc_v12040)       \
  X(cuGreenCtxCreate, PFN_cuGreenCtxCreate_v12040)                         \
  X(cuGreenCtxDestroy, PFN_cuGreenCtxDestroy_v12040)                       \
  X(cuGreenCtxStreamCreate, PFN_cuGreenCtxStreamCreate_v12050)              \
  X(cuGraphCreate, PFN_cuGraphCreate_v10000)                               \
  X(cuGraphDestroy, PFN_cuGraphDestroy_v10000)                             \
  X(cuGraphAddKernelNode, PFN_cuGraphAddKernelNode_v12000)                 \
  X(cuGraphInstantiateWithFlags, PFN_cuGraphInstantiateWithFlags_v11040)   \
  X(cuGraphExecKernelNodeSetParams, PFN_cuGraphExecKernelNodeSetParams_v12000) \
  X(cuGraphExecDestroy, PFN_cuGraphExecDestroy_v10000)                     \
  X(cuGraphLaunch, PFN_cuGraphLaunch_v10000)                               \
  X(cuGraphAddEmptyNode, PFN_cuGraphAddEmptyNode_v10000)                   \
  X(cuGraphAddMemcpyNode, PFN_cuGraphAddMemcpyNode_v10000)                 \
  X(cuGraphAddMemsetNode, PFN_cuGraphAddMemsetNode_v10000)                 \
  X(cuGraphAddEventRecordNode, PFN_cuGraphAddEventRecordNode_v11010)       \
  X(cuGraphAddEventWaitNode, PFN_cuGraphAddEventWaitNode_v11010)           \
  X(cuGraphExecUpdate, PFN_cuGraphExecUpdate_v12000)                       \
  X(cuGraphUpload, PFN_cuGraphUpload_v11010)                               \
  X(cuGraphAddBatchMemOpNode, PFN_cuGraphAddBatchMemOpNode_v11070)         \
  X(cuGraphConditionalHandleCreate, PFN_cuGraphConditionalHandleCreate_v12030) \
  X(cuGraphAddNode, PFN_cuGraphAddNode_v12030)                             \
  X(cuGraphDestroyNode, PFN_cuGraphDestroyNode_v10000)                     \
  X(cuGraphNodeGetDependencies, PFN_cuGraphNodeGetDependencies_v12030)     \
  X(cuGraphAddDependencies, PFN_cuGraphAddDependencies_v12030)             \
  X(cuGraphRemoveDependencies, PFN_cuGraphRemoveDependencies_v12030)       \
  X(cuProfilerStart, PFN_cuProfilerStart_v4000)                            \
  X(cuProfilerStop, PFN_cuProfilerStop_v4000)

// The driver's entry points.  Filled by load_driver().
struct Driver {
#define FUNNEL_CU_MEMBER(name, pfn) pfn name = nullptr;
  FUNNEL_CU_FUNCTIONS(FUNNEL_CU_MEMBER)
#undef FUNNEL_CU_MEMBER
  PFN_cuDriverGetVersion_v2020 cuDriverGetVersion = nullptr;
};

// Each PFN must have the signature of the declaration cuda.h's macros select (decltype is
// unevaluated: no link-time reference to libcuda).
#define FUNNEL_CU_CHECK_TYPE(name, pfn)                                    \
  static_assert(std::is_same_v<pfn, decltype(&::name)>, #name ": the PFN " \
                                                        "version does not match cuda.h");
FUNNEL_CU_FUNCTIONS(FUNNEL_CU_CHECK_TYPE)
#undef FUNNEL_CU_CHECK_TYPE

// Opens libcuda.so.1 and resolves every entry point.  The library is never closed:
// unloading the driver while the process lives is not supported by NVIDIA.
Driver load_driver();

const char* error_name(const Driver& d, CUresult r) noexcept;
const char* error_string(const Driver& d, CUresult r) noexcept;
// CUresult -> funnel Status (cudaError_t numbers).
Status to_status(CUresult r) noexcept;

enum class Log { Errors, Quiet };

// check()'s failure path: logs (unless quiet or NOT_READY) and maps the result.
Status check_failed(const Driver& d, const char* call, CUresult r, Log log) noexcept;

// The one place every driver call's result goes through.  NOT_READY is an answer, not an
// error, and is never logged.
inline Status check(const Driver& d, const char* call, CUresult r, Log log = Log::Errors) noexcept {
  if (r == CUDA_SUCCESS) return Status::Success;
  return check_failed(d, call, r, log);
}

// Calls a driver entry point through check().  `fn` is a member of Driver.
#define FUNNEL_CU(drv, fn, ...) ::funnel::server::cuda::check((drv), #fn, (drv).fn(__VA_ARGS__))
#define FUNNEL_CU_QUIET(drv, fn, ...) \
  ::funnel::server::cuda::check((drv), #fn, (drv).fn(__VA_ARGS__), ::funnel::server::cuda::Log::Quiet)

// Start-up errors: a std::runtime_error that names the problem and the fix.
[[noreturn]] void fail(const std::string& what);

}  // namespace funnel::server::cuda
