// cudaGetDriverEntryPoint(ByVersion): the driver functions a program (PyTorch, CuPy, a library)
// asks the runtime for are funnel's client driver's (lib/funnel-driver/libcuda.so.1 beside this
// library), never NVIDIA's: they share this process's one client core, so a CUstream, a pointer
// or an event from either front is the same thing in the other.
#include <cuda.h>
#include <dlfcn.h>

#include <filesystem>
#include <string>

#include "api.hpp"
#include "log.hpp"

using namespace funnel::client;

namespace {

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

// funnel's cuGetProcAddress_v2, from the driver in funnel-driver/ beside this library; nullptr
// (said once on stderr) if it cannot be loaded.
GetProcAddress funnel_get_proc_address() noexcept {
  static const GetProcAddress fn = []() -> GetProcAddress {
    Dl_info self{};
    if (dladdr(reinterpret_cast<void*>(&funnel_get_proc_address), &self) == 0 || self.dli_fname == nullptr) {
      log_error("funnel: cudaGetDriverEntryPoint: cannot tell where funnel's libcudart.so.13 lies");
      return nullptr;
    }
    const auto path = std::filesystem::path(self.dli_fname).parent_path() / "funnel-driver" / "libcuda.so.1";
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    void* sym = lib != nullptr ? dlsym(lib, "cuGetProcAddress_v2") : nullptr;
    if (sym == nullptr || dlsym(lib, "funnel_client_driver") == nullptr) {
      const char* why = dlerror();
      log_error(fmt::format("funnel: cudaGetDriverEntryPoint: cannot load funnel's client driver {} ({}): it is "
                            "part of funnel's installation, beside libcudart.so.13; reinstall funnel",
                            path.string(), why != nullptr ? why : "not funnel's driver"));
      return nullptr;
    }
    return reinterpret_cast<GetProcAddress>(sym);
  }();
  return fn;
}

cudaError_t entry_point(const char* symbol, void** fn, unsigned int version, unsigned long long flags,
                        cudaDriverEntryPointQueryResult* status, bool per_thread) noexcept {
  static_assert(static_cast<int>(cudaEnableLegacyStream) == CU_GET_PROC_ADDRESS_LEGACY_STREAM &&
                static_cast<int>(cudaEnablePerThreadDefaultStream) == CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
  static_assert(static_cast<int>(cudaDriverEntryPointSymbolNotFound) == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND &&
                static_cast<int>(cudaDriverEntryPointVersionNotSufficent) ==
                    CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  if (symbol == nullptr || fn == nullptr) return record(cudaErrorInvalidValue);
  if (flags & ~static_cast<unsigned long long>(cudaEnableLegacyStream | cudaEnablePerThreadDefaultStream))
    return record(cudaErrorInvalidValue);
  if (flags == cudaEnableDefault)
    flags = per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_LEGACY_STREAM;
  if (version > CUDART_VERSION) return record(cudaErrorInvalidValue);  // newer than our driver
  const GetProcAddress get = funnel_get_proc_address();
  if (get == nullptr) return record(cudaErrorNotSupported);
  CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  *fn = nullptr;
  const CUresult r = get(symbol, fn, static_cast<int>(version), flags, &found);
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_FOUND) return record(cudaErrorInvalidValue);
  if (r != CUDA_SUCCESS) *fn = nullptr;
  if (status != nullptr) *status = static_cast<cudaDriverEntryPointQueryResult>(found);
  return cudaSuccess;  // a symbol not found is a status, not an error (as CUDA)
}

}  // namespace

FUNNEL_API cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned int version,
                                                        unsigned long long flags,
                                                        cudaDriverEntryPointQueryResult* status) {
  return entry_point(symbol, fn, version, flags, status, false);
}
FUNNEL_API cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char* symbol, void** fn, unsigned int version,
                                                             unsigned long long flags,
                                                             cudaDriverEntryPointQueryResult* status) {
  return entry_point(symbol, fn, version, flags, status, true);
}
// The unversioned forms ask as of the runtime's own version.
FUNNEL_API cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** fn, unsigned long long flags,
                                               cudaDriverEntryPointQueryResult* status) {
  return entry_point(symbol, fn, CUDART_VERSION, flags, status, false);
}
FUNNEL_API cudaError_t cudaGetDriverEntryPoint_ptsz(const char* symbol, void** fn, unsigned long long flags,
                                                    cudaDriverEntryPointQueryResult* status) {
  return entry_point(symbol, fn, CUDART_VERSION, flags, status, true);
}
