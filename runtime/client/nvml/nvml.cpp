// funnel's libnvidia-ml.so.1 (lib/funnel-driver/, beside funnel's libcuda.so.1; issue 31): the
// NVML calls Python frameworks make to count and name the GPUs, answered from funnel's driver,
// so that no client process opens /dev/nvidia* for them (NVIDIA's NVML opens the GPU's device
// files, which funnel's rule counts as a context of one's own).  PyTorch's
// torch.cuda.device_count() calls nvmlInit and nvmlDeviceGetCount_v2 (or the UUIDs, where
// CUDA_VISIBLE_DEVICES names GPUs by UUID).  What is served: init and shutdown, the device count,
// handles by index or PCI bus id, a device's index, name, UUID and memory, the CUDA driver version, the kernel
// module's version, and the error strings; every other function NVIDIA's NVML exports is a loud stub (stubs.cpp):
// NVML_ERROR_NOT_SUPPORTED, and its name once on stderr.  doc/design/driver-client.md, "NVML".
#include <cuda.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cctype>
#include <cstring>

#define FUNNEL_NVML_API extern "C" __attribute__((visibility("default")))

namespace {

// The ABI of NVML's header (nvml.h, not in the toolkit here): a return code, an opaque device.
using nvmlReturn_t = int;
constexpr nvmlReturn_t kSuccess = 0, kUninitialized = 1, kInvalidArgument = 2, kNotSupported = 3, kNotFound = 6,
                       kInsufficientSize = 7, kDriverNotLoaded = 9, kUnknown = 999;
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
struct nvmlMemory_t {
  unsigned long long total, free, used;
};

std::atomic<int> g_inits{0};

// A device's handle is its ordinal + 1 (never null); the ordinal is funnel's driver's.
nvmlDevice_t handle_of(int ordinal) { return reinterpret_cast<nvmlDevice_t>(static_cast<uintptr_t>(ordinal) + 1); }
nvmlReturn_t ordinal_of(nvmlDevice_t d, CUdevice& out) {
  if (g_inits.load() <= 0) return kUninitialized;
  const auto v = reinterpret_cast<uintptr_t>(d);
  int count = 0;
  if (v == 0 || cuDeviceGetCount(&count) != CUDA_SUCCESS || v > static_cast<uintptr_t>(count)) return kInvalidArgument;
  return cuDeviceGet(&out, static_cast<int>(v - 1)) == CUDA_SUCCESS ? kSuccess : kUnknown;
}
nvmlReturn_t copy_text(const char* text, char* out, unsigned length) {
  if (out == nullptr) return kInvalidArgument;
  if (std::strlen(text) + 1 > length) return kInsufficientSize;
  std::memcpy(out, text, std::strlen(text) + 1);
  return kSuccess;
}

}  // namespace

FUNNEL_NVML_API nvmlReturn_t nvmlInitWithFlags(unsigned /*flags*/) {
  // cuInit attaches to the job's server (or starts one, as any CUDA call of the process would).
  if (cuInit(0) != CUDA_SUCCESS) return kDriverNotLoaded;
  g_inits.fetch_add(1);
  return kSuccess;
}
FUNNEL_NVML_API nvmlReturn_t nvmlInit_v2() { return nvmlInitWithFlags(0); }
FUNNEL_NVML_API nvmlReturn_t nvmlInit() { return nvmlInitWithFlags(0); }
FUNNEL_NVML_API nvmlReturn_t nvmlShutdown() {
  int n = g_inits.load();
  while (n > 0 && !g_inits.compare_exchange_weak(n, n - 1)) {
  }
  return n > 0 ? kSuccess : kUninitialized;
}

FUNNEL_NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* count) {
  if (g_inits.load() <= 0) return kUninitialized;
  if (count == nullptr) return kInvalidArgument;
  int n = 0;
  if (cuDeviceGetCount(&n) != CUDA_SUCCESS) return kUnknown;
  *count = static_cast<unsigned>(n);
  return kSuccess;
}
FUNNEL_NVML_API nvmlReturn_t nvmlDeviceGetCount(unsigned* count) { return nvmlDeviceGetCount_v2(count); }

FUNNEL_NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t* device) {
  if (g_inits.load() <= 0) return kUninitialized;
  unsigned n = 0;
  if (device == nullptr || nvmlDeviceGetCount_v2(&n) != kSuccess || index >= n) return kInvalidArgument;
  *device = handle_of(static_cast<int>(index));
  return kSuccess;
}
FUNNEL_NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned index, nvmlDevice_t* device) {
  return nvmlDeviceGetHandleByIndex_v2(index, device);
}
// A PCI bus id, "domain:bus:device.function" in hex (NVML writes the domain with 8 digits, the
// driver with 4) or without the domain, as four numbers; false when it is neither.
bool parse_bus_id(const char* text, std::array<unsigned, 4>& out) {
  char tail = 0;
  if (std::sscanf(text, "%x:%x:%x.%x%c", &out[0], &out[1], &out[2], &out[3], &tail) == 4) return true;
  out[0] = 0;
  return std::sscanf(text, "%x:%x.%x%c", &out[1], &out[2], &out[3], &tail) == 3;
}

// The device at a PCI bus id (JAX asks), by the driver's bus ids.
FUNNEL_NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, nvmlDevice_t* device) {
  if (g_inits.load() <= 0) return kUninitialized;
  std::array<unsigned, 4> want{};
  if (bus_id == nullptr || device == nullptr || !parse_bus_id(bus_id, want)) return kInvalidArgument;
  int n = 0;
  if (cuDeviceGetCount(&n) != CUDA_SUCCESS) return kUnknown;
  for (int i = 0; i < n; ++i) {
    CUdevice d = 0;
    std::array<char, 32> text{};
    std::array<unsigned, 4> got{};
    if (cuDeviceGet(&d, i) == CUDA_SUCCESS && cuDeviceGetPCIBusId(text.data(), text.size(), d) == CUDA_SUCCESS &&
        parse_bus_id(text.data(), got) && got == want) {
      *device = handle_of(i);
      return kSuccess;
    }
  }
  return kNotFound;
}
FUNNEL_NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* bus_id, nvmlDevice_t* device) {
  return nvmlDeviceGetHandleByPciBusId_v2(bus_id, device);
}

FUNNEL_NVML_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned* index) {
  CUdevice d = 0;
  if (nvmlReturn_t r = ordinal_of(device, d); r != kSuccess) return r;
  if (index == nullptr) return kInvalidArgument;
  *index = static_cast<unsigned>(d);
  return kSuccess;
}

FUNNEL_NVML_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned length) {
  CUdevice d = 0;
  if (nvmlReturn_t r = ordinal_of(device, d); r != kSuccess) return r;
  std::array<char, 256> text{};
  if (cuDeviceGetName(text.data(), static_cast<int>(text.size()), d) != CUDA_SUCCESS) return kUnknown;
  return copy_text(text.data(), name, length);
}

// "GPU-" and the UUID in the 8-4-4-4-12 form, as NVML (and nvidia-smi -L) write it.
FUNNEL_NVML_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned length) {
  CUdevice d = 0;
  if (nvmlReturn_t r = ordinal_of(device, d); r != kSuccess) return r;
  CUuuid id{};
  if (cuDeviceGetUuid(&id, d) != CUDA_SUCCESS) return kUnknown;
  const auto* b = reinterpret_cast<const unsigned char*>(id.bytes);
  char text[48];
  std::snprintf(text, sizeof text, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return copy_text(text, uuid, length);
}

// The device's memory as funnel's driver sees it for this process (its share under
// FUNNEL_DEVICE_MEM_LIMIT), from the device's primary context.
FUNNEL_NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  CUdevice d = 0;
  if (nvmlReturn_t r = ordinal_of(device, d); r != kSuccess) return r;
  if (memory == nullptr) return kInvalidArgument;
  CUcontext ctx = nullptr;
  if (cuDevicePrimaryCtxRetain(&ctx, d) != CUDA_SUCCESS) return kUnknown;
  size_t free_bytes = 0, total = 0;
  CUresult r = cuCtxPushCurrent(ctx);
  if (r == CUDA_SUCCESS) {
    r = cuMemGetInfo(&free_bytes, &total);
    CUcontext popped = nullptr;
    cuCtxPopCurrent(&popped);
  }
  cuDevicePrimaryCtxRelease(d);
  if (r != CUDA_SUCCESS) return kUnknown;
  *memory = {total, free_bytes, total - free_bytes};
  return kSuccess;
}

FUNNEL_NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* version) {
  if (version == nullptr) return kInvalidArgument;
  return cuDriverGetVersion(version) == CUDA_SUCCESS ? kSuccess : kUnknown;
}
FUNNEL_NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* version) {
  return nvmlSystemGetCudaDriverVersion_v2(version);
}

// The kernel module's version ("580.159.04"), from /proc/driver/nvidia/version as NVIDIA's NVML
// reads it (a proc file: no GPU device file opened); JAX asks.  No module: driver not loaded.
FUNNEL_NVML_API nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned length) {
  if (version == nullptr) return kInvalidArgument;
  std::FILE* f = std::fopen("/proc/driver/nvidia/version", "r");
  if (f == nullptr) return kDriverNotLoaded;
  std::array<char, 512> line{};
  const bool read = std::fgets(line.data(), line.size(), f) != nullptr;
  std::fclose(f);
  // "NVRM version: NVIDIA UNIX ... Kernel Module ...  580.159.04  Release Build ...": the first
  // word of digits and dots with a dot in it.
  for (char* word = read ? std::strtok(line.data(), " \t\n") : nullptr; word != nullptr;
       word = std::strtok(nullptr, " \t\n")) {
    if (std::strspn(word, "0123456789.") == std::strlen(word) && std::strchr(word, '.') != nullptr &&
        std::isdigit(static_cast<unsigned char>(word[0])))
      return copy_text(word, version, length);
  }
  return kUnknown;
}

FUNNEL_NVML_API const char* nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
    case kSuccess: return "Success";
    case kUninitialized: return "Uninitialized";
    case kInvalidArgument: return "Invalid Argument";
    case kNotSupported: return "Not Supported";
    case kNotFound: return "Not Found";
    case kInsufficientSize: return "Insufficient Size";
    case kDriverNotLoaded: return "Driver Not Loaded";
    default: return "Unknown Error";
  }
}
