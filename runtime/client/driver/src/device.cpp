// Devices and contexts of the driver front. funnel serves one context per GPU, the server's: a
// CUcontext is the handle of a device's primary context (created contexts are that context too:
// the point of funnel), and the calling thread's current context sets the runtime front's
// current device, so both fronts work on the same device.
#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <vector>

#include "front.hpp"

using funnel::client::current_device;
using funnel::client::Runtime;

namespace funnel::driver {
namespace {

struct Context {
  int device = 0;
  std::atomic<int> retained{0};  // cuDevicePrimaryCtxRetain minus Release, plus created ones
};
std::array<Context, ipc::kMaxDevices> g_contexts;

// A thread's context stack: its top is current.  A fixed array, trivially destructible: the
// main thread's thread_local objects are destroyed at exit before the exit handlers run, and
// NVIDIA's libraries call the driver from theirs (cuFFT frees its memory so).
struct ContextStack {
  static constexpr size_t kDepth = 64;
  Context* slot[kDepth];
  size_t depth;
  bool empty() const noexcept { return depth == 0; }
  Context*& back() noexcept { return slot[depth - 1]; }
  bool full() const noexcept { return depth == kDepth; }
  void push_back(Context* c) noexcept { slot[depth++] = c; }
  void pop_back() noexcept { --depth; }
};
static_assert(std::is_trivially_destructible_v<ContextStack>);
thread_local ContextStack t_stack{};

Context* from(CUcontext c) noexcept {
  auto* p = reinterpret_cast<Context*>(c);
  if (p < g_contexts.data() || p >= g_contexts.data() + g_contexts.size()) return nullptr;
  return p;
}
CUcontext handle(int device) noexcept {
  g_contexts[static_cast<size_t>(device)].device = device;
  return reinterpret_cast<CUcontext>(&g_contexts[static_cast<size_t>(device)]);
}

CUresult check_device(CUdevice d) noexcept {
  if (CUresult r = ready(); r != CUDA_SUCCESS) return r;
  return d >= 0 && d < Runtime::get().device_count() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

// The device of `ctx`, or of the current context when it is null.
CUresult device_of(CUcontext ctx, int& device) noexcept {
  if (ctx == nullptr) return current(device);
  const Context* c = from(ctx);
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  device = c->device;
  return CUDA_SUCCESS;
}

void make_current(Context* c) noexcept {
  if (t_stack.empty())
    t_stack.push_back(c);
  else
    t_stack.back() = c;
  if (c != nullptr) current_device() = c->device;
}

}  // namespace

CUresult to_cu(cudaError_t e) noexcept {
  switch (e) {
    case cudaErrorInvalidConfiguration:
    case cudaErrorInvalidPitchValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidMemcpyDirection:
      return CUDA_ERROR_INVALID_VALUE;
    case cudaErrorInvalidSymbol:
      return CUDA_ERROR_NOT_FOUND;
    case cudaErrorInvalidDeviceFunction:
      return CUDA_ERROR_INVALID_HANDLE;
    default:
      return find_error(static_cast<int>(e)) != nullptr ? static_cast<CUresult>(e) : CUDA_ERROR_UNKNOWN;
  }
}

CUresult in_context(int& device) noexcept {
  if (CUresult r = current(device); r != CUDA_SUCCESS) return r;
  return ready();
}

CUcontext context_of(int device) noexcept { return handle(device); }

CUresult not_supported_detail(const char* call, int value) noexcept {
  char what[128];
  std::snprintf(what, sizeof what, "%s(%d)", call, value);
  return static_cast<CUresult>(not_supported(what));
}

CUresult ready() noexcept {
  const ipc::Status s = Runtime::get().ready();
  return s == ipc::Status::Success ? CUDA_SUCCESS : to_cu(s);
}

CUresult current(int& device) noexcept {
  if (!t_stack.empty()) {
    if (t_stack.back() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    device = t_stack.back()->device;
    return CUDA_SUCCESS;
  }
  // No driver context on this thread: as under CUDA, one the runtime front has made current.
  if (!Runtime::get().attached()) return CUDA_ERROR_INVALID_CONTEXT;
  device = current_device();
  return CUDA_SUCCESS;
}

}  // namespace funnel::driver

using namespace funnel::driver;

FUNNEL_DRIVER_API CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return ready();
}

FUNNEL_DRIVER_API CUresult cuDeviceGetCount(int* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = ready(); r != CUDA_SUCCESS) return r;
  *count = Runtime::get().device_count();
  return CUDA_SUCCESS;
}

FUNNEL_DRIVER_API CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_device(ordinal); r != CUDA_SUCCESS) return r;
  *device = ordinal;
  return CUDA_SUCCESS;
}

FUNNEL_DRIVER_API CUresult cuDeviceGetName(char* name, int len, CUdevice d) {
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_device(d); r != CUDA_SUCCESS) return r;
  return to_cu(funnel::client::copy_text(name, len, Runtime::get().device(d).name));
}

FUNNEL_DRIVER_API CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice d) {
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_device(d); r != CUDA_SUCCESS) return r;
  *bytes = Runtime::get().device(d).total_memory;
  return CUDA_SUCCESS;
}

FUNNEL_DRIVER_API CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute a, CUdevice d) {
  if (value == nullptr || static_cast<uint32_t>(a) >= funnel::ipc::kMaxDeviceAttributes)
    return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_device(d); r != CUDA_SUCCESS) return r;
  *value = Runtime::get().device(d).attributes[static_cast<uint32_t>(a)];
  return CUDA_SUCCESS;
}

FUNNEL_DRIVER_API CUresult cuDeviceGetPCIBusId(char* id, int len, CUdevice d) {
  if (CUresult r = check_device(d); r != CUDA_SUCCESS) return r;
  return to_cu(funnel::client::copy_text(id, len, Runtime::get().device(d).pci_bus_id));
}

FUNNEL_DRIVER_API CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice d) {
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_device(d); r != CUDA_SUCCESS) return r;
  std::memcpy(uuid->bytes, Runtime::get().device(d).uuid, sizeof uuid->bytes);
  return CUDA_SUCCESS;
}

FUNNEL_DRIVER_API CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice d) { return cuDeviceGetUuid_v2(uuid, d); }

FUNNEL_DRIVER_API CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice d) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_device(d); r != CUDA_SUCCESS) return r;
  *ctx = handle(d);
  from(*ctx)->retained.fetch_add(1);
  return CUDA_SUCCESS;
}

FUNNEL_DRIVER_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
  if (CUresult r = check_device(d); r != CUDA_SUCCESS) return r;
  auto& c = g_contexts[static_cast<size_t>(d)];
  int n = c.retained.load();
  while (n > 0 && !c.retained.compare_exchange_weak(n, n - 1)) {
  }
  return n > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

FUNNEL_DRIVER_API CUresult cuDevicePrimaryCtxRelease(CUdevice d) { return cuDevicePrimaryCtxRelease_v2(d); }

FUNNEL_DRIVER_API CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned int* flags, int* active) {
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_device(d); r != CUDA_SUCCESS) return r;
  const auto& c = g_contexts[static_cast<size_t>(d)];
  *flags = funnel::client::context_flags(d).load();
  *active = c.retained.load() > 0 ? 1 : 0;
  return CUDA_SUCCESS;
}

// Context flags, shared with the runtime front's cudaSetDeviceFlags (funnel::client::context_flags):
// the scheduling policy is how this process's threads wait for the server (blocking sync: they
// sleep at once; yield: they yield from the start); CU_CTX_MAP_HOST (always on since CUDA 11)
// and CU_CTX_LMEM_RESIZE_TO_MAX are kept and answered back, without effect (the server owns the
// context's local memory).  The core-dump and synchronous-memops flags are refused by name.
FUNNEL_DRIVER_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice d, unsigned int flags) {
  if (CUresult r = check_device(d); r != CUDA_SUCCESS) return r;
  return to_cu(funnel::client::set_context_flags(d, flags, "cuDevicePrimaryCtxSetFlags"));
}
FUNNEL_DRIVER_API CUresult cuDevicePrimaryCtxSetFlags(CUdevice d, unsigned int flags) {
  return cuDevicePrimaryCtxSetFlags_v2(d, flags);
}
FUNNEL_DRIVER_API CUresult cuCtxGetFlags(unsigned int* flags) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int d = 0;
  if (CUresult r = current(d); r != CUDA_SUCCESS) return r;
  *flags = funnel::client::context_flags(d).load();
  return CUDA_SUCCESS;
}
FUNNEL_DRIVER_API CUresult cuCtxSetFlags(unsigned int flags) {
  int d = 0;
  if (CUresult r = current(d); r != CUDA_SUCCESS) return r;
  return to_cu(funnel::client::set_context_flags(d, flags, "cuCtxSetFlags"));
}
// Every context funnel gives out is a CUDA 3.2-or-later context: the driver answers 3020 for those
// (the API version changes only when a context's binary interface does; the driver's
// documentation gives 3020 beside driver version 4020 as its example).  Not compared with the
// real driver's answer yet.
FUNNEL_DRIVER_API CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ctx != nullptr && from(ctx) == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  int d = 0;
  if (ctx == nullptr) {
    if (CUresult r = current(d); r != CUDA_SUCCESS) return r;
  }
  *version = 3020;
  return CUDA_SUCCESS;
}

FUNNEL_DRIVER_API CUresult cuCtxSetCurrent(CUcontext ctx) {
  if (ctx != nullptr && from(ctx) == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx == nullptr) {
    if (!t_stack.empty()) t_stack.pop_back();
    return CUDA_SUCCESS;
  }
  make_current(from(ctx));
  return CUDA_SUCCESS;
}

FUNNEL_DRIVER_API CUresult cuCtxGetCurrent(CUcontext* ctx) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int device = 0;
  *ctx = current(device) == CUDA_SUCCESS ? handle(device) : nullptr;
  return CUDA_SUCCESS;
}

FUNNEL_DRIVER_API CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  Context* c = from(ctx);
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (t_stack.full())
    return not_supported_detail("cuCtxPushCurrent: contexts pushed deeper than", static_cast<int>(ContextStack::kDepth));
  t_stack.push_back(c);
  current_device() = c->device;
  return CUDA_SUCCESS;
}

FUNNEL_DRIVER_API CUresult cuCtxPopCurrent_v2(CUcontext* ctx) {
  if (t_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx != nullptr) *ctx = reinterpret_cast<CUcontext>(t_stack.back());
  t_stack.pop_back();
  if (!t_stack.empty() && t_stack.back() != nullptr) current_device() = t_stack.back()->device;
  return CUDA_SUCCESS;
}

// A created context is the device's one context (retained, and pushed as the driver does).
FUNNEL_DRIVER_API CUresult cuCtxCreate_v4(CUcontext* ctx, CUctxCreateParams* params, unsigned int flags, CUdevice d) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (params != nullptr && (params->execAffinityParams != nullptr || params->cigParams != nullptr)) {
    (void)not_supported("cuCtxCreate with execution affinity or CIG parameters");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  (void)flags;
  if (CUresult r = cuDevicePrimaryCtxRetain(ctx, d); r != CUDA_SUCCESS) return r;
  return cuCtxPushCurrent_v2(*ctx);
}

FUNNEL_DRIVER_API CUresult cuCtxCreate_v2(CUcontext* ctx, unsigned int flags, CUdevice d) {
  return cuCtxCreate_v4(ctx, nullptr, flags, d);
}

FUNNEL_DRIVER_API CUresult cuCtxDestroy_v2(CUcontext ctx) {
  Context* c = from(ctx);
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (!t_stack.empty() && t_stack.back() == c) t_stack.pop_back();
  return cuDevicePrimaryCtxRelease_v2(c->device);
}

FUNNEL_DRIVER_API CUresult cuCtxGetDevice(CUdevice* device) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int d = 0;
  if (CUresult r = current(d); r != CUDA_SUCCESS) return r;
  *device = d;
  return CUDA_SUCCESS;
}

// A context's unique id: funnel's contexts are one per device, numbered from 1.
FUNNEL_DRIVER_API CUresult cuCtxGetId(CUcontext ctx, unsigned long long* id) {
  if (id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int d = 0;
  if (CUresult r = device_of(ctx, d); r != CUDA_SUCCESS) return r;
  *id = static_cast<unsigned long long>(d) + 1;
  return CUDA_SUCCESS;
}

// CUDA 13's forms that name the context (null: the current one).
FUNNEL_DRIVER_API CUresult cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int d = 0;
  if (CUresult r = device_of(ctx, d); r != CUDA_SUCCESS) return r;
  *device = d;
  return CUDA_SUCCESS;
}

FUNNEL_DRIVER_API CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  int d = 0;
  if (CUresult r = device_of(ctx, d); r != CUDA_SUCCESS) return r;
  if (CUresult r = ready(); r != CUDA_SUCCESS) return r;
  return to_cu(Runtime::get().call(funnel::ipc::Opcode::DeviceSynchronize, d, 0, nullptr, 0));
}

namespace {
// The limits the server keeps (the context's, shared by the clients of the device): CUlimit and
// cudaLimit agree on them.
static_assert(CU_LIMIT_STACK_SIZE == static_cast<int>(cudaLimitStackSize) &&
              CU_LIMIT_PRINTF_FIFO_SIZE == static_cast<int>(cudaLimitPrintfFifoSize) &&
              CU_LIMIT_MALLOC_HEAP_SIZE == static_cast<int>(cudaLimitMallocHeapSize) &&
              CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH == static_cast<int>(cudaLimitDevRuntimeSyncDepth) &&
              CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT == static_cast<int>(cudaLimitDevRuntimePendingLaunchCount) &&
              CU_LIMIT_MAX_L2_FETCH_GRANULARITY == static_cast<int>(cudaLimitMaxL2FetchGranularity) &&
              CU_LIMIT_PERSISTING_L2_CACHE_SIZE == static_cast<int>(cudaLimitPersistingL2CacheSize));
bool server_limit(CUlimit limit) { return limit >= CU_LIMIT_STACK_SIZE && limit <= CU_LIMIT_PERSISTING_L2_CACHE_SIZE; }
}  // namespace

FUNNEL_DRIVER_API CUresult cuCtxGetLimit(size_t* value, CUlimit limit) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int d = 0;
  if (CUresult r = current(d); r != CUDA_SUCCESS) return r;
  // funnel's contexts are never CUDA-in-graphics contexts (cuBLAS asks before every GEMM).
  if (limit == CU_LIMIT_CIG_ENABLED || limit == CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED) {
    *value = 0;
    return CUDA_SUCCESS;
  }
  if (!server_limit(limit)) return not_supported_detail("cuCtxGetLimit", static_cast<int>(limit));
  uint64_t v = 0;
  if (CUresult r = to_cu(funnel::client::get_limit(d, static_cast<uint32_t>(limit), v)); r != CUDA_SUCCESS) return r;
  *value = v;
  return CUDA_SUCCESS;
}

FUNNEL_DRIVER_API CUresult cuDeviceGetByPCIBusId(CUdevice* dev, const char* pciBusId) {
  if (dev == nullptr || pciBusId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = ready(); r != CUDA_SUCCESS) return r;
  int d = 0;
  if (CUresult r = to_cu(funnel::client::device_by_pci_bus_id(pciBusId, d)); r != CUDA_SUCCESS) return r;
  *dev = d;
  return CUDA_SUCCESS;
}

// The current context's cache and shared-memory bank preferences, shared with the runtime front:
// kept and answered back (Hopper sizes L1 per kernel and has four-byte banks).
static_assert(CU_FUNC_CACHE_PREFER_EQUAL == static_cast<int>(cudaFuncCachePreferEqual));
FUNNEL_DRIVER_API CUresult cuCtxSetCacheConfig(CUfunc_cache config) {
  int d = 0;
  if (CUresult r = current(d); r != CUDA_SUCCESS) return r;
  if (config < CU_FUNC_CACHE_PREFER_NONE || config > CU_FUNC_CACHE_PREFER_EQUAL) return CUDA_ERROR_INVALID_VALUE;
  funnel::client::cache_config(d).store(config);
  return CUDA_SUCCESS;
}
FUNNEL_DRIVER_API CUresult cuCtxGetCacheConfig(CUfunc_cache* config) {
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int d = 0;
  if (CUresult r = current(d); r != CUDA_SUCCESS) return r;
  *config = static_cast<CUfunc_cache>(funnel::client::cache_config(d).load());
  return CUDA_SUCCESS;
}
FUNNEL_DRIVER_API CUresult cuCtxSetSharedMemConfig(CUsharedconfig config) {
  int d = 0;
  if (CUresult r = current(d); r != CUDA_SUCCESS) return r;
  return config >= CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE && config <= CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE
             ? CUDA_SUCCESS
             : CUDA_ERROR_INVALID_VALUE;
}
FUNNEL_DRIVER_API CUresult cuCtxGetSharedMemConfig(CUsharedconfig* config) {
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int d = 0;
  if (CUresult r = current(d); r != CUDA_SUCCESS) return r;
  *config = CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE;
  return CUDA_SUCCESS;
}

// The profiled range of this process on the current context's device (the server's context is
// profiled while any client's range is open).  cuProfilerInitialize is gone from CUDA 12's
// headers; its stub refuses it.
FUNNEL_DRIVER_API CUresult cuCtxResetPersistingL2Cache() {
  int d = 0;
  if (CUresult r = current(d); r != CUDA_SUCCESS) return r;
  return to_cu(funnel::client::reset_persisting_l2(d));
}
FUNNEL_DRIVER_API CUresult cuDeviceCanAccessPeer(int* can, CUdevice dev, CUdevice peer) {
  if (CUresult r = funnel::driver::ready(); r != CUDA_SUCCESS) return r;
  return to_cu(funnel::client::can_access_peer(can, dev, peer));
}
FUNNEL_DRIVER_API CUresult cuProfilerStart() {
  int d = 0;
  if (CUresult r = current(d); r != CUDA_SUCCESS) return r;
  return to_cu(funnel::client::profiler(d, true));
}
FUNNEL_DRIVER_API CUresult cuProfilerStop() {
  int d = 0;
  if (CUresult r = current(d); r != CUDA_SUCCESS) return r;
  return to_cu(funnel::client::profiler(d, false));
}

FUNNEL_DRIVER_API CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
  int d = 0;
  if (CUresult r = current(d); r != CUDA_SUCCESS) return r;
  if (!server_limit(limit)) return not_supported_detail("cuCtxSetLimit", static_cast<int>(limit));
  return to_cu(funnel::client::set_limit(d, static_cast<uint32_t>(limit), value));
}

// As the runtime front: 0 (least) and -5 (greatest), an H100's (and the sim's) range.
FUNNEL_DRIVER_API CUresult cuCtxGetStreamPriorityRange(int* least, int* greatest) {
  int d = 0;
  if (CUresult r = current(d); r != CUDA_SUCCESS) return r;
  if (least != nullptr) *least = 0;
  if (greatest != nullptr) *greatest = -5;
  return CUDA_SUCCESS;
}

FUNNEL_DRIVER_API CUresult cuCtxSynchronize() {
  int d = 0;
  if (CUresult r = in_context(d); r != CUDA_SUCCESS) return r;
  return to_cu(Runtime::get().call(funnel::ipc::Opcode::DeviceSynchronize, d, 0, nullptr, 0));
}
