// Loading the CUDA driver (dlopen + cuGetProcAddress) and mapping its results to funnel
// Status values: doc/design/cuda-backend.md, "Loading the driver" and "Errors".
// GCC 12/13 at -O2/-O3 report a false -Warray-bounds inside fmt 9's inlined float
// formatting (libstdc++ memmove, reached from spdlog calls).  The pragma must come before
// the includes: these middle-end warnings take the state at the header's location.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic ignored "-Warray-bounds"
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif
#include <dlfcn.h>

#include <stdexcept>
#include <string>

#include <spdlog/spdlog.h>

#include "backend/cuda/driver.hpp"

namespace funnel::server::cuda {

const char* error_name(const Driver& d, CUresult r) noexcept {
  const char* s = nullptr;
  if (d.cuGetErrorName == nullptr || d.cuGetErrorName(r, &s) != CUDA_SUCCESS || s == nullptr) {
    return "CUDA_ERROR_UNRECOGNIZED";
  }
  return s;
}

const char* error_string(const Driver& d, CUresult r) noexcept {
  const char* s = nullptr;
  if (d.cuGetErrorString == nullptr || d.cuGetErrorString(r, &s) != CUDA_SUCCESS || s == nullptr) {
    return "unrecognized error";
  }
  return s;
}

// CUresult -> funnel Status (cudaError_t numbers).
Status to_status(CUresult r) noexcept {
  switch (r) {
    case CUDA_SUCCESS: return Status::Success;
    case CUDA_ERROR_INVALID_VALUE: return Status::InvalidValue;
    case CUDA_ERROR_OUT_OF_MEMORY: return Status::MemoryAllocation;
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED: return Status::InitializationError;
    case CUDA_ERROR_NO_DEVICE: return Status::NoDevice;
    case CUDA_ERROR_INVALID_DEVICE: return Status::InvalidDevice;
    case CUDA_ERROR_DEVICE_UNAVAILABLE: return Status::DevicesUnavailable;
    case CUDA_ERROR_UNSUPPORTED_LIMIT: return Status::UnsupportedLimit;
    case CUDA_ERROR_OPERATING_SYSTEM: return Status::OperatingSystem;
    case CUDA_ERROR_INVALID_HANDLE:
    case CUDA_ERROR_NOT_FOUND:
    case CUDA_ERROR_INVALID_CONTEXT:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED: return Status::InvalidResourceHandle;
    case CUDA_ERROR_ILLEGAL_STATE: return Status::IllegalState;
    case CUDA_ERROR_NOT_READY: return Status::NotReady;
    case CUDA_ERROR_INVALID_IMAGE:
    case CUDA_ERROR_INVALID_PTX:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION: return Status::InvalidKernelImage;
    case CUDA_ERROR_NO_BINARY_FOR_GPU: return Status::NoKernelImageForDevice;
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: return Status::LaunchOutOfResources;
    case CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE: return Status::CooperativeLaunchTooLarge;
    // Kernel exceptions: sticky (ipc::is_sticky), as in CUDA.
    case CUDA_ERROR_ILLEGAL_ADDRESS: return Status::IllegalAddress;
    case CUDA_ERROR_LAUNCH_TIMEOUT: return Status::LaunchTimeout;
    case CUDA_ERROR_ASSERT: return Status::Assert;
    case CUDA_ERROR_HARDWARE_STACK_ERROR: return Status::HardwareStackError;
    case CUDA_ERROR_ILLEGAL_INSTRUCTION: return Status::IllegalInstruction;
    case CUDA_ERROR_MISALIGNED_ADDRESS: return Status::MisalignedAddress;
    case CUDA_ERROR_INVALID_ADDRESS_SPACE: return Status::InvalidAddressSpace;
    case CUDA_ERROR_INVALID_PC: return Status::InvalidPc;
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_ECC_UNCORRECTABLE: return Status::LaunchFailure;
    case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED:
    case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED: return Status::InvalidValue;
    case CUDA_ERROR_NOT_PERMITTED: return Status::NotPermitted;
    case CUDA_ERROR_NOT_SUPPORTED: return Status::NotSupported;
    case CUDA_ERROR_TIMEOUT: return Status::Timeout;
    case CUDA_ERROR_INVALID_CLUSTER_SIZE: return Status::InvalidClusterSize;
    default: return Status::Unknown;
  }
}

Status check_failed(const Driver& d, const char* call, CUresult r, Log log) noexcept {
  if (log == Log::Errors && r != CUDA_ERROR_NOT_READY) {
    spdlog::error("cuda: {} failed: {} ({}: {})", call, error_name(d, r), static_cast<int>(r),
                  error_string(d, r));
  }
  return to_status(r);
}

void fail(const std::string& what) { throw std::runtime_error(what); }

namespace {

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

template <typename Pfn>
void resolve(GetProcAddress gpa, const char* symbol, int version, Pfn& out) {
  void* p = nullptr;
  CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  const CUresult r = gpa(symbol, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, &q);
  if (r != CUDA_SUCCESS || q != CU_GET_PROC_ADDRESS_SUCCESS || p == nullptr) {
    fail(std::string("the NVIDIA driver has no usable ") + symbol + " for CUDA " +
         std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10) +
         " (cuGetProcAddress result " + std::to_string(static_cast<int>(r)) + ", status " +
         std::to_string(static_cast<int>(q)) +
         "): update the NVIDIA driver to one for CUDA 13 (R580 or newer) or use --backend sim");
  }
  out = reinterpret_cast<Pfn>(p);
}

}  // namespace

Driver load_driver() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    fail(std::string("no NVIDIA driver (libcuda.so.1) found (") + (why ? why : "dlopen failed") +
         "): run on a GPU node or use --backend sim");
  }
  if (dlsym(lib, "funnel_client_driver") != nullptr) {
    Dl_info info{};
    const bool named = dladdr(dlsym(lib, "funnel_client_driver"), &info) != 0 && info.dli_fname != nullptr;
    fail(std::string("the libcuda.so.1 found first is funnel's client driver (") + (named ? info.dli_fname : "?") +
         "), not the NVIDIA driver: take funnel's lib/funnel-driver out of the server's LD_LIBRARY_PATH");
  }
  void* sym = dlsym(lib, "cuGetProcAddress_v2");
  if (sym == nullptr) {
    fail("the NVIDIA driver is too old (libcuda.so.1 has no cuGetProcAddress_v2): funnel needs a "
         "driver for CUDA 13 (R580 or newer); update the driver or use --backend sim");
  }
  const auto gpa = reinterpret_cast<GetProcAddress>(sym);

  Driver d;
  // cuGetProcAddress refuses versions above the driver's own, so ask for the version first
  // with the version that introduced it.
  resolve(gpa, "cuDriverGetVersion", 2020, d.cuDriverGetVersion);
  int version = 0;
  if (d.cuDriverGetVersion(&version) != CUDA_SUCCESS) version = 0;
  if (version < kDriverApiVersion) {
    fail("the NVIDIA driver supports CUDA " + std::to_string(version / 1000) + "." +
         std::to_string(version % 1000 / 10) +
         " but funnel needs CUDA 13.0 or newer: update the driver (R580 or newer) or use --backend sim");
  }
#define FUNNEL_CU_RESOLVE(name, pfn) resolve(gpa, #name, kDriverApiVersion, d.name);
  FUNNEL_CU_FUNCTIONS(FUNNEL_CU_RESOLVE)
#undef FUNNEL_CU_RESOLVE
  return d;
}

}  // namespace funnel::server::cuda
