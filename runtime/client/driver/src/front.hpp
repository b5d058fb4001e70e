// The driver front over the client core: what device.cpp and memory.cpp share.
#pragma once
// The driver side of cuda.h: no macros that rename cuMemAlloc to cuMemAlloc_v2, and the first
// versions of the functions declared too.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <memory>

#include "api.hpp"  // the client core: Runtime, StreamRef, current_device()
#include "driver.hpp"

#define FUNNEL_DRIVER_API extern "C" __attribute__((visibility("default")))

namespace funnel::client {
struct NodeObj;
}

namespace funnel::driver {

// A graph kernel node from the driver's parameters (modules.cpp: the front's functions).
CUresult kernel_node(const CUDA_KERNEL_NODE_PARAMS* p, std::unique_ptr<client::NodeObj>& out);

// The core answers in cudaError_t numbers; most are the CUresult of the same meaning (CUDA
// aligned them), the runtime-only ones are mapped here.
CUresult to_cu(cudaError_t e) noexcept;
inline CUresult to_cu(ipc::Status s) noexcept { return to_cu(client::to_cuda(s)); }

// Attached and ready (the driver's cuInit attaches); the error every call returns otherwise.
CUresult ready() noexcept;

// The device of the calling thread's current context; CUDA_ERROR_INVALID_CONTEXT without one.
CUresult current(int& device) noexcept;
// current() and then ready(): the device of the current context, attached.
CUresult in_context(int& device) noexcept;

// The handle of device `device`'s one context.
CUcontext context_of(int device) noexcept;

// CUDA_ERROR_NOT_SUPPORTED for one value of a call funnel serves otherwise:
// "funnel: <call>(<value>) is not supported yet" once per call and value.
CUresult not_supported_detail(const char* call, int value) noexcept;

}  // namespace funnel::driver
