// The client driver's entry points that need no server: version, errors, and the
// lookups through which runtimes and libraries find every other function (cuGetProcAddress).
// Everything else is a stub that answers CUDA_ERROR_NOT_SUPPORTED and names itself (stubs.cpp)
// until its step of issue 29 serves it (doc/design/driver-client.md).
// The driver side of cuda.h: no macros that rename cuMemAlloc to cuMemAlloc_v2, and the first
// versions of the functions declared too (cuGetProcAddress with four parameters).
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include "driver.hpp"

#define FUNNEL_DRIVER_API extern "C" __attribute__((visibility("default")))

namespace {

CUresult lookup(const char* symbol, void** pfn, int version, cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  constexpr cuuint64_t kKnownFlags = CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if ((flags & ~kKnownFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  int found = 1;
  *pfn =
      funnel::driver::find_proc(symbol, version, (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0, found);
  if (status != nullptr) *status = static_cast<CUdriverProcAddressQueryResult>(found);
  return found == 0 ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

}  // namespace

// The mark of funnel's client driver: funnel-server refuses a libcuda.so.1 that has it.
FUNNEL_DRIVER_API const char funnel_client_driver[] = "funnel client driver";

FUNNEL_DRIVER_API CUresult cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = CUDA_VERSION;
  return CUDA_SUCCESS;
}

FUNNEL_DRIVER_API CUresult cuGetErrorName(CUresult error, const char** name) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto* e = funnel::driver::find_error(error);
  *name = e != nullptr ? e->name : nullptr;
  return e != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FUNNEL_DRIVER_API CUresult cuGetErrorString(CUresult error, const char** text) {
  if (text == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto* e = funnel::driver::find_error(error);
  *text = e != nullptr ? e->text : nullptr;
  return e != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FUNNEL_DRIVER_API CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                               CUdriverProcAddressQueryResult* status) {
  return lookup(symbol, pfn, version, flags, status);
}

FUNNEL_DRIVER_API CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  return lookup(symbol, pfn, version, flags, nullptr);
}
