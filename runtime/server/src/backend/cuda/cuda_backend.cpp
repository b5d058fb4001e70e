// The CUDA backend: the driver API (opened with dlopen, see cuda_driver.hpp), the primary
// context of each GPU, non-blocking streams.  doc/design/cuda-backend.md explains it.

// GCC 12/13 at -O2/-O3 report a false -Warray-bounds inside fmt 9's inlined float
// formatting (libstdc++ memmove, reached from spdlog calls).  The pragma must come before
// the includes: these middle-end warnings take the state at the header's location.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic ignored "-Warray-bounds"
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "backend/cuda/cuda_driver.hpp"
#include "funnel/fatbin/fatbin.hpp"
#include "funnel/server/backend.hpp"
#include "funnel/server/server.hpp"

namespace funnel::server {
namespace {

using cuda::Driver;

static_assert(static_cast<uint32_t>(CU_DEVICE_ATTRIBUTE_MAX) <= ipc::kMaxDeviceAttributes,
              "DeviceRecord::attributes is too small for this cuda.h");
static_assert(sizeof(CUdeviceptr) == sizeof(uint64_t));
static_assert(sizeof(size_t) == sizeof(uint64_t));

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

enum class Log { Errors, Quiet };

// The one place every driver call's result goes through.  NOT_READY is an answer, not an
// error, and is never logged.
Status check(const Driver& d, const char* call, CUresult r, Log log = Log::Errors) noexcept {
  if (r == CUDA_SUCCESS) return Status::Success;
  if (log == Log::Errors && r != CUDA_ERROR_NOT_READY) {
    spdlog::error("cuda: {} failed: {} ({}: {})", call, error_name(d, r), static_cast<int>(r),
                  error_string(d, r));
  }
  return to_status(r);
}

// Calls a driver entry point through check().  `fn` is a member of Driver.
#define FUNNEL_CU(drv, fn, ...) check((drv), #fn, (drv).fn(__VA_ARGS__))
#define FUNNEL_CU_QUIET(drv, fn, ...) check((drv), #fn, (drv).fn(__VA_ARGS__), Log::Quiet)

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }

// --- loading -------------------------------------------------------------------------------

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

// Opens libcuda.so.1 and resolves every entry point.  The library is never closed:
// unloading the driver while the process lives is not supported by NVIDIA.
Driver load_driver() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    fail(std::string("no NVIDIA driver (libcuda.so.1) found (") + (why ? why : "dlopen failed") +
         "): run on a GPU node or use --backend sim");
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
  if (version < cuda::kDriverApiVersion) {
    fail("the NVIDIA driver supports CUDA " + std::to_string(version / 1000) + "." +
         std::to_string(version % 1000 / 10) +
         " but funnel needs CUDA 13.0 or newer: update the driver (R580 or newer) or use --backend sim");
  }
#define FUNNEL_CU_RESOLVE(name, pfn) resolve(gpa, #name, cuda::kDriverApiVersion, d.name);
  FUNNEL_CU_FUNCTIONS(FUNNEL_CU_RESOLVE)
#undef FUNNEL_CU_RESOLVE
  return d;
}

// --- the backend -------------------------------------------------------------------------

struct Device {
  int ordinal = 0;  // CUDA ordinal (as this process's driver numbers devices)
  CUdevice handle = 0;
  // The retained primary context.  reset_device replaces it (and bumps the generation)
  // while other threads bind other devices, so both are atomic.
  std::atomic<CUcontext> context{nullptr};
  std::atomic<uint64_t> generation{0};
  // CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: registered host memory
  // has the same address on the GPU (write_value needs it; without it, clients ask).
  bool host_pointer_is_device_pointer = false;
  // The device's SMs split into groups at the hardware's granularity (sm_groups), made
  // once on first use: partitions are green contexts over some of these groups, and a
  // descriptor may only combine resources of one split.
  std::once_flag split_once;
  Status split_status = Status::Success;
  SmGroups layout;
  std::vector<CUdevResource> groups;

  Device() = default;
  Device(const Device& o)
      : ordinal(o.ordinal),
        handle(o.handle),
        context(o.context.load()),
        generation(o.generation.load()),
        host_pointer_is_device_pointer(o.host_pointer_is_device_pointer) {}
  Device& operator=(const Device&) = delete;
};

// What streams and events need after the backend is gone: they share ownership of it, so
// that destruction order does not matter.
struct Shared {
  Driver drv;
  std::vector<Device> devices;
  uint64_t id = 0;  // unique per backend instance, for the per-thread current-context cache

  // Untimed events of finished completions, per device, for reuse: every synchronous
  // copy, staged chunk and stream synchronisation that has to wait records one, and
  // cuEventCreate + cuEventDestroy cost as much as the rest of such a round trip.
  // Re-recording a CUevent is allowed once nothing queries its old record.
  static constexpr size_t kPoolLimit = 256;
  mutable std::mutex pool_mu;
  mutable std::vector<std::vector<CUevent>> pool;

  // Calls that need some current context but no particular device (host registration,
  // library loads) hold this shared (on_any_device); reset_device holds it exclusively
  // so that none of them runs in a context being destroyed.  Per-device calls need no
  // lock: the server resets a device only once no session uses it.
  mutable std::shared_mutex reset_mu;
  // Per device: its context answered a sticky status to a call for no particular device.
  // Such calls skip it from then on; reset_device clears it.
  mutable std::array<std::atomic<bool>, ipc::kMaxDevices> context_faulted{};

  // The one-thread kernel of store_word (kAnswerPtx), loaded once with the backend; null
  // when the driver refused it (store_word then answers NotSupported).
  CUlibrary answer_library = nullptr;
  CUkernel answer_kernel = nullptr;

  ~Shared() {
    if (answer_library != nullptr) FUNNEL_CU(drv, cuLibraryUnload, answer_library);
    for (size_t i = 0; i < pool.size(); ++i) {
      if (pool[i].empty() || !ok(bind(static_cast<int>(i)))) continue;
      for (CUevent e : pool[i]) FUNNEL_CU(drv, cuEventDestroy, e);
    }
    for (const Device& dev : devices) {
      if (dev.context.load() != nullptr) FUNNEL_CU(drv, cuDevicePrimaryCtxRelease, dev.handle);
    }
  }

  // Makes the device's primary context current in this thread (cached per thread).  The
  // cache key includes the device's generation: after a reset_device every thread binds
  // the new context at its next call, even where the driver handed back the same handle.
  Status bind(int device) const noexcept {
    struct Current {
      uint64_t backend = 0;
      CUcontext context = nullptr;
      uint64_t generation = 0;
    };
    thread_local Current current;
    if (device < 0 || static_cast<size_t>(device) >= devices.size()) return Status::InvalidDevice;
    const Device& dev = devices[static_cast<size_t>(device)];
    // Generation first: a context stored before the generation bump is never cached under
    // the new generation with the old handle.
    const uint64_t generation = dev.generation.load(std::memory_order_acquire);
    const CUcontext ctx = dev.context.load(std::memory_order_acquire);
    if (current.backend == id && current.context == ctx && current.generation == generation) return Status::Success;
    const Status s = FUNNEL_CU(drv, cuCtxSetCurrent, ctx);
    if (ok(s)) current = Current{id, ctx, generation};
    return s;
  }

  // Runs `call` (a call for no particular device) in the context of the first device
  // whose context has not faulted; the caller holds reset_mu shared.  After a GPU fault
  // every call in that device's context answers the fault until the process ends (the
  // server restarts to recover, doc/design/faults.md), and clients of the other devices
  // must still register host memory and load modules meanwhile.
  template <class Call>
  Status on_any_device(Call&& call) const {
    Status st = Status::Success;
    bool tried = false;
    for (size_t i = 0; i < devices.size(); ++i) {
      if (context_faulted[i].load(std::memory_order_acquire)) continue;
      tried = true;
      st = bind(static_cast<int>(i));
      if (ok(st)) st = call();
      if (!ipc::is_sticky(st)) return st;
      if (!context_faulted[i].exchange(true, std::memory_order_acq_rel))
        spdlog::warn("cuda: device {}'s context answers status {} (a GPU fault): host registrations and module loads "
                     "use another device's context from now on",
                     i, static_cast<int>(st));
    }
    if (tried) return st;
    st = bind(0);  // every device faulted: device 0 answers the fault
    return ok(st) ? call() : st;
  }
};

std::atomic<uint64_t> g_next_backend_id{1};

// A green context over some SM groups of a device.  It retains the device's primary
// context; its streams (cuGreenCtxStreamCreate) run kernels on its SMs only, and use
// the primary context's memory, libraries and events like any other stream.
class CudaPartition final : public BackendPartition {
 public:
  CudaPartition(std::shared_ptr<const Shared> shared, int device, CUgreenCtx ctx, uint32_t sms)
      : shared_(std::move(shared)), device_(device), ctx_(ctx), sms_(sms) {}
  ~CudaPartition() override { FUNNEL_CU(shared_->drv, cuGreenCtxDestroy, ctx_); }
  CudaPartition(const CudaPartition&) = delete;
  CudaPartition& operator=(const CudaPartition&) = delete;
  int device() const noexcept override { return device_; }
  uint32_t sm_count() const noexcept override { return sms_; }
  CUgreenCtx handle() const noexcept { return ctx_; }

 private:
  std::shared_ptr<const Shared> shared_;
  int device_;
  CUgreenCtx ctx_;
  uint32_t sms_;
};

// What a launch graph's node is fixed to; its arguments are set anew for every launch.
struct NodeShape {
  CUkernel kernel;
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared_bytes;
  bool operator==(const NodeShape&) const = default;
};

// A chain of kernel nodes, instantiated once and launched again with each batch's arguments
// (cuGraphExecKernelNodeSetParams, then one cuGraphLaunch).  An exec is launched into one
// stream only: a graph exec orders each launch behind its previous one, which across streams
// would be a false dependency.
struct LaunchGraph {
  std::vector<NodeShape> shape;
  CUgraph graph = nullptr;  // kept: its node handles name the exec's nodes
  CUgraphExec exec = nullptr;
  std::vector<CUgraphNode> nodes;
  uint64_t used = 0;  // LaunchGraphs::tick of its last launch
};

// A stream's launch graphs, at most kMaxGraphs (the least recently launched goes).  A graph
// is built only for a shape seen before (kSeen remembered), so launches that never repeat
// their shape cost no instantiation.
class LaunchGraphs {
 public:
  static constexpr size_t kMaxGraphs = 16;
  static constexpr size_t kSeen = 32;
  LaunchGraphs(const Shared& shared, int device) : shared_(&shared), device_(device) {}
  ~LaunchGraphs() {
    if (graphs_.empty() || !ok(shared_->bind(device_))) return;
    for (auto& g : graphs_) destroy(g);
  }
  LaunchGraphs(const LaunchGraphs&) = delete;
  LaunchGraphs& operator=(const LaunchGraphs&) = delete;

  // The graph of this shape; nullptr on its first sight (remembered) or when building failed.
  // add_nodes(CUgraph, std::vector<CUgraphNode>&) -> Status adds the chain of nodes.  (A
  // template, not a std::function: this runs for every batch.)
  template <class AddNodes>
  LaunchGraph* find_or_build(const std::vector<NodeShape>& shape, uint64_t hash, AddNodes&& add_nodes) {
    ++tick_;
    for (auto& g : graphs_)
      if (g.shape == shape) {
        g.used = tick_;
        return &g;
      }
    if (std::find(seen_.begin(), seen_.end(), hash) == seen_.end()) {
      if (seen_.size() >= kSeen) seen_.erase(seen_.begin());
      seen_.push_back(hash);
      return nullptr;
    }
    LaunchGraph g;
    g.shape = shape;
    g.used = tick_;
    if (!ok(FUNNEL_CU(shared_->drv, cuGraphCreate, &g.graph, 0)) || !ok(add_nodes(g.graph, g.nodes)) ||
        !ok(FUNNEL_CU(shared_->drv, cuGraphInstantiateWithFlags, &g.exec, g.graph, 0))) {
      destroy(g);
      // Not again for this shape until it is seen anew.
      seen_.erase(std::remove(seen_.begin(), seen_.end(), hash), seen_.end());
      return nullptr;
    }
    if (graphs_.size() >= kMaxGraphs) {
      auto lru = std::min_element(graphs_.begin(), graphs_.end(),
                                  [](const LaunchGraph& a, const LaunchGraph& b) { return a.used < b.used; });
      destroy(*lru);
      graphs_.erase(lru);
    }
    graphs_.push_back(std::move(g));
    return &graphs_.back();
  }

 private:
  void destroy(LaunchGraph& g) noexcept {
    if (g.exec != nullptr) FUNNEL_CU(shared_->drv, cuGraphExecDestroy, g.exec);
    if (g.graph != nullptr) FUNNEL_CU(shared_->drv, cuGraphDestroy, g.graph);
    g.exec = nullptr;
    g.graph = nullptr;
  }

  const Shared* shared_;
  int device_;
  std::vector<LaunchGraph> graphs_;
  std::vector<uint64_t> seen_;
  uint64_t tick_ = 0;
};

class CudaStream final : public BackendStream {
 public:
  CudaStream(std::shared_ptr<const Shared> shared, int device, CUstream stream,
             std::shared_ptr<BackendPartition> partition = nullptr)
      : shared_(std::move(shared)), device_(device), stream_(stream), partition_(std::move(partition)),
        graphs_(*shared_, device) {}
  ~CudaStream() override {
    // Returns at once; the driver frees the stream once its work completed.
    if (ok(shared_->bind(device_))) FUNNEL_CU(shared_->drv, cuStreamDestroy, stream_);
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  int device() const noexcept override { return device_; }
  CUstream handle() const noexcept { return stream_; }

  // Known idle: a query found the stream empty and nothing was enqueued since, so the
  // next query needs no driver call (an empty cudaStreamSynchronize is a round trip
  // the client waits for).  Everything that enqueues goes through enqueue_on().
  bool known_idle() const noexcept { return idle_.load(std::memory_order_relaxed); }
  void set_idle(bool idle) noexcept { idle_.store(idle, std::memory_order_relaxed); }
  bool partitioned() const noexcept { return partition_ != nullptr; }
  // The launch graphs of this stream (launch_batch); only its client's worker touches them.
  LaunchGraphs& graphs() noexcept { return graphs_; }

 private:
  std::shared_ptr<const Shared> shared_;
  int device_;
  CUstream stream_;
  std::shared_ptr<BackendPartition> partition_;  // destroyed after the stream
  std::atomic<bool> idle_{false};
  LaunchGraphs graphs_;  // an exec destroyed while it runs is freed once it is done
};

class CudaEvent final : public BackendEvent {
 public:
  CudaEvent(std::shared_ptr<const Shared> shared, int device, CUevent event, bool pooled)
      : shared_(std::move(shared)), device_(device), event_(event), pooled_(pooled) {}
  ~CudaEvent() override {
    if (pooled_) {
      std::lock_guard lk(shared_->pool_mu);
      auto& free = shared_->pool[static_cast<size_t>(device_)];
      if (free.size() < Shared::kPoolLimit) {
        free.push_back(event_);
        return;
      }
    }
    if (ok(shared_->bind(device_))) FUNNEL_CU(shared_->drv, cuEventDestroy, event_);
  }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  int device() const noexcept { return device_; }
  CUevent handle() const noexcept { return event_; }

 private:
  std::shared_ptr<const Shared> shared_;
  int device_;
  CUevent event_;
  bool pooled_;
};

// A CUlaunchConfig with the attributes a LaunchDesc asks for (it points into itself: not
// copyable).
struct LaunchConfig {
  CUlaunchConfig config{};
  CUlaunchAttribute attrs[3];
  LaunchConfig(const LaunchDesc& l, CUstream stream) noexcept {
    unsigned n = 0;
    if (l.cluster[0] != 0 || l.cluster[1] != 0 || l.cluster[2] != 0) {
      attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      attrs[n].value.clusterDim.x = std::max(l.cluster[0], 1u);
      attrs[n].value.clusterDim.y = std::max(l.cluster[1], 1u);
      attrs[n].value.clusterDim.z = std::max(l.cluster[2], 1u);
      ++n;
    }
    if (l.cooperative) {
      attrs[n].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
      attrs[n].value.cooperative = 1;
      ++n;
    }
    if (l.priority != 0) {
      attrs[n].id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
      attrs[n].value.priority = l.priority;
      ++n;
    }
    config.gridDimX = l.grid[0];
    config.gridDimY = l.grid[1];
    config.gridDimZ = l.grid[2];
    config.blockDimX = l.block[0];
    config.blockDimY = l.block[1];
    config.blockDimZ = l.block[2];
    config.sharedMemBytes = l.shared_bytes;
    config.hStream = stream;
    config.attrs = n != 0 ? attrs : nullptr;
    config.numAttrs = n;
  }
  LaunchConfig(const LaunchConfig&) = delete;
  LaunchConfig& operator=(const LaunchConfig&) = delete;
};

class CudaModule final : public BackendModule {
 public:
  CudaModule(std::shared_ptr<const Shared> shared, CUlibrary lib) : shared_(std::move(shared)), lib_(lib) {}
  ~CudaModule() override { FUNNEL_CU(shared_->drv, cuLibraryUnload, lib_); }
  CudaModule(const CudaModule&) = delete;
  CudaModule& operator=(const CudaModule&) = delete;
  CUlibrary handle() const noexcept { return lib_; }

 private:
  std::shared_ptr<const Shared> shared_;
  CUlibrary lib_;
};

// Owned by its module's user (the worker), which keeps the module alive longer.
class CudaKernel final : public BackendKernel {
 public:
  CudaKernel(CUkernel k, std::vector<uint32_t> offsets) : kernel_(k), offsets_(std::move(offsets)) {}
  CUkernel handle() const noexcept { return kernel_; }
  const std::vector<uint32_t>& offsets() const noexcept { return offsets_; }

 private:
  CUkernel kernel_;
  std::vector<uint32_t> offsets_;
};

// The most launches one graph of a batch holds.
constexpr size_t kMaxGraphNodes = kMaxLaunchBatch;

// Kernel arguments as cuLaunchKernelEx and kernel nodes take them: one pointer per parameter
// into the packed buffer (the caller checked that the buffer is exactly the kernel's
// parameter size).  Points into itself: not copyable.
class KernelArgs {
 public:
  KernelArgs(const CudaKernel& k, std::span<const std::byte> params) {
    const auto& offsets = k.offsets();
    if (offsets.empty()) return;
    args_ = inline_;
    if (offsets.size() > kInline) {
      heap_.resize(offsets.size());
      args_ = heap_.data();
    }
    auto* base = const_cast<std::byte*>(params.data());
    for (size_t i = 0; i < offsets.size(); ++i) args_[i] = base + offsets[i];
  }
  KernelArgs(const KernelArgs&) = delete;
  KernelArgs& operator=(const KernelArgs&) = delete;
  void** get() const noexcept { return args_; }  // nullptr for a kernel without parameters

 private:
  static constexpr size_t kInline = 32;
  void* inline_[kInline];
  std::vector<void*> heap_;
  void** args_ = nullptr;
};

// A reused buffer per thread (workers of several clients share the backend).
std::vector<NodeShape>& shape_scratch() {
  thread_local std::vector<NodeShape> shape;
  return shape;
}

// Every BackendStream/BackendEvent the server hands back was made by this backend.
CudaStream& as_cuda(BackendStream& s) noexcept { return static_cast<CudaStream&>(s); }
// The stream that the caller is about to enqueue work on (copies, memsets, event
// records and waits, stream-ordered allocations, launches): no longer known idle.
CudaStream& enqueue_on(BackendStream& bs) noexcept {
  CudaStream& s = as_cuda(bs);
  s.set_idle(false);
  return s;
}
CudaEvent& as_cuda(BackendEvent& e) noexcept { return static_cast<CudaEvent&>(e); }

void* host_pointer(uint64_t address) noexcept { return reinterpret_cast<void*>(static_cast<uintptr_t>(address)); }
CUdeviceptr device_pointer(uint64_t address) noexcept { return static_cast<CUdeviceptr>(address); }

bool to_culimit(Limit limit, CUlimit& out) noexcept {
  switch (limit) {
    case Limit::StackSize: out = CU_LIMIT_STACK_SIZE; return true;
    case Limit::PrintfFifoSize: out = CU_LIMIT_PRINTF_FIFO_SIZE; return true;
    case Limit::MallocHeapSize: out = CU_LIMIT_MALLOC_HEAP_SIZE; return true;
  }
  return false;
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(std::shared_ptr<Shared> shared) : s_(std::move(shared)) {}

  const char* name() const noexcept override { return "cuda"; }
  int device_count() const noexcept override { return static_cast<int>(s_->devices.size()); }

  void describe(int device, ipc::DeviceRecord& out) override {
    if (device < 0 || device >= device_count()) fail("describe: no device " + std::to_string(device));
    const Driver& d = s_->drv;
    const Device& dev = s_->devices[static_cast<size_t>(device)];
    out = ipc::DeviceRecord{};
    auto must = [&](Status st, const char* what) {
      if (!ok(st)) fail(std::string("cuda: cannot read the ") + what + " of device " + std::to_string(dev.ordinal));
    };
    must(FUNNEL_CU(d, cuDeviceGetName, out.name, static_cast<int>(sizeof(out.name)), dev.handle), "name");
    out.name[sizeof(out.name) - 1] = '\0';
    CUuuid uuid{};
    must(FUNNEL_CU(d, cuDeviceGetUuid, &uuid, dev.handle), "UUID");
    static_assert(sizeof(uuid.bytes) == sizeof(out.uuid));
    std::memcpy(out.uuid, uuid.bytes, sizeof(out.uuid));
    must(FUNNEL_CU(d, cuDeviceGetPCIBusId, out.pci_bus_id, static_cast<int>(sizeof(out.pci_bus_id)), dev.handle),
         "PCI bus id");
    out.pci_bus_id[sizeof(out.pci_bus_id) - 1] = '\0';
    size_t total = 0;
    must(FUNNEL_CU(d, cuDeviceTotalMem, &total, dev.handle), "total memory");
    out.total_memory = total;
    out.ordinal = dev.ordinal;
    // Attributes the driver does not know (numbers retired or newer than it) stay 0.
    for (int a = 1; a < static_cast<int>(CU_DEVICE_ATTRIBUTE_MAX); ++a) {
      int v = 0;
      if (ok(FUNNEL_CU_QUIET(d, cuDeviceGetAttribute, &v, static_cast<CUdevice_attribute>(a), dev.handle))) {
        out.attributes[a] = v;
      }
    }
  }

  Status mem_get_info(int device, uint64_t& free_bytes, uint64_t& total_bytes) override {
    if (Status st = s_->bind(device); !ok(st)) return st;
    size_t f = 0, t = 0;
    const Status st = FUNNEL_CU(s_->drv, cuMemGetInfo, &f, &t);
    if (ok(st)) {
      free_bytes = f;
      total_bytes = t;
    }
    return st;
  }

  Status mem_alloc(int device, uint64_t size, DeviceAddress& out) override {
    if (Status st = s_->bind(device); !ok(st)) return st;
    out = 0;
    if (size == 0) return Status::Success;  // cudaMalloc(0): success, null pointer
    CUdeviceptr p = 0;
    const Status st = FUNNEL_CU(s_->drv, cuMemAlloc, &p, size);
    if (ok(st)) out = p;
    return st;
  }

  // The virtual memory API places memory at a chosen address (cuMemAlloc cannot): reserve
  // exactly `at`, back it with a physical allocation of the device, allow the device access.
  // Peers get no access to such a range (doc/not-supported.md).
  Status mem_alloc_at(int device, uint64_t size, DeviceAddress at) override {
    if (Status st = s_->bind(device); !ok(st)) return st;
    if (size == 0 || at == 0 || at % kPlacedGranule != 0) return Status::InvalidValue;
    const Driver& d = s_->drv;
    const uint64_t bytes = (size + kPlacedGranule - 1) / kPlacedGranule * kPlacedGranule;
    CUdeviceptr va = 0;
    // A range the driver cannot give (in use here, or outside its address window) makes the
    // client choose another.
    if (!ok(FUNNEL_CU_QUIET(d, cuMemAddressReserve, &va, bytes, kPlacedGranule, at, 0)))
      return Status::AlreadyMapped;
    if (va != at) {
      FUNNEL_CU(d, cuMemAddressFree, va, bytes);
      return Status::AlreadyMapped;
    }
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = s_->devices[static_cast<size_t>(device)].handle;
    CUmemGenericAllocationHandle h = 0;
    Status st = FUNNEL_CU(d, cuMemCreate, &h, bytes, &prop, 0);
    if (ok(st)) {
      st = FUNNEL_CU(d, cuMemMap, va, bytes, 0, h, 0);
      FUNNEL_CU(d, cuMemRelease, h);  // the mapping keeps the memory
    }
    if (ok(st)) {
      CUmemAccessDesc access{};
      access.location = prop.location;
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      st = FUNNEL_CU(d, cuMemSetAccess, va, bytes, &access, 1);
      if (!ok(st)) FUNNEL_CU(d, cuMemUnmap, va, bytes);
    }
    if (!ok(st)) {
      FUNNEL_CU(d, cuMemAddressFree, va, bytes);
      return st;
    }
    std::lock_guard lk(placed_mu_);
    placed_[at] = bytes;
    return Status::Success;
  }

  Status mem_free(int device, DeviceAddress address) override {
    if (Status st = s_->bind(device); !ok(st)) return st;
    if (address == 0) return Status::Success;
    uint64_t placed = 0;
    {
      std::lock_guard lk(placed_mu_);
      if (auto it = placed_.find(address); it != placed_.end()) {
        placed = it->second;
        placed_.erase(it);
      }
    }
    if (placed == 0) return FUNNEL_CU(s_->drv, cuMemFree, device_pointer(address));
    const Status st = FUNNEL_CU(s_->drv, cuMemUnmap, device_pointer(address), placed);
    const Status freed = FUNNEL_CU(s_->drv, cuMemAddressFree, device_pointer(address), placed);
    return ok(st) ? freed : st;
  }

  Status mem_alloc_async(BackendStream& bs, uint64_t size, DeviceAddress& out) override {
    CudaStream& s = enqueue_on(bs);
    if (Status st = s_->bind(s.device()); !ok(st)) return st;
    out = 0;
    if (size == 0) return Status::Success;
    CUdeviceptr p = 0;
    const Status st = FUNNEL_CU(s_->drv, cuMemAllocAsync, &p, size, s.handle());
    if (ok(st)) out = p;
    return st;
  }

  Status mem_free_async(BackendStream& bs, DeviceAddress address) override {
    CudaStream& s = enqueue_on(bs);
    if (Status st = s_->bind(s.device()); !ok(st)) return st;
    if (address == 0) return Status::Success;
    return FUNNEL_CU(s_->drv, cuMemFreeAsync, device_pointer(address), s.handle());
  }

  // PORTABLE: the pages count as pinned in every context, i.e. for every device.
  Status host_register(void* p, uint64_t size) override {
    if (p == nullptr || size == 0) return Status::InvalidValue;
    std::shared_lock lk(s_->reset_mu);
    return s_->on_any_device(
        [&] { return FUNNEL_CU(s_->drv, cuMemHostRegister, p, size, CU_MEMHOSTREGISTER_PORTABLE); });
  }

  Status host_unregister(void* p) override {
    std::shared_lock lk(s_->reset_mu);
    return s_->on_any_device([&] { return FUNNEL_CU(s_->drv, cuMemHostUnregister, p); });
  }

  void priority_range(int device, int& least, int& greatest) override {
    least = 0;
    greatest = 0;
    if (!ok(s_->bind(device))) return;
    int l = 0, g = 0;
    if (ok(FUNNEL_CU(s_->drv, cuCtxGetStreamPriorityRange, &l, &g))) {
      least = l;
      greatest = g;
    }
  }

  // Non-blocking: never synchronises with the context's NULL stream (the core emulates the
  // legacy stream per client with events).  The driver clamps the priority into range.
  Status create_stream(int device, int priority, const std::shared_ptr<BackendPartition>& partition,
                       std::unique_ptr<BackendStream>& out) override {
    if (Status st = s_->bind(device); !ok(st)) return st;
    CUstream h = nullptr;
    if (partition) {
      if (partition->device() != device) return Status::InvalidDevice;
      const auto& p = static_cast<const CudaPartition&>(*partition);
      const Status st = FUNNEL_CU(s_->drv, cuGreenCtxStreamCreate, &h, p.handle(), CU_STREAM_NON_BLOCKING, priority);
      if (ok(st)) out = std::make_unique<CudaStream>(s_, device, h, partition);
      return st;
    }
    const Status st = FUNNEL_CU(s_->drv, cuStreamCreateWithPriority, &h, CU_STREAM_NON_BLOCKING, priority);
    if (ok(st)) out = std::make_unique<CudaStream>(s_, device, h);
    return st;
  }

  // The split at the hardware's granularity (minSmPartitionSize: 8 SMs on an H100), with
  // the SM co-scheduling guarantees kept (thread block clusters still fit).
  Status sm_groups(int device, SmGroups& out) override {
    if (device < 0 || device >= device_count()) return Status::InvalidDevice;
    Device& dev = s_->devices[static_cast<size_t>(device)];
    std::call_once(dev.split_once, [&] {
      const Driver& d = s_->drv;
      CUdevResource all{};
      dev.split_status = FUNNEL_CU(d, cuDeviceGetDevResource, dev.handle, &all, CU_DEV_RESOURCE_TYPE_SM);
      if (!ok(dev.split_status)) return;
      const unsigned granularity = std::max(1u, all.sm.minSmPartitionSize);
      unsigned n = 0;
      dev.split_status = FUNNEL_CU(d, cuDevSmResourceSplitByCount, nullptr, &n, &all, nullptr, 0u, granularity);
      if (!ok(dev.split_status)) return;
      dev.groups.resize(n);
      CUdevResource rest{};
      dev.split_status =
          FUNNEL_CU(d, cuDevSmResourceSplitByCount, dev.groups.data(), &n, &all, &rest, 0u, granularity);
      if (!ok(dev.split_status)) return;
      dev.groups.resize(n);
      dev.layout.device_sms = all.sm.smCount;
      dev.layout.group_sms = n > 0 ? dev.groups[0].sm.smCount : granularity;
      dev.layout.groups = n;
      spdlog::info("cuda: device {} has {} SMs: {} groups of {} for partitions, {} left over", dev.ordinal,
                   all.sm.smCount, n, dev.layout.group_sms, rest.sm.smCount);
    });
    if (ok(dev.split_status)) out = dev.layout;
    return dev.split_status;
  }

  Status create_partition(int device, std::span<const uint32_t> groups,
                          std::shared_ptr<BackendPartition>& out) override {
    SmGroups layout;
    if (Status st = sm_groups(device, layout); !ok(st)) return st;
    if (groups.empty()) return Status::InvalidValue;
    Device& dev = s_->devices[static_cast<size_t>(device)];
    std::vector<CUdevResource> picked;
    uint32_t sms = 0;
    for (uint32_t g : groups) {
      if (g >= dev.groups.size()) return Status::InvalidValue;
      picked.push_back(dev.groups[g]);
      sms += dev.groups[g].sm.smCount;
    }
    if (Status st = s_->bind(device); !ok(st)) return st;  // green contexts retain the primary one
    CUdevResourceDesc desc{};
    if (Status st = FUNNEL_CU(s_->drv, cuDevResourceGenerateDesc, &desc, picked.data(),
                              static_cast<unsigned>(picked.size()));
        !ok(st))
      return st;
    CUgreenCtx gc = nullptr;
    if (Status st = FUNNEL_CU(s_->drv, cuGreenCtxCreate, &gc, desc, dev.handle, CU_GREEN_CTX_DEFAULT_STREAM); !ok(st))
      return st;
    out = std::make_shared<CudaPartition>(s_, device, gc, sms);
    return Status::Success;
  }

  Status create_event(int device, bool timing, std::unique_ptr<BackendEvent>& out) override {
    if (Status st = s_->bind(device); !ok(st)) return st;
    if (!timing) {
      std::lock_guard lk(s_->pool_mu);
      auto& free = s_->pool[static_cast<size_t>(device)];
      if (!free.empty()) {
        out = std::make_unique<CudaEvent>(s_, device, free.back(), true);
        free.pop_back();
        return Status::Success;
      }
    }
    CUevent h = nullptr;
    const unsigned flags = timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING;
    const Status st = FUNNEL_CU(s_->drv, cuEventCreate, &h, flags);
    if (ok(st)) out = std::make_unique<CudaEvent>(s_, device, h, !timing);
    return st;
  }

  Status copy(BackendStream& bs, const CopyDesc& c) override {
    CudaStream& s = enqueue_on(bs);
    if (Status st = s_->bind(s.device()); !ok(st)) return st;
    if (c.width == 0 || c.height == 0) return Status::Success;
    const Driver& d = s_->drv;
    const CUstream h = s.handle();
    if (c.height == 1) {
      if (c.dst.device && !c.src.device) {
        return FUNNEL_CU(d, cuMemcpyHtoDAsync, device_pointer(c.dst.address), host_pointer(c.src.address), c.width, h);
      }
      if (!c.dst.device && c.src.device) {
        return FUNNEL_CU(d, cuMemcpyDtoHAsync, host_pointer(c.dst.address), device_pointer(c.src.address), c.width, h);
      }
      if (c.dst.device && c.src.device) {
        // cuMemcpyAsync infers both sides from the unified address space, so a copy
        // between two GPUs works too (cuMemcpyDtoDAsync is for one context).
        return FUNNEL_CU(d, cuMemcpyAsync, device_pointer(c.dst.address), device_pointer(c.src.address), c.width, h);
      }
      // host to host falls through to the 2-D path (HOST/HOST is well defined there).
    }
    CUDA_MEMCPY2D m{};
    m.srcXInBytes = 0;
    m.srcY = 0;
    if (c.src.device) {
      m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
      m.srcDevice = device_pointer(c.src.address);
    } else {
      m.srcMemoryType = CU_MEMORYTYPE_HOST;
      m.srcHost = host_pointer(c.src.address);
    }
    m.srcPitch = c.height == 1 ? c.width : c.src_pitch;
    m.dstXInBytes = 0;
    m.dstY = 0;
    if (c.dst.device) {
      m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
      m.dstDevice = device_pointer(c.dst.address);
    } else {
      m.dstMemoryType = CU_MEMORYTYPE_HOST;
      m.dstHost = host_pointer(c.dst.address);
    }
    m.dstPitch = c.height == 1 ? c.width : c.dst_pitch;
    m.WidthInBytes = c.width;
    m.Height = c.height;
    return FUNNEL_CU(d, cuMemcpy2DAsync, &m, h);
  }

  Status memset(BackendStream& bs, DeviceAddress dst, uint64_t pitch, uint64_t width, uint64_t height,
                uint8_t value) override {
    CudaStream& s = enqueue_on(bs);
    if (Status st = s_->bind(s.device()); !ok(st)) return st;
    if (width == 0 || height == 0) return Status::Success;
    if (height == 1) {
      return FUNNEL_CU(s_->drv, cuMemsetD8Async, device_pointer(dst), value, width, s.handle());
    }
    return FUNNEL_CU(s_->drv, cuMemsetD2D8Async, device_pointer(dst), pitch, value, width, height, s.handle());
  }

  Status record(BackendEvent& be, BackendStream& bs) override {
    CudaStream& s = enqueue_on(bs);
    CudaEvent& e = as_cuda(be);
    // cuEventRecord needs the event and the stream in one context.
    if (e.device() != s.device()) return Status::InvalidResourceHandle;
    if (Status st = s_->bind(s.device()); !ok(st)) return st;
    return FUNNEL_CU(s_->drv, cuEventRecord, e.handle(), s.handle());
  }

  Status write_value(BackendStream& bs, std::atomic<uint32_t>& word, uint32_t value) override {
    CudaStream* s = nullptr;
    if (Status st = host_word_op(bs, s); !ok(st)) return st;
    // CU_STREAM_WRITE_VALUE_DEFAULT: a fence orders the earlier work's writes before it.
    return FUNNEL_CU(s_->drv, cuStreamWriteValue32, s->handle(), reinterpret_cast<CUdeviceptr>(&word), value,
                     CU_STREAM_WRITE_VALUE_DEFAULT);
  }

  Status store_word(BackendStream& bs, std::atomic<uint32_t>& word, uint32_t value) override {
    if (s_->answer_kernel == nullptr) return Status::NotSupported;
    CudaStream* s = nullptr;
    if (Status st = host_word_op(bs, s); !ok(st)) return st;
    CUdeviceptr address = reinterpret_cast<CUdeviceptr>(&word);
    void* args[] = {&address, &value};
    const LaunchConfig c(LaunchDesc{{1, 1, 1}, {1, 1, 1}, 0}, s->handle());
    return FUNNEL_CU(s_->drv, cuLaunchKernelEx, &c.config, reinterpret_cast<CUfunction>(s_->answer_kernel), args,
                     nullptr);
  }

  // The event may belong to another device: cuStreamWaitEvent allows that.
  Status wait(BackendStream& bs, BackendEvent& be) override {
    CudaStream& s = enqueue_on(bs);
    if (Status st = s_->bind(s.device()); !ok(st)) return st;
    return FUNNEL_CU(s_->drv, cuStreamWaitEvent, s.handle(), as_cuda(be).handle(), CU_EVENT_WAIT_DEFAULT);
  }

  Status query(BackendEvent& be) override {
    CudaEvent& e = as_cuda(be);
    if (Status st = s_->bind(e.device()); !ok(st)) return st;
    return FUNNEL_CU(s_->drv, cuEventQuery, e.handle());
  }

  Status query(BackendStream& bs) override {
    CudaStream& s = as_cuda(bs);
    if (s.known_idle()) return Status::Success;
    if (Status st = s_->bind(s.device()); !ok(st)) return st;
    const Status st = FUNNEL_CU(s_->drv, cuStreamQuery, s.handle());
    if (st == Status::Success) s.set_idle(true);
    return st;
  }

  Status elapsed_ms(BackendEvent& start, BackendEvent& end, float& ms) override {
    CudaEvent& a = as_cuda(start);
    if (Status st = s_->bind(a.device()); !ok(st)) return st;
    float v = 0.0f;
    const Status st = FUNNEL_CU(s_->drv, cuEventElapsedTime, &v, a.handle(), as_cuda(end).handle());
    if (ok(st)) ms = v;
    return st;
  }

  Status synchronize(BackendStream& bs) override {
    CudaStream& s = as_cuda(bs);
    if (Status st = s_->bind(s.device()); !ok(st)) return st;
    return FUNNEL_CU(s_->drv, cuStreamSynchronize, s.handle());
  }

  // --- kernels (doc/design/kernels.md) ---------------------------------------------------
  // A CUlibrary is context-independent: the driver loads its code into a device's context
  // when a kernel of it is first used there.  CUkernel handles are launched directly
  // (cuLaunchKernelEx takes a CUkernel in place of a CUfunction, in the current context).

  Status module_load(std::span<const std::byte> image, std::unique_ptr<BackendModule>& out) override {
    // The driver loads lazily (CUDA_MODULE_LOADING=LAZY is the default) and accepted 4 KiB of
    // junk in the GPU smoke test: check that the bytes are a fat binary first.
    try {
      if (funnel::fatbin::parse_fatbin(image).empty()) return Status::InvalidKernelImage;
    } catch (const funnel::fatbin::Error& e) {
      spdlog::warn("cuda: module rejected: {}", e.what());
      return Status::InvalidKernelImage;
    }
    CUlibrary lib = nullptr;
    std::shared_lock lk(s_->reset_mu);
    const Status st = s_->on_any_device([&] {
      return FUNNEL_CU(s_->drv, cuLibraryLoadData, &lib, image.data(), nullptr, nullptr, 0u, nullptr, nullptr, 0u);
    });
    if (!ok(st)) return st == Status::InvalidValue || st == Status::Unknown ? Status::InvalidKernelImage : st;
    out = std::make_unique<CudaModule>(s_, lib);
    return Status::Success;
  }

  Status kernel_get(BackendModule& bm, const std::string& name, std::unique_ptr<BackendKernel>& out,
                    std::vector<ParamLayout>& params, uint32_t& param_bytes) override {
    auto& m = static_cast<CudaModule&>(bm);
    const Driver& d = s_->drv;
    CUkernel k = nullptr;
    std::shared_lock lk(s_->reset_mu);
    const Status got = s_->on_any_device([&] {
      const CUresult r = d.cuLibraryGetKernel(&k, m.handle(), name.c_str());
      if (r == CUDA_ERROR_NOT_FOUND || r == CUDA_ERROR_INVALID_VALUE) return Status::InvalidDeviceFunction;
      return check(d, "cuLibraryGetKernel", r);
    });
    if (!ok(got)) return got;
    // The driver's own parameter layout: every parameter's offset and size, in order;
    // the index past the last one answers CUDA_ERROR_INVALID_VALUE.
    params.clear();
    param_bytes = 0;
    for (size_t i = 0; i < ipc::kMaxParamBytes; ++i) {
      size_t offset = 0, size = 0;
      if (d.cuKernelGetParamInfo(k, i, &offset, &size) != CUDA_SUCCESS) break;
      params.push_back({static_cast<uint32_t>(offset), static_cast<uint32_t>(size)});
      param_bytes = std::max(param_bytes, static_cast<uint32_t>(offset + size));
    }
    std::vector<uint32_t> offsets;
    offsets.reserve(params.size());
    for (const ParamLayout& p : params) offsets.push_back(p.offset);
    out = std::make_unique<CudaKernel>(k, std::move(offsets));
    return Status::Success;
  }

  Status global_get(BackendModule& bm, int device, const std::string& name, DeviceAddress& address,
                    uint64_t& size) override {
    auto& m = static_cast<CudaModule&>(bm);
    if (Status st = s_->bind(device); !ok(st)) return st;
    CUdeviceptr p = 0;
    size_t bytes = 0;
    if (const CUresult r = s_->drv.cuLibraryGetGlobal(&p, &bytes, m.handle(), name.c_str()); r != CUDA_SUCCESS) {
      if (r == CUDA_ERROR_NOT_FOUND || r == CUDA_ERROR_INVALID_VALUE) return Status::SymbolNotFound;
      return check(s_->drv, "cuLibraryGetGlobal", r);
    }
    address = p;
    size = bytes;
    return Status::Success;
  }

  Status launch(BackendStream& bs, BackendKernel& bk, const LaunchDesc& l, std::span<const std::byte> params) override {
    CudaStream& s = enqueue_on(bs);
    auto& k = static_cast<CudaKernel&>(bk);
    if (Status st = s_->bind(s.device()); !ok(st)) return st;
    const KernelArgs args(k, params);
    LaunchConfig c(l, s.handle());
    return FUNNEL_CU(s_->drv, cuLaunchKernelEx, &c.config, reinterpret_cast<CUfunction>(k.handle()), args.get(),
                     nullptr);
  }

  // Pieces of 2^k launches (at most kMaxGraphNodes) each go as one graph launch once their
  // shape has a graph (LaunchGraphs: built on its second sight); the rest one by one.
  // The worker holds back only plain launches (no cooperative, cluster or priority attribute).
  // Not on a partition's (green context's) stream: there each launch goes alone.
  Status launch_batch(BackendStream& bs, std::span<const BatchedLaunch> launches, size_t& launched) override {
    launched = 0;
    CudaStream& s = enqueue_on(bs);
    if (s.partitioned()) return Status::NotSupported;
    if (Status st = s_->bind(s.device()); !ok(st)) return st;
    while (launched < launches.size()) {
      size_t piece = std::min(std::bit_floor(launches.size() - launched), kMaxGraphNodes);
      const auto part = launches.subspan(launched, piece);
      if (piece < 2 || !ok(launch_graph(s, part))) {
        for (const BatchedLaunch& l : part) {
          if (Status st = launch(bs, *l.kernel, l.desc, l.params); !ok(st)) return st;
          ++launched;
        }
        continue;
      }
      launched += piece;
    }
    return Status::Success;
  }

  // One graph launch of `part` when its shape has a graph; NotSupported when it has none
  // (yet), or when the driver refused a step before the launch (nothing went out).
  Status launch_graph(CudaStream& s, std::span<const BatchedLaunch> part) {
    std::vector<NodeShape>& shape = shape_scratch();
    shape.clear();
    uint64_t hash = part.size();
    for (const BatchedLaunch& l : part) {
      NodeShape n{static_cast<CudaKernel&>(*l.kernel).handle(), {}, {}, l.desc.shared_bytes};
      std::copy(std::begin(l.desc.grid), std::end(l.desc.grid), n.grid);
      std::copy(std::begin(l.desc.block), std::end(l.desc.block), n.block);
      shape.push_back(n);
      for (uint64_t v : {reinterpret_cast<uint64_t>(n.kernel), uint64_t{n.grid[0]} << 32 | n.block[0],
                         uint64_t{n.grid[1]} << 32 | n.grid[2], uint64_t{n.block[1]} << 32 | n.block[2],
                         uint64_t{n.shared_bytes}})
        hash = (hash ^ v) * 0x100000001b3ull;  // FNV-1a over words
    }
    const auto params_of = [&](const BatchedLaunch& l, const KernelArgs& args) {
      CUDA_KERNEL_NODE_PARAMS p{};
      p.gridDimX = l.desc.grid[0];
      p.gridDimY = l.desc.grid[1];
      p.gridDimZ = l.desc.grid[2];
      p.blockDimX = l.desc.block[0];
      p.blockDimY = l.desc.block[1];
      p.blockDimZ = l.desc.block[2];
      p.sharedMemBytes = l.desc.shared_bytes;
      p.kernelParams = args.get();
      p.kern = static_cast<CudaKernel&>(*l.kernel).handle();  // in the current context (ctx null)
      return p;
    };
    bool fresh = false;  // built now, with these launches' arguments
    LaunchGraph* g = s.graphs().find_or_build(shape, hash, [&](CUgraph graph, std::vector<CUgraphNode>& nodes) {
      fresh = true;
      for (const BatchedLaunch& l : part) {
        const KernelArgs args(static_cast<CudaKernel&>(*l.kernel), l.params);
        const CUDA_KERNEL_NODE_PARAMS p = params_of(l, args);
        CUgraphNode node = nullptr;
        if (Status st = FUNNEL_CU_QUIET(s_->drv, cuGraphAddKernelNode, &node, graph, nodes.empty() ? nullptr : &nodes.back(),
                                        nodes.empty() ? 0 : 1, &p);
            !ok(st))
          return st;
        nodes.push_back(node);
      }
      return Status::Success;
    });
    if (g == nullptr) return Status::NotSupported;
    if (!fresh) {
      for (size_t i = 0; i < part.size(); ++i) {
        const KernelArgs args(static_cast<CudaKernel&>(*part[i].kernel), part[i].params);
        const CUDA_KERNEL_NODE_PARAMS p = params_of(part[i], args);
        if (!ok(FUNNEL_CU(s_->drv, cuGraphExecKernelNodeSetParams, g->exec, g->nodes[i], &p))) return Status::NotSupported;
      }
    }
    return FUNNEL_CU(s_->drv, cuGraphLaunch, g->exec, s.handle());
  }

  Status func_attributes(BackendKernel& bk, int device, ipc::FuncAttributes& out) override {
    auto& k = static_cast<CudaKernel&>(bk);
    if (Status st = s_->bind(device); !ok(st)) return st;
    const CUdevice dev = s_->devices[static_cast<size_t>(device)].handle;
    const Driver& d = s_->drv;
    Status first = Status::Success;
    auto get = [&](CUfunction_attribute a) -> uint64_t {
      int v = 0;
      const Status st = FUNNEL_CU(d, cuKernelGetAttribute, &v, a, k.handle(), dev);
      if (!ok(st) && ok(first)) first = st;
      return static_cast<uint64_t>(std::max(v, 0));
    };
    out = ipc::FuncAttributes{};
    out.shared_size_bytes = get(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
    out.const_size_bytes = get(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES);
    out.local_size_bytes = get(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES);
    out.max_threads_per_block = static_cast<uint32_t>(get(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK));
    out.num_regs = static_cast<uint32_t>(get(CU_FUNC_ATTRIBUTE_NUM_REGS));
    out.ptx_version = static_cast<uint32_t>(get(CU_FUNC_ATTRIBUTE_PTX_VERSION));
    out.binary_version = static_cast<uint32_t>(get(CU_FUNC_ATTRIBUTE_BINARY_VERSION));
    out.cache_mode_ca = static_cast<uint32_t>(get(CU_FUNC_ATTRIBUTE_CACHE_MODE_CA));
    out.max_dynamic_shared_size_bytes = static_cast<uint32_t>(get(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES));
    out.preferred_shmem_carveout = static_cast<uint32_t>(get(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT));
    out.cluster_dim_must_be_set = static_cast<uint32_t>(get(CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET));
    out.required_cluster[0] = static_cast<uint32_t>(get(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH));
    out.required_cluster[1] = static_cast<uint32_t>(get(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT));
    out.required_cluster[2] = static_cast<uint32_t>(get(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH));
    out.non_portable_cluster_size_allowed =
        static_cast<uint32_t>(get(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED));
    out.cluster_scheduling_policy_preference =
        static_cast<uint32_t>(get(CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE));
    return first;
  }

  // cudaFuncAttribute 8..15 have the numbers of the CUfunction_attribute they set.
  Status func_set_attribute(BackendKernel& bk, int device, uint32_t attribute, int32_t value) override {
    auto& k = static_cast<CudaKernel&>(bk);
    if (Status st = s_->bind(device); !ok(st)) return st;
    const CUdevice dev = s_->devices[static_cast<size_t>(device)].handle;
    if (attribute == ipc::kFuncCacheConfig) {
      if (value < CU_FUNC_CACHE_PREFER_NONE || value > CU_FUNC_CACHE_PREFER_EQUAL) return Status::InvalidValue;
      return FUNNEL_CU(s_->drv, cuKernelSetCacheConfig, k.handle(), static_cast<CUfunc_cache>(value), dev);
    }
    if (attribute < CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES ||
        attribute > CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE)
      return Status::InvalidValue;
    return FUNNEL_CU(s_->drv, cuKernelSetAttribute, static_cast<CUfunction_attribute>(attribute), value, k.handle(),
                     dev);
  }

  Status occupancy(BackendKernel& bk, int device, uint32_t block_size, uint64_t dynamic_shared_bytes, uint32_t flags,
                   int& blocks_per_sm) override {
    CUfunction f = nullptr;
    if (Status st = function_of(bk, device, f); !ok(st)) return st;
    int v = 0;
    const Status st = FUNNEL_CU(s_->drv, cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, &v, f,
                                static_cast<int>(block_size), dynamic_shared_bytes, flags);
    if (ok(st)) blocks_per_sm = v;
    return st;
  }

  Status available_dynamic_smem(BackendKernel& bk, int device, uint32_t blocks_per_sm, uint32_t block_size,
                                uint64_t& bytes) override {
    CUfunction f = nullptr;
    if (Status st = function_of(bk, device, f); !ok(st)) return st;
    size_t v = 0;
    const Status st = FUNNEL_CU(s_->drv, cuOccupancyAvailableDynamicSMemPerBlock, &v, f,
                                static_cast<int>(blocks_per_sm), static_cast<int>(block_size));
    if (ok(st)) bytes = v;
    return st;
  }

  Status max_active_clusters(BackendKernel& bk, int device, const LaunchDesc& d, int& clusters) override {
    CUfunction f = nullptr;
    if (Status st = function_of(bk, device, f); !ok(st)) return st;
    LaunchConfig c(d, nullptr);
    int v = 0;
    const Status st = FUNNEL_CU(s_->drv, cuOccupancyMaxActiveClusters, &v, f, &c.config);
    if (ok(st)) clusters = v;
    return st;
  }

  Status wait_value(BackendStream& bs, std::atomic<uint32_t>& word, uint32_t value) override {
    CudaStream* s = nullptr;
    if (Status st = host_word_op(bs, s); !ok(st)) return st;
    // GEQ ((int32_t)(*word - value) >= 0), not EQ: a slot's generations only grow, and when
    // the server releases several waits of a gone client at once (release_host_funcs) the
    // word jumps past all but the last of them.
    return FUNNEL_CU(s_->drv, cuStreamWaitValue32, s->handle(), reinterpret_cast<CUdeviceptr>(&word), value,
                     CU_STREAM_WAIT_VALUE_GEQ);
  }

  // The prologue of a stream memory operation on a word of registered host memory: the
  // stream (marked as enqueued on), its device's context current, and the device able to
  // use the host address as is (else NotSupported: clients then ask the server instead).
  Status host_word_op(BackendStream& bs, CudaStream*& out) {
    CudaStream& s = enqueue_on(bs);
    const auto dev = static_cast<size_t>(s.device());
    if (dev >= s_->devices.size()) return Status::InvalidDevice;
    if (!s_->devices[dev].host_pointer_is_device_pointer) return Status::NotSupported;
    if (Status st = s_->bind(s.device()); !ok(st)) return st;
    out = &s;
    return Status::Success;
  }

  Status set_limit(int device, Limit limit, uint64_t value) override {
    CUlimit l{};
    if (!to_culimit(limit, l)) return Status::UnsupportedLimit;
    if (Status st = s_->bind(device); !ok(st)) return st;
    return FUNNEL_CU(s_->drv, cuCtxSetLimit, l, value);
  }

  Status get_limit(int device, Limit limit, uint64_t& value) override {
    CUlimit l{};
    if (!to_culimit(limit, l)) return Status::UnsupportedLimit;
    if (Status st = s_->bind(device); !ok(st)) return st;
    size_t v = 0;
    const Status st = FUNNEL_CU(s_->drv, cuCtxGetLimit, &v, l);
    if (ok(st)) value = v;
    return st;
  }

  // No.  tests/gpu/recovery_probe.cpp (H100, driver 580): after an illegal-address fault,
  // cuDevicePrimaryCtxReset succeeds but every later cuDevicePrimaryCtxRetain answers
  // CUDA_ERROR_ILLEGAL_ADDRESS, whatever was released or destroyed first, and so does
  // cuCtxCreate of a new context: the sticky error lasts as long as the process ("the
  // process must be terminated and relaunched", as CUDA documents).  The server restarts.
  bool resets_in_process() const noexcept override { return false; }

  // A fresh context after a sticky fault (doc/design/faults.md).  Nothing calls it while
  // resets_in_process() is false; it is kept for a driver that can recover in process
  // (a reset of a device that did not fault worked on the H100, but host registrations
  // made in its context were lost).  The pooled events belong to the context being
  // destroyed; cuDevicePrimaryCtxReset destroys every allocation, stream, event and
  // module instance in it but leaves our retain in place, so the context is released and
  // retained again: the retain makes a fresh, active primary context.  CUlibrary objects
  // are context-independent (the driver loads them into contexts created later), so the
  // module cache survives; verified on the GPU by tests/gpu/backend_smoke.cpp.
  Status reset_device(int device) override {
    if (device < 0 || device >= device_count()) return Status::InvalidDevice;
    std::unique_lock reset(s_->reset_mu);
    Device& dev = s_->devices[static_cast<size_t>(device)];
    {
      std::lock_guard lk(s_->pool_mu);
      auto& free = s_->pool[static_cast<size_t>(device)];
      if (ok(s_->bind(device)))
        for (CUevent e : free) FUNNEL_CU_QUIET(s_->drv, cuEventDestroy, e);  // a poisoned context may refuse
      free.clear();
    }
    // Nothing may stay current on a context being destroyed in this thread.
    FUNNEL_CU(s_->drv, cuCtxSetCurrent, nullptr);
    Status st = FUNNEL_CU(s_->drv, cuDevicePrimaryCtxReset, dev.handle);
    if (ok(st)) st = FUNNEL_CU(s_->drv, cuDevicePrimaryCtxRelease, dev.handle);
    if (ok(st)) {
      // Released: from here on the handle is ours only if the retain succeeds (~Shared
      // releases a non-null one).
      CUcontext ctx = nullptr;
      st = FUNNEL_CU(s_->drv, cuDevicePrimaryCtxRetain, &ctx, dev.handle);
      dev.context.store(ok(st) ? ctx : nullptr, std::memory_order_release);
    }
    dev.generation.fetch_add(1, std::memory_order_acq_rel);
    if (!ok(st)) return st;
    // The fresh context works: something small that needs it.
    if (Status b = s_->bind(device); !ok(b)) return b;
    size_t free_bytes = 0, total = 0;
    st = FUNNEL_CU(s_->drv, cuMemGetInfo, &free_bytes, &total);
    if (ok(st)) s_->context_faulted[static_cast<size_t>(device)].store(false, std::memory_order_release);
    return st;
  }

 private:
  // The kernel's function in the device's context (loads the code there if needed); the
  // context is current afterwards.
  Status function_of(BackendKernel& bk, int device, CUfunction& f) {
    if (Status st = s_->bind(device); !ok(st)) return st;
    return FUNNEL_CU(s_->drv, cuKernelGetFunction, &f, static_cast<CudaKernel&>(bk).handle());
  }

  // Allocations placed by mem_alloc_at: address -> reserved bytes (workers call at once).
  static constexpr uint64_t kPlacedGranule = ipc::kPlacedGranule;
  std::mutex placed_mu_;
  std::map<DeviceAddress, uint64_t> placed_;
  std::shared_ptr<Shared> s_;
};

// store_word's kernel: one thread stores `value` into the word (registered host memory,
// addressed as is: host_word_op checks that the device can).  PTX, so that the driver
// compiles it for whatever GPU it finds; written by nvcc -ptx -arch=compute_75 from
//   extern "C" __global__ void funnel_store_word(unsigned* w, unsigned v) { *(volatile unsigned*)w = v; }
// with the PTX ISA version lowered to 7.0 (CUDA 11.0) so that older drivers take it too.
constexpr char kAnswerPtx[] = R"(.version 7.0
.target sm_75
.address_size 64
.visible .entry funnel_store_word(.param .u64 word, .param .u32 value)
{
  .reg .b32 %r<2>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [word];
  ld.param.u32 %r1, [value];
  cvta.to.global.u64 %rd2, %rd1;
  st.volatile.global.u32 [%rd2], %r1;
  ret;
}
)";

void load_answer_kernel(Shared& shared) {
  const Driver& d = shared.drv;
  std::shared_lock lk(shared.reset_mu);
  const Status st = shared.on_any_device([&] {
    Status s = FUNNEL_CU(d, cuLibraryLoadData, &shared.answer_library, kAnswerPtx, nullptr, nullptr, 0u, nullptr,
                         nullptr, 0u);
    if (ok(s)) s = FUNNEL_CU(d, cuLibraryGetKernel, &shared.answer_kernel, shared.answer_library, "funnel_store_word");
    return s;
  });
  if (ok(st)) return;
  spdlog::warn("cuda: the reply kernel did not load (status {}): calls made while others are on the GPU are answered "
               "by the stream write alone",
               static_cast<int>(st));
  shared.answer_kernel = nullptr;
}

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const std::vector<int>& devices) {
  auto shared = std::make_shared<Shared>();
  shared->drv = load_driver();
  shared->id = g_next_backend_id.fetch_add(1);
  const Driver& d = shared->drv;

  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string visible_note =
      visible != nullptr ? std::string(" (CUDA_VISIBLE_DEVICES=\"") + visible + "\")" : std::string();
  if (const CUresult r = d.cuInit(0); r != CUDA_SUCCESS) {
    if (r == CUDA_ERROR_NO_DEVICE) {
      fail("no CUDA device found" + visible_note +
           ": check nvidia-smi and CUDA_VISIBLE_DEVICES, run on a GPU node, or use --backend sim");
    }
    fail(std::string("the CUDA driver failed to initialise: cuInit: ") + error_name(d, r) + " (" +
         error_string(d, r) + "): check nvidia-smi and the driver installation, or use --backend sim");
  }
  int count = 0;
  if (!ok(FUNNEL_CU(d, cuDeviceGetCount, &count)) || count <= 0) {
    fail("no CUDA device found" + visible_note + ": run on a GPU node or use --backend sim");
  }

  std::vector<int> ordinals = devices;
  if (ordinals.empty()) {
    for (int i = 0; i < count; ++i) ordinals.push_back(i);
  }
  if (ordinals.size() > ipc::kMaxDevices) {
    fail("funnel serves at most " + std::to_string(ipc::kMaxDevices) + " devices per server; " +
         std::to_string(ordinals.size()) + " requested: choose fewer devices");
  }
  for (size_t i = 0; i < ordinals.size(); ++i) {
    const int o = ordinals[i];
    if (o < 0 || o >= count) {
      fail("CUDA device " + std::to_string(o) + " does not exist: this node has " + std::to_string(count) +
           " visible device(s), ordinals 0.." + std::to_string(count - 1) + visible_note +
           ": choose a valid device ordinal");
    }
    for (size_t j = 0; j < i; ++j) {
      if (ordinals[j] == o) fail("CUDA device " + std::to_string(o) + " is listed twice: list each device once");
    }
  }

  for (const int o : ordinals) {
    Device dev;
    dev.ordinal = o;
    if (!ok(FUNNEL_CU(d, cuDeviceGet, &dev.handle, o))) fail("cuDeviceGet failed for CUDA device " + std::to_string(o));
    CUcontext ctx = nullptr;
    if (const CUresult r = d.cuDevicePrimaryCtxRetain(&ctx, dev.handle); r != CUDA_SUCCESS) {
      check(d, "cuDevicePrimaryCtxRetain", r);
      fail("cannot create the CUDA context of device " + std::to_string(o) + ": " + error_name(d, r) + " (" +
           error_string(d, r) +
           "): is the GPU in exclusive-process compute mode and used by another process, or out of memory? "
           "Check nvidia-smi");
    }
    dev.context.store(ctx);
    int same_address = 0;
    if (ok(FUNNEL_CU(d, cuDeviceGetAttribute, &same_address, CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM,
                     dev.handle)))
      dev.host_pointer_is_device_pointer = same_address != 0;
    shared->devices.push_back(dev);  // from here on ~Shared releases it
  }

  shared->pool.resize(shared->devices.size());
  load_answer_kernel(*shared);
  int major = 0, minor = 0;
  for (const Device& dev : shared->devices) {
    char name[256] = {};
    FUNNEL_CU(d, cuDeviceGetName, name, static_cast<int>(sizeof(name)), dev.handle);
    FUNNEL_CU(d, cuDeviceGetAttribute, &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev.handle);
    FUNNEL_CU(d, cuDeviceGetAttribute, &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev.handle);
    spdlog::info("cuda: device {} = CUDA ordinal {}: {} (sm_{}{})", &dev - shared->devices.data(), dev.ordinal, name,
                 major, minor);
  }
  return std::make_unique<CudaBackend>(std::move(shared));
}

}  // namespace funnel::server
