// funnel's client driver (libcuda.so.1): what its parts share. doc/design/driver-client.md.
#pragma once
#include <cstdint>
#include <string_view>

namespace funnel::driver {

// One answer of cuGetProcAddress (generated from the toolkit's headers: proc_table.inc).
struct ProcEntry {
  std::string_view name;    // what callers look up: "cuMemAlloc"
  int version;              // the CUDA version it came with (PFN_cuMemAlloc_v3020): 3020
  int per_thread;           // 1: the per-thread default stream variant (_ptds, _ptsz)
  std::string_view symbol;  // the function: "cuMemAlloc_v2"
  void (*function)();
};

struct ErrorEntry {  // from cuda.h's cudaError_enum (error_table.inc)
  int code;
  const char* name;
  const char* text;
};

// The answer of a function funnel does not serve yet: CUDA_ERROR_NOT_SUPPORTED, and
// "funnel: <name> is not supported yet" on stderr once per name.
int not_supported(const char* name) noexcept;

// cuGetProcAddress's search: the function for `name` at CUDA version `version`, the per-thread
// variant where `per_thread` and there is one. status: 0 found, 1 no such name, 2 the name
// exists only in later versions (CUdriverProcAddressQueryResult).
void* find_proc(std::string_view name, int version, bool per_thread, int& status) noexcept;

const ErrorEntry* find_error(int code) noexcept;

}  // namespace funnel::driver
