// The sim backend: host memory stands in for device memory and every stream is a
// host thread running closures in FIFO order, so the whole server (ordering, events,
// staging, accounting) can be tested on a machine without a GPU.  Kernels are not
// executed: a launch is recorded (kernel, shape, parameter buffer) in stream order, so
// tests check what a client packed; modules are read with funnel::fatbin.
#include <pthread.h>
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "funnel/fatbin/fatbin.hpp"
#include "funnel/server/backend.hpp"

namespace funnel::server {
namespace {

using Clock = std::chrono::steady_clock;
// Waits are sliced so that a backend being destroyed is noticed: nothing waits forever.
constexpr auto kSlice = std::chrono::milliseconds(50);
constexpr uint64_t kAlign = 256;
constexpr auto kWaitValuePoll = std::chrono::microseconds(100);
constexpr size_t kMaxLaunchRecords = 65536;

// The device the sim describes (an H100-like sm_90 part); occupancy uses these.
constexpr uint32_t kMaxThreadsPerBlock = 1024;
constexpr uint32_t kMaxThreadsPerSm = 2048;
constexpr uint32_t kMaxBlocksPerSm = 32;
constexpr uint32_t kRegistersPerSm = 65536;
constexpr uint32_t kRegisterAllocation = 256;  // registers are allocated per warp in units of this
constexpr uint64_t kSharedPerSm = 233472;
constexpr uint64_t kSharedPerBlockOptin = 232448;
constexpr uint64_t kSharedPerBlockDefault = 49152;
constexpr uint64_t kReservedSharedPerBlock = 1024;
constexpr uint32_t kMultiprocessors = 132;
// An H100 as the driver splits it (cuDevSmResourceSplitByCount at its granularity of 8,
// co-scheduling kept): 15 groups of 8 SMs and 12 left over.
constexpr uint32_t kSmGroupSize = 8;
constexpr uint32_t kSmGroups = 15;
// Stream priorities, as an H100's: 0 (least) to -5 (greatest).
constexpr int kLeastPriority = 0;
constexpr int kGreatestPriority = -5;

struct EventState {
  std::mutex m;
  std::condition_variable cv;
  uint64_t recorded = 0;   // generation of the last record call
  uint64_t completed = 0;  // generation whose stream position was reached
  Clock::time_point when{};
};

class SimEvent final : public BackendEvent {
 public:
  SimEvent(int device, bool timing) : device_(device), timing_(timing), st_(std::make_shared<EventState>()) {}
  int device() const noexcept override { return device_; }
  int device_;
  bool timing_;
  std::shared_ptr<EventState> st_;
};

// A partition is only a record of its SM groups: the sim has no SMs to confine work to;
// each launch logs the SMs and groups it was allowed (FUNNEL_SIM_LAUNCH_LOG).
class SimPartition final : public BackendPartition {
 public:
  SimPartition(int device, std::vector<uint32_t> groups, uint32_t sms)
      : device_(device), groups_(std::move(groups)), sms_(sms) {}
  int device() const noexcept override { return device_; }
  uint32_t sm_count() const noexcept override { return sms_; }
  const std::vector<uint32_t>& groups() const noexcept { return groups_; }

 private:
  int device_;
  std::vector<uint32_t> groups_;
  uint32_t sms_;
};

class SimStream final : public BackendStream {
 public:
  SimStream(int device, int priority, const std::atomic<bool>& dying, std::shared_ptr<BackendPartition> partition)
      : device_(device), priority_(priority), dying_(dying), partition_(std::move(partition)) {
    thread_ = std::thread([this] { loop(); });
    // Not the name of the worker that made it (a new thread inherits it): `ps -L` and the
    // placement test tell the sim's stand-in for the GPU from the worker.
    ::pthread_setname_np(thread_.native_handle(), "funnel-simgpu");
  }
  // The partition the stream was made in; null: the whole device.
  const SimPartition* partition() const noexcept { return static_cast<const SimPartition*>(partition_.get()); }
  int priority() const noexcept { return priority_; }
  ~SimStream() override {
    if (on_destroy_) on_destroy_(this);
    {
      std::lock_guard lk(m_);
      closing_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  // Called first thing in the destructor (SimBackend's registry of streams).
  void on_destroy(std::function<void(SimStream*)> f) { on_destroy_ = std::move(f); }
  // How much work was queued and done (both changed under the stream's lock), readable
  // after the stream is gone (its queue drains before its thread ends, so done reaches
  // what was queued).
  struct Progress {
    std::atomic<uint64_t> submitted{0};
    std::atomic<uint64_t> done{0};
    bool drained() const noexcept {
      return done.load(std::memory_order_relaxed) == submitted.load(std::memory_order_relaxed);
    }
  };
  std::shared_ptr<Progress> progress() const { return progress_; }
  int device() const noexcept override { return device_; }
  // Being destroyed: a closure that waits for something outside the stream gives up.
  bool closing() {
    std::lock_guard lk(m_);
    return closing_;
  }

  void enqueue(std::function<void()> f) {
    {
      std::lock_guard lk(m_);
      q_.push_back(std::move(f));
      progress_->submitted.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
  }
  bool idle() {
    std::lock_guard lk(m_);
    return progress_->drained();
  }
  bool wait_idle() {
    std::unique_lock lk(m_);
    while (!progress_->drained()) {
      if (dying_.load()) return false;
      cv_.wait_for(lk, kSlice);
    }
    return true;
  }

 private:
  void loop() {
    std::unique_lock lk(m_);
    for (;;) {
      // The queue is drained before exiting: a destroyed stream's work still completes.
      if (q_.empty()) {
        if (closing_) return;
        cv_.wait_for(lk, kSlice);
        continue;
      }
      auto f = std::move(q_.front());
      q_.pop_front();
      lk.unlock();
      f();
      lk.lock();
      progress_->done.fetch_add(1, std::memory_order_release);
      cv_.notify_all();
    }
  }

  int device_;
  int priority_;
  const std::atomic<bool>& dying_;
  std::shared_ptr<BackendPartition> partition_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  bool closing_ = false;
  std::function<void(SimStream*)> on_destroy_;
  std::shared_ptr<Progress> progress_ = std::make_shared<Progress>();
  std::thread thread_;
};

struct Allocation {
  int device;
  uint64_t size;
  bool placed = false;  // by mem_alloc_at: an mmap at a fixed address, not the heap
};

void release_memory(uint64_t address, const Allocation& a) noexcept {
  if (a.placed)
    ::munmap(reinterpret_cast<void*>(address), a.size);
  else
    std::free(reinterpret_cast<void*>(address));
}

// What cudaFuncSetAttribute changed for one kernel of one module: every SimKernel of
// that name shares it, as every client of a shared CUlibrary shares its CUkernel.
struct KernelSettings {
  std::mutex m;
  uint64_t max_dynamic_shared = 0;
  int32_t carveout = -1;
  int32_t cache_config = 0;
  bool non_portable_cluster = false;
  uint32_t scheduling_policy = 0;
};

struct HostBlock {
  void operator()(void* p) const noexcept { std::free(p); }
};

// A fat binary read with funnel::fatbin: the kernels and variables of its best cubin
// (sm_90 if present, else the highest), and host memory for each variable per device.
class SimModule final : public BackendModule {
 public:
  int sm_arch = 0;
  std::map<std::string, fatbin::KernelInfo> kernels;
  std::map<std::string, fatbin::GlobalInfo> globals;
  uint64_t const_bytes = 0;  // all __constant__ variables

  std::shared_ptr<KernelSettings> settings(const std::string& kernel) {
    std::lock_guard lk(m_);
    auto& s = settings_[kernel];
    if (!s) {
      s = std::make_shared<KernelSettings>();
      s->max_dynamic_shared = kSharedPerBlockDefault - std::min(kSharedPerBlockDefault, kernels.at(kernel).shared_bytes);
    }
    return s;
  }

  // The variable's memory on `device`, created (with its initial bytes) on first use.
  Status variable(int device, const std::string& name, DeviceAddress& address, uint64_t& size) {
    auto g = globals.find(name);
    if (g == globals.end()) return Status::SymbolNotFound;
    std::lock_guard lk(m_);
    auto& block = memory_[{device, name}];
    if (!block) {
      const uint64_t bytes = std::max<uint64_t>(1, (g->second.size + kAlign - 1) / kAlign * kAlign);
      block.reset(std::aligned_alloc(kAlign, bytes));
      if (!block) return Status::MemoryAllocation;
      std::memset(block.get(), 0, bytes);
      if (!g->second.init.empty()) std::memcpy(block.get(), g->second.init.data(), g->second.init.size());
    }
    address = reinterpret_cast<uint64_t>(block.get());
    size = g->second.size;
    return Status::Success;
  }

 private:
  std::mutex m_;
  std::map<std::string, std::shared_ptr<KernelSettings>> settings_;
  std::map<std::pair<int, std::string>, std::unique_ptr<void, HostBlock>> memory_;
};

class SimKernel final : public BackendKernel {
 public:
  SimKernel(const SimModule& m, const fatbin::KernelInfo& k, std::shared_ptr<KernelSettings> s)
      : module(m), info(k), settings(std::move(s)) {}
  const SimModule& module;
  const fatbin::KernelInfo& info;
  std::shared_ptr<KernelSettings> settings;
};

// The best cubin architecture of a fat binary: sm_90 where present, else the highest.
int best_arch(const std::vector<fatbin::FatbinImage>& images) {
  int best = 0;
  for (const auto& im : images) {
    if (im.kind != fatbin::ImageKind::cubin) continue;
    if (im.sm_arch == 90) return 90;
    best = std::max(best, im.sm_arch);
  }
  return best;
}

// Registers allocated to one warp of a kernel using `regs` registers per thread.
uint32_t registers_per_warp(uint32_t regs) {
  return (std::max(regs, 1u) * 32 + kRegisterAllocation - 1) / kRegisterAllocation * kRegisterAllocation;
}

std::string hex(std::span<const std::byte> bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (std::byte b : bytes) {
    out.push_back(digits[static_cast<uint8_t>(b) >> 4]);
    out.push_back(digits[static_cast<uint8_t>(b) & 0xf]);
  }
  return out;
}

class SimBackend final : public Backend {
 public:
  explicit SimBackend(const SimOptions& o)
      : options_(o), used_(static_cast<size_t>(o.devices), 0), faulted_(static_cast<size_t>(o.devices)) {
    limits_.resize(static_cast<size_t>(o.devices), kDefaultLimits);
    if (!o.launch_log.empty()) {
      log_.open(o.launch_log, std::ios::app);
      if (!log_) throw std::runtime_error(fmt::format("cannot open the sim launch log {} (FUNNEL_SIM_LAUNCH_LOG): {}",
                                                      o.launch_log, std::strerror(errno)));
    }
  }

  std::vector<SimLaunchRecord> launches() const {
    std::lock_guard lk(launch_m_);
    return {launches_.begin(), launches_.end()};
  }
  SimCallCounts call_counts() const {
    return {events_created_.load(std::memory_order_relaxed), event_queries_.load(std::memory_order_relaxed),
            stream_queries_.load(std::memory_order_relaxed), stream_writes_.load(std::memory_order_relaxed),
            kernel_stores_.load(std::memory_order_relaxed)};
  }
  ~SimBackend() override {
    for (auto& t : late_threads_) t.join();  // stores held by a test (SimOptions::store_after_idle)
    dying_ = true;
    std::lock_guard lk(m_);
    for (auto& [addr, a] : allocs_) release_memory(addr, a);
  }

  const char* name() const noexcept override { return "sim"; }
  int device_count() const noexcept override { return options_.devices; }

  void describe(int device, ipc::DeviceRecord& out) override {
    out = ipc::DeviceRecord{};
    fmt::format_to_n(out.name, sizeof out.name - 1, "funnel sim device");
    for (size_t i = 0; i < sizeof out.uuid; ++i) out.uuid[i] = static_cast<uint8_t>(i == 0 ? 0xf0 : (i == 15 ? device : 0));
    fmt::format_to_n(out.pci_bus_id, sizeof out.pci_bus_id - 1, "0000:{:02x}:00.0", device);
    out.total_memory = options_.memory_bytes;
    out.ordinal = device;
    auto set = [&](int attr, int v) { out.attributes[attr] = v; };
    set(1, 1024);        // MAX_THREADS_PER_BLOCK
    set(2, 1024);        // MAX_BLOCK_DIM_X
    set(3, 1024);        // MAX_BLOCK_DIM_Y
    set(4, 64);          // MAX_BLOCK_DIM_Z
    set(5, 2147483647);  // MAX_GRID_DIM_X
    set(6, 65535);       // MAX_GRID_DIM_Y
    set(7, 65535);       // MAX_GRID_DIM_Z
    set(8, 49152);       // MAX_SHARED_MEMORY_PER_BLOCK
    set(9, 65536);       // TOTAL_CONSTANT_MEMORY
    set(10, 32);         // WARP_SIZE
    set(11, 2147483647); // MAX_PITCH
    set(12, 65536);      // MAX_REGISTERS_PER_BLOCK
    set(13, 1980000);    // CLOCK_RATE (kHz)
    set(14, 512);        // TEXTURE_ALIGNMENT
    set(15, 1);          // GPU_OVERLAP
    set(16, 132);        // MULTIPROCESSOR_COUNT
    set(17, 0);          // KERNEL_EXEC_TIMEOUT
    set(18, 0);          // INTEGRATED
    set(19, 1);          // CAN_MAP_HOST_MEMORY
    set(20, 0);          // COMPUTE_MODE default
    set(21, 131072);     // MAXIMUM_TEXTURE1D_WIDTH
    set(22, 131072);
    set(23, 65536);
    set(24, 16384);
    set(25, 16384);
    set(26, 16384);
    set(30, 512);        // SURFACE_ALIGNMENT
    set(31, 1);          // CONCURRENT_KERNELS
    set(32, 1);          // ECC_ENABLED
    set(33, device);     // PCI_BUS_ID
    set(34, 0);          // PCI_DEVICE_ID
    set(36, 2619000);    // MEMORY_CLOCK_RATE (kHz)
    set(37, 5120);       // GLOBAL_MEMORY_BUS_WIDTH
    set(38, 52428800);   // L2_CACHE_SIZE
    set(39, 2048);       // MAX_THREADS_PER_MULTIPROCESSOR
    set(40, 5);          // ASYNC_ENGINE_COUNT
    set(41, 1);          // UNIFIED_ADDRESSING
    set(50, 0);          // PCI_DOMAIN_ID
    set(51, 32);         // TEXTURE_PITCH_ALIGNMENT
    set(75, 9);          // COMPUTE_CAPABILITY_MAJOR
    set(76, 0);          // COMPUTE_CAPABILITY_MINOR
    set(78, 1);          // STREAM_PRIORITIES_SUPPORTED
    set(79, 1);          // GLOBAL_L1_CACHE_SUPPORTED
    set(80, 1);          // LOCAL_L1_CACHE_SUPPORTED
    set(81, 233472);     // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
    set(82, 65536);      // MAX_REGISTERS_PER_MULTIPROCESSOR
    set(83, 1);          // MANAGED_MEMORY
    set(84, 0);          // MULTI_GPU_BOARD
    set(86, 1);          // HOST_NATIVE_ATOMIC_SUPPORTED
    set(87, 2);          // SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO
    set(89, 1);          // CONCURRENT_MANAGED_ACCESS
    set(90, 1);          // COMPUTE_PREEMPTION_SUPPORTED
    set(91, 1);          // CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM
    set(95, 1);          // COOPERATIVE_LAUNCH
    set(97, 232448);     // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
    set(99, 1);          // HOST_REGISTER_SUPPORTED
    set(106, 32);        // MAX_BLOCKS_PER_MULTIPROCESSOR
    set(108, 31457280);  // MAX_PERSISTING_L2_CACHE_SIZE
    set(109, 134213632); // MAX_ACCESS_POLICY_WINDOW_SIZE
    set(111, 1024);      // RESERVED_SHARED_MEMORY_PER_BLOCK
    set(115, 1);         // MEMORY_POOLS_SUPPORTED
    set(120, 1);         // CLUSTER_LAUNCH
  }

  Status mem_get_info(int device, uint64_t& free_bytes, uint64_t& total_bytes) override {
    if (Status st = usable(device); st != Status::Success) return st;
    std::lock_guard lk(m_);
    total_bytes = options_.memory_bytes;
    free_bytes = total_bytes - used_[static_cast<size_t>(device)];
    return Status::Success;
  }

  Status mem_alloc(int device, uint64_t size, DeviceAddress& out) override {
    if (Status st = usable(device); st != Status::Success) return st;
    reap();
    if (size == 0 || size > (uint64_t{1} << 48)) return size == 0 ? Status::InvalidValue : Status::MemoryAllocation;
    const uint64_t rounded = (size + kAlign - 1) / kAlign * kAlign;
    std::lock_guard lk(m_);
    auto& used = used_[static_cast<size_t>(device)];
    if (rounded > options_.memory_bytes - used) return Status::MemoryAllocation;
    void* p = std::aligned_alloc(kAlign, rounded);
    if (p == nullptr) return Status::MemoryAllocation;
    used += rounded;
    out = reinterpret_cast<uint64_t>(p);
    allocs_[out] = {device, rounded};
    return Status::Success;
  }

  // As the cuda backend's virtual memory path: exactly `at`, 2 MiB granules, or AlreadyMapped.
  Status mem_alloc_at(int device, uint64_t size, DeviceAddress at) override {
    if (Status st = usable(device); st != Status::Success) return st;
    constexpr uint64_t kGranule = ipc::kPlacedGranule;
    if (size == 0 || at == 0 || at % kGranule != 0) return Status::InvalidValue;
    if (size > (uint64_t{1} << 48)) return Status::MemoryAllocation;
    const uint64_t rounded = (size + kGranule - 1) / kGranule * kGranule;
    std::lock_guard lk(m_);
    auto& used = used_[static_cast<size_t>(device)];
    if (rounded > options_.memory_bytes - used) return Status::MemoryAllocation;
    void* want = to_ptr(at);
    void* got = ::mmap(want, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (got != want) {
      if (got != MAP_FAILED) ::munmap(got, rounded);
      return got == MAP_FAILED && errno == ENOMEM ? Status::MemoryAllocation : Status::AlreadyMapped;
    }
    used += rounded;
    allocs_[at] = {device, rounded, true};
    return Status::Success;
  }

  Status mem_free(int device, DeviceAddress address) override {
    if (!valid(device)) return Status::InvalidDevice;
    std::lock_guard lk(m_);
    auto it = allocs_.find(address);
    if (it == allocs_.end()) return Status::InvalidDevicePointer;
    used_[static_cast<size_t>(it->second.device)] -= it->second.size;
    release_memory(address, it->second);
    allocs_.erase(it);
    return Status::Success;
  }

  Status mem_alloc_async(BackendStream& s, uint64_t size, DeviceAddress& out) override {
    // Host memory is usable at once; handing it out early keeps stream order trivially.
    return mem_alloc(s.device(), size, out);
  }

  // Stream-ordered, and after the work that other streams of the device queued before it:
  // the memory is host memory here, so a copy another stream still runs on it must not find
  // it freed (the fuzzer found that use after free; on a GPU it is the program's race on
  // device memory, not the server's).  Until then the block waits in quarantine_.
  Status mem_free_async(BackendStream& s, DeviceAddress address) override {
    if (Status st = usable(s.device()); st != Status::Success) return st;
    {
      std::lock_guard lk(m_);
      if (allocs_.find(address) == allocs_.end()) return Status::InvalidDevicePointer;
    }
    const int dev = s.device();
    Quarantined q{address, dev, 0, {}};
    {
      std::lock_guard lk(streams_m_);
      q.generation = reset_generation_[static_cast<size_t>(dev)];
      for (const LiveStream& other : streams_)
        if (other.stream != &stream(s) && other.device == dev)
          q.tickets.emplace_back(other.progress, other.progress->submitted.load(std::memory_order_acquire));
    }
    stream(s).enqueue([this, q]() mutable {
      std::lock_guard lk(streams_m_);
      if (q.generation == reset_generation_[static_cast<size_t>(q.device)]) quarantine_.push_back(std::move(q));
      reap_locked();
    });
    return Status::Success;
  }

  // Frees the quarantined blocks whose tickets are all done (streams_m_ held).
  void reap_locked() {
    for (size_t i = 0; i < quarantine_.size();) {
      Quarantined& q = quarantine_[i];
      std::erase_if(q.tickets, [](const auto& t) { return t.first->done.load(std::memory_order_acquire) >= t.second; });
      if (!q.tickets.empty()) {
        ++i;
        continue;
      }
      mem_free(q.device, q.address);
      quarantine_[i] = std::move(quarantine_.back());
      quarantine_.pop_back();
    }
  }
  void reap() {
    std::lock_guard lk(streams_m_);
    reap_locked();
  }


  Status host_register(void* p, uint64_t size) override {
    return (p == nullptr || size == 0) ? Status::InvalidValue : any_device();
  }
  Status host_unregister(void* p) override { return p == nullptr ? Status::InvalidValue : any_device(); }

  void priority_range(int, int& least, int& greatest) override {
    least = kLeastPriority;
    greatest = kGreatestPriority;
  }

  // As the driver, the priority is clamped into priority_range.
  Status create_stream(int device, int priority, const std::shared_ptr<BackendPartition>& partition,
                       std::unique_ptr<BackendStream>& out) override {
    if (Status st = usable(device); st != Status::Success) return st;
    if (partition && partition->device() != device) return Status::InvalidDevice;
    auto s = std::make_unique<SimStream>(device, std::clamp(priority, kGreatestPriority, kLeastPriority), dying_, partition);
    {
      std::lock_guard lk(streams_m_);
      streams_.push_back({s.get(), device, s->progress()});
    }
    s->on_destroy([this](SimStream* gone) {
      std::lock_guard lk(streams_m_);
      std::erase_if(streams_, [gone](const LiveStream& e) { return e.stream == gone; });
    });
    out = std::move(s);
    return Status::Success;
  }

  Status sm_groups(int device, SmGroups& out) override {
    if (!valid(device)) return Status::InvalidDevice;
    out = SmGroups{kMultiprocessors, kSmGroupSize, kSmGroups};
    return Status::Success;
  }

  Status create_partition(int device, std::span<const uint32_t> groups,
                          std::shared_ptr<BackendPartition>& out) override {
    if (Status st = usable(device); st != Status::Success) return st;
    std::vector<uint32_t> g(groups.begin(), groups.end());
    std::sort(g.begin(), g.end());
    if (g.empty() || g.back() >= kSmGroups || std::adjacent_find(g.begin(), g.end()) != g.end())
      return Status::InvalidValue;
    const auto sms = static_cast<uint32_t>(g.size()) * kSmGroupSize;
    out = std::make_shared<SimPartition>(device, std::move(g), sms);
    return Status::Success;
  }

  Status create_event(int device, bool timing, std::unique_ptr<BackendEvent>& out) override {
    events_created_.fetch_add(1, std::memory_order_relaxed);
    if (options_.before_create_event) options_.before_create_event();
    if (Status st = usable(device); st != Status::Success) return st;
    out = std::make_unique<SimEvent>(device, timing);
    return Status::Success;
  }

  Status copy(BackendStream& s, const CopyDesc& c) override {
    if (Status st = usable(s.device()); st != Status::Success) return st;
    if (c.dst.address == 0 || c.src.address == 0) return Status::InvalidValue;
    if (c.height > 1 && (c.dst_pitch < c.width || c.src_pitch < c.width)) return Status::InvalidPitchValue;
    stream(s).enqueue([c] {
      for (uint64_t r = 0; r < c.height; ++r)
        std::memmove(to_ptr(c.dst.address + r * c.dst_pitch), to_ptr(c.src.address + r * c.src_pitch), c.width);
    });
    return Status::Success;
  }

  Status memset(BackendStream& s, DeviceAddress dst, uint64_t pitch, uint64_t width, uint64_t height,
                uint8_t value) override {
    if (Status st = usable(s.device()); st != Status::Success) return st;
    if (dst == 0) return Status::InvalidValue;
    if (height > 1 && pitch < width) return Status::InvalidPitchValue;
    stream(s).enqueue([=] {
      for (uint64_t r = 0; r < height; ++r) std::memset(to_ptr(dst + r * pitch), value, width);
    });
    return Status::Success;
  }

  Status record(BackendEvent& e, BackendStream& s) override {
    if (Status st = usable(s.device()); st != Status::Success) return st;
    auto st = event(e).st_;
    uint64_t gen;
    {
      std::lock_guard lk(st->m);
      gen = ++st->recorded;
    }
    stream(s).enqueue([st, gen] {
      {
        std::lock_guard lk(st->m);
        st->completed = std::max(st->completed, gen);
        st->when = Clock::now();
      }
      st->cv.notify_all();
    });
    return Status::Success;
  }

  Status write_value(BackendStream& s, std::atomic<uint32_t>& word, uint32_t value) override {
    stream_writes_.fetch_add(1, std::memory_order_relaxed);
    return store_late(s, word, value);
  }

  // The sim has no fence to wait behind: the kernel's store lands as the stream write does.
  Status store_word(BackendStream& s, std::atomic<uint32_t>& word, uint32_t value) override {
    if (!options_.kernel_stores) return Status::NotSupported;
    kernel_stores_.fetch_add(1, std::memory_order_relaxed);
    return store_late(s, word, value);
  }

  Status wait(BackendStream& s, BackendEvent& e) override {
    if (Status st = usable(s.device()); st != Status::Success) return st;
    auto st = event(e).st_;
    uint64_t gen;
    {
      std::lock_guard lk(st->m);
      gen = st->recorded;  // the record this wait refers to, as cuStreamWaitEvent captures it
    }
    if (gen == 0) return Status::Success;
    stream(s).enqueue([st, gen, this] {
      std::unique_lock lk(st->m);
      while (st->completed < gen && !dying_.load()) st->cv.wait_for(lk, kSlice);
    });
    return Status::Success;
  }

  // Completion is read before the fault flag: work that completed after a fault was set
  // (a later closure of the faulting stream) is never reported as a success.
  Status query(BackendEvent& e) override {
    event_queries_.fetch_add(1, std::memory_order_relaxed);
    auto& st = *event(e).st_;
    bool complete = false;
    {
      std::lock_guard lk(st.m);
      complete = st.completed >= st.recorded;
    }
    if (Status f = usable(event(e).device_); f != Status::Success) return f;
    return complete ? Status::Success : Status::NotReady;
  }
  Status query(BackendStream& s) override {
    stream_queries_.fetch_add(1, std::memory_order_relaxed);
    const bool idle = stream(s).idle();
    if (Status st = usable(s.device()); st != Status::Success) return st;
    return idle ? Status::Success : Status::NotReady;
  }

  Status elapsed_ms(BackendEvent& start, BackendEvent& end, float& ms) override {
    auto& a = event(start);
    auto& b = event(end);
    if (Status st = usable(a.device_); st != Status::Success) return st;
    if (!a.timing_ || !b.timing_) return Status::InvalidResourceHandle;
    Clock::time_point ta, tb;
    for (auto [ev, t] : {std::pair{&a, &ta}, std::pair{&b, &tb}}) {
      std::lock_guard lk(ev->st_->m);
      if (ev->st_->recorded == 0) return Status::InvalidResourceHandle;
      if (ev->st_->completed < ev->st_->recorded) return Status::NotReady;
      *t = ev->st_->when;
    }
    ms = std::chrono::duration<float, std::milli>(tb - ta).count();
    return Status::Success;
  }

  // A faulted device answers at once, as a poisoned CUDA context does.
  Status synchronize(BackendStream& s) override {
    if (Status st = usable(s.device()); st != Status::Success) return st;
    if (!stream(s).wait_idle()) return Status::Unknown;
    return usable(s.device());
  }

  // ---- kernels ----------------------------------------------------------------

  Status module_load(std::span<const std::byte> image, std::unique_ptr<BackendModule>& out) override {
    if (Status st = any_device(); st != Status::Success) return st;
    auto m = std::make_unique<SimModule>();
    try {
      const auto images = fatbin::parse_fatbin(image);
      m->sm_arch = best_arch(images);
      if (m->sm_arch == 0) return Status::NoKernelImageForDevice;  // PTX only: nothing the sim can read
      for (const auto& im : images) {
        if (im.kind != fatbin::ImageKind::cubin || im.sm_arch != m->sm_arch) continue;
        const auto cubin = fatbin::decompressed_payload(im);
        for (auto& k : fatbin::kernels_of_cubin(cubin)) m->kernels.emplace(k.name, std::move(k));
        for (auto& g : fatbin::globals_of_cubin(cubin)) {
          if (g.constant) m->const_bytes += g.size;
          m->globals.emplace(g.name, std::move(g));
        }
      }
    } catch (const fatbin::Error&) {
      return Status::InvalidKernelImage;
    } catch (const std::bad_alloc&) {
      return Status::MemoryAllocation;
    }
    out = std::move(m);
    return Status::Success;
  }

  Status kernel_get(BackendModule& mod, const std::string& name, std::unique_ptr<BackendKernel>& out,
                    std::vector<ParamLayout>& params, uint32_t& param_bytes) override {
    if (Status st = any_device(); st != Status::Success) return st;
    auto& m = module(mod);
    auto it = m.kernels.find(name);
    if (it == m.kernels.end()) return Status::InvalidDeviceFunction;
    const auto& k = it->second;
    params.clear();
    param_bytes = k.param_bytes;
    for (const auto& p : k.params) {
      params.push_back({p.offset, p.size});
      param_bytes = std::max(param_bytes, p.offset + p.size);
    }
    out = std::make_unique<SimKernel>(m, k, m.settings(name));
    return Status::Success;
  }

  Status global_get(BackendModule& mod, int device, const std::string& name, DeviceAddress& address,
                    uint64_t& size) override {
    if (Status st = usable(device); st != Status::Success) return st;
    return module(mod).variable(device, name, address, size);
  }

  Status launch(BackendStream& s, BackendKernel& kernel, const LaunchDesc& d, std::span<const std::byte> params) override {
    return launch_one(s, kernel, d, params, 0);
  }

  // As the cuda backend: not on a partition's stream (there each launch goes alone).
  Status launch_batch(BackendStream& s, std::span<const BatchedLaunch> launches, size_t& launched) override {
    launched = 0;
    if (stream(s).partition() != nullptr) return Status::NotSupported;
    for (const BatchedLaunch& l : launches) {
      if (Status st = launch_one(s, *l.kernel, l.desc, l.params, static_cast<uint32_t>(launches.size()));
          st != Status::Success)
        return st;
      ++launched;
    }
    return Status::Success;
  }

  Status launch_one(BackendStream& s, BackendKernel& kernel, const LaunchDesc& d, std::span<const std::byte> params,
                    uint32_t batch) {
    if (Status st = usable(s.device()); st != Status::Success) return st;
    auto& k = static_cast<SimKernel&>(kernel);
    const uint64_t threads = uint64_t{d.block[0]} * d.block[1] * d.block[2];
    if (d.grid[0] == 0 || d.grid[1] == 0 || d.grid[2] == 0 || threads == 0 || threads > kMaxThreadsPerBlock ||
        d.block[0] > 1024 || d.block[1] > 1024 || d.block[2] > 64 || d.grid[0] > 2147483647u || d.grid[1] > 65535 ||
        d.grid[2] > 65535)
      return Status::InvalidConfiguration;
    uint64_t max_dynamic = 0;
    {
      std::lock_guard lk(k.settings->m);
      max_dynamic = k.settings->max_dynamic_shared;
    }
    if (d.shared_bytes > max_dynamic) return Status::InvalidValue;
    const SimPartition* part = stream(s).partition();
    const uint32_t sms = part != nullptr ? part->sm_count() : kMultiprocessors;
    if (d.cooperative) {
      int per_sm = 0;
      occupancy(kernel, s.device(), static_cast<uint32_t>(threads), d.shared_bytes, 0, per_sm);
      if (uint64_t{d.grid[0]} * d.grid[1] * d.grid[2] > uint64_t(per_sm) * sms) return Status::CooperativeLaunchTooLarge;
    }
    SimLaunchRecord r;
    r.kernel = k.info.name;
    r.sms = sms;
    r.priority = d.priority != 0 ? std::clamp(d.priority, kGreatestPriority, kLeastPriority) : stream(s).priority();
    if (part != nullptr) r.sm_groups = part->groups();
    std::copy(std::begin(d.grid), std::end(d.grid), r.grid);
    std::copy(std::begin(d.block), std::end(d.block), r.block);
    r.shared_bytes = d.shared_bytes;
    r.batch = batch;
    r.params.resize(params.size());
    if (!params.empty()) std::memcpy(r.params.data(), params.data(), params.size());
    const bool faults = !options_.fault_kernel.empty() && r.kernel == options_.fault_kernel;
    stream(s).enqueue([this, r = std::move(r), faults, device = s.device()]() mutable {
      record_launch(std::move(r));
      // FUNNEL_SIM_FAULT_KERNEL: the "kernel" touched an illegal address; the device is
      // poisoned before anything later in this stream completes.
      if (faults) faulted_[static_cast<size_t>(device)].store(true, std::memory_order_release);
    });
    return Status::Success;
  }

  // From the cubin: registers, static shared and local memory; the rest as the sim
  // device defines it.  preferred_shmem_carveout is -1 (as CUDA's default) until set,
  // which the 7-bit packing carries as 127.
  Status func_attributes(BackendKernel& kernel, int device, ipc::FuncAttributes& out) override {
    if (!valid(device)) return Status::InvalidDevice;
    auto& k = static_cast<SimKernel&>(kernel);
    out = ipc::FuncAttributes{};
    out.shared_size_bytes = k.info.shared_bytes;
    out.const_size_bytes = k.module.const_bytes;
    out.local_size_bytes = k.info.local_bytes;
    out.num_regs = k.info.num_regs;
    const uint32_t warps = kRegistersPerSm / registers_per_warp(k.info.num_regs);
    out.max_threads_per_block = std::min(kMaxThreadsPerBlock, warps * 32);
    out.ptx_version = static_cast<uint32_t>(k.module.sm_arch);
    out.binary_version = static_cast<uint32_t>(k.module.sm_arch);
    std::lock_guard lk(k.settings->m);
    out.max_dynamic_shared_size_bytes = static_cast<uint32_t>(k.settings->max_dynamic_shared);
    out.preferred_shmem_carveout = static_cast<uint32_t>(k.settings->carveout);
    out.non_portable_cluster_size_allowed = k.settings->non_portable_cluster ? 1 : 0;
    out.cluster_scheduling_policy_preference = k.settings->scheduling_policy;
    return Status::Success;
  }

  Status func_set_attribute(BackendKernel& kernel, int device, uint32_t attribute, int32_t value) override {
    if (!valid(device)) return Status::InvalidDevice;
    auto& k = static_cast<SimKernel&>(kernel);
    std::lock_guard lk(k.settings->m);
    switch (attribute) {
      case 8:  // cudaFuncAttributeMaxDynamicSharedMemorySize
        if (value < 0 || static_cast<uint64_t>(value) + k.info.shared_bytes > kSharedPerBlockOptin) return Status::InvalidValue;
        k.settings->max_dynamic_shared = static_cast<uint64_t>(value);
        return Status::Success;
      case 9:  // cudaFuncAttributePreferredSharedMemoryCarveout
        if (value < -1 || value > 100) return Status::InvalidValue;
        k.settings->carveout = value;
        return Status::Success;
      case 14:  // cudaFuncAttributeNonPortableClusterSizeAllowed
        k.settings->non_portable_cluster = value != 0;
        return Status::Success;
      case 15:  // cudaFuncAttributeClusterSchedulingPolicyPreference
        if (value < 0 || value > 2) return Status::InvalidValue;
        k.settings->scheduling_policy = static_cast<uint32_t>(value);
        return Status::Success;
      case ipc::kFuncCacheConfig:
        if (value < 0 || value > 3) return Status::InvalidValue;
        k.settings->cache_config = value;
        return Status::Success;
      default:
        return Status::InvalidValue;
    }
  }

  // Blocks per multiprocessor: the least of the thread, block, register and shared
  // memory limits of the sim device (registers per warp in units of 256, 1 KiB of
  // shared memory reserved per block), as the CUDA occupancy calculator computes them.
  Status occupancy(BackendKernel& kernel, int device, uint32_t block_size, uint64_t dynamic_shared_bytes, uint32_t,
                   int& blocks_per_sm) override {
    if (!valid(device)) return Status::InvalidDevice;
    if (block_size == 0) return Status::InvalidValue;
    auto& k = static_cast<SimKernel&>(kernel);
    blocks_per_sm = 0;
    const uint64_t shared = k.info.shared_bytes + dynamic_shared_bytes;
    if (block_size > kMaxThreadsPerBlock || shared > kSharedPerBlockOptin) return Status::Success;
    const uint32_t warps = (block_size + 31) / 32;
    uint64_t blocks = std::min(kMaxThreadsPerSm / (warps * 32), kMaxBlocksPerSm);
    blocks = std::min<uint64_t>(blocks, kRegistersPerSm / registers_per_warp(k.info.num_regs) / warps);
    if (shared > 0) blocks = std::min<uint64_t>(blocks, kSharedPerSm / (shared + kReservedSharedPerBlock));
    blocks_per_sm = static_cast<int>(blocks);
    return Status::Success;
  }

  // The shared memory left per block when blocks_per_sm blocks share a multiprocessor,
  // within the per-block opt-in limit, less the kernel's static shared memory.
  Status available_dynamic_smem(BackendKernel& kernel, int device, uint32_t blocks_per_sm, uint32_t block_size,
                                uint64_t& bytes) override {
    if (!valid(device)) return Status::InvalidDevice;
    if (blocks_per_sm == 0 || block_size == 0 || block_size > kMaxThreadsPerBlock) return Status::InvalidValue;
    auto& k = static_cast<SimKernel&>(kernel);
    bytes = 0;
    const uint64_t per_block = kSharedPerSm / blocks_per_sm;
    if (per_block <= kReservedSharedPerBlock + k.info.shared_bytes) return Status::Success;
    bytes = std::min(per_block - kReservedSharedPerBlock, kSharedPerBlockOptin) - k.info.shared_bytes;
    return Status::Success;
  }

  // Clusters of the launch's cluster shape that fit at once: the blocks per multiprocessor
  // over the whole sim device, in whole clusters (the sim has no GPC structure).
  Status max_active_clusters(BackendKernel& kernel, int device, const LaunchDesc& d, int& clusters) override {
    if (!valid(device)) return Status::InvalidDevice;
    const uint64_t cluster = uint64_t{std::max(d.cluster[0], 1u)} * std::max(d.cluster[1], 1u) * std::max(d.cluster[2], 1u);
    if (cluster > 16) return Status::InvalidValue;
    int per_sm = 0;
    const uint64_t threads = uint64_t{d.block[0]} * d.block[1] * d.block[2];
    if (Status st = occupancy(kernel, device, static_cast<uint32_t>(std::min<uint64_t>(threads, 0xffffffffu)),
                              d.shared_bytes, 0, per_sm);
        st != Status::Success)
      return st;
    clusters = static_cast<int>(uint64_t(per_sm) * kMultiprocessors / cluster);
    return Status::Success;
  }

  Status wait_value(BackendStream& s, std::atomic<uint32_t>& word, uint32_t value) override {
    if (Status f = usable(s.device()); f != Status::Success) return f;
    SimStream* st = &stream(s);
    st->enqueue([this, st, &word, value] {
      // As CU_STREAM_WAIT_VALUE_GEQ (cuda_backend.cpp says why not EQ).
      while (static_cast<int32_t>(word.load(std::memory_order_acquire) - value) < 0 && !dying_.load() && !st->closing())
        std::this_thread::sleep_for(kWaitValuePoll);
    });
    return Status::Success;
  }

  Status set_limit(int device, Limit limit, uint64_t value) override {
    if (Status st = usable(device); st != Status::Success) return st;
    const auto i = static_cast<size_t>(limit);
    if (i >= 3) return Status::UnsupportedLimit;
    std::lock_guard lk(m_);
    limits_[static_cast<size_t>(device)][i] = value;
    return Status::Success;
  }
  Status get_limit(int device, Limit limit, uint64_t& value) override {
    if (Status st = usable(device); st != Status::Success) return st;
    const auto i = static_cast<size_t>(limit);
    if (i >= 3) return Status::UnsupportedLimit;
    std::lock_guard lk(m_);
    value = limits_[static_cast<size_t>(device)][i];
    return Status::Success;
  }

  bool resets_in_process() const noexcept override { return options_.resets_in_process; }
  uint32_t max_streams_per_client() const noexcept override { return options_.max_streams_per_client; }

  // As cuDevicePrimaryCtxReset: the fault is gone, and so is whatever memory the device
  // still held; limits are back at their defaults.
  Status reset_device(int device) override {
    if (!valid(device)) return Status::InvalidDevice;
    {
      // Quarantined blocks of the device go with the rest of its memory below; one a stream
      // queues later belongs to the old generation and is dropped unfreed.
      std::lock_guard q(streams_m_);
      ++reset_generation_[static_cast<size_t>(device)];
      std::erase_if(quarantine_, [device](const Quarantined& e) { return e.device == device; });
    }
    std::lock_guard lk(m_);
    for (auto it = allocs_.begin(); it != allocs_.end();) {
      if (it->second.device == device) {
        release_memory(it->first, it->second);
        it = allocs_.erase(it);
      } else {
        ++it;
      }
    }
    used_[static_cast<size_t>(device)] = 0;
    limits_[static_cast<size_t>(device)] = kDefaultLimits;
    faulted_[static_cast<size_t>(device)].store(false, std::memory_order_release);
    return Status::Success;
  }

 private:
  // write_value and store_word: stores `value` once the stream gets here (after
  // stream_write_delay), unless the device faulted first.
  Status store_late(BackendStream& s, std::atomic<uint32_t>& word, uint32_t value) {
    if (Status st = usable(s.device()); st != Status::Success) return st;
    // As on a GPU, a stream stops at a fault: what it would have stored after it never lands.
    stream(s).enqueue([this, &word, value, device = static_cast<size_t>(s.device())] {
      if (options_.stream_write_delay.count() > 0) std::this_thread::sleep_for(options_.stream_write_delay);
      auto land = [this, &word, value, device] {
        if (options_.before_store) options_.before_store(value);
        if (faulted_[device].load(std::memory_order_acquire)) return;
        word.store(options_.stream_write_value ? options_.stream_write_value(value) : value, std::memory_order_release);
      };
      if (options_.store_after_idle && options_.store_after_idle(value)) {
        // The stream goes on (and may report idle) before the store is seen.
        std::lock_guard lk(late_m_);
        late_threads_.emplace_back(land);
        return;
      }
      land();
    });
    return Status::Success;
  }

  static void* to_ptr(uint64_t a) noexcept { return reinterpret_cast<void*>(a); }
  static SimStream& stream(BackendStream& s) noexcept { return static_cast<SimStream&>(s); }
  static SimEvent& event(BackendEvent& e) noexcept { return static_cast<SimEvent&>(e); }
  static SimModule& module(BackendModule& m) noexcept { return static_cast<SimModule&>(m); }

  // Runs on the stream thread, in stream order.
  void record_launch(SimLaunchRecord r) {
    if (log_.is_open()) {
      const nlohmann::json line = {{"kernel", r.kernel},
                                   {"grid", {r.grid[0], r.grid[1], r.grid[2]}},
                                   {"block", {r.block[0], r.block[1], r.block[2]}},
                                   {"shared", r.shared_bytes},
                                   {"sms", r.sms},
                                   {"priority", r.priority},
                                   {"sm_groups", r.sm_groups},
                                   {"batch", r.batch},
                                   {"params", hex(std::as_bytes(std::span(r.params)))}};
      std::lock_guard lk(log_m_);
      log_ << line.dump() << '\n';
      log_.flush();
    }
    std::lock_guard lk(launch_m_);
    launches_.push_back(std::move(r));
    if (launches_.size() > kMaxLaunchRecords) launches_.pop_front();
  }
  bool valid(int device) const noexcept { return device >= 0 && device < options_.devices; }
  // InvalidDevice, IllegalAddress while faulted (FUNNEL_SIM_FAULT_KERNEL), else Success.
  Status usable(int device) const noexcept {
    if (!valid(device)) return Status::InvalidDevice;
    return faulted_[static_cast<size_t>(device)].load(std::memory_order_acquire) ? Status::IllegalAddress
                                                                               : Status::Success;
  }
  // As the cuda backend's calls for no particular device (host registration, module
  // loads): they run in the context of the first device that has not faulted.
  Status any_device() const noexcept {
    for (int d = 0; d < options_.devices; ++d)
      if (usable(d) == Status::Success) return Status::Success;
    return Status::IllegalAddress;
  }
  static constexpr std::array<uint64_t, 3> kDefaultLimits{1024, 1u << 20, 8u << 20};

  SimOptions options_;
  // Streams alive (for the tickets of stream-ordered frees) and blocks freed in stream order
  // that wait for other streams' earlier work; streams_m_ is taken before m_.
  struct Quarantined {
    DeviceAddress address;
    int device;
    uint64_t generation;                                   // reset_generation_ when queued
    // A stream's progress, and how much of its work was queued before the free.
    std::vector<std::pair<std::shared_ptr<SimStream::Progress>, uint64_t>> tickets;
  };
  struct LiveStream {
    const SimStream* stream;
    int device;
    std::shared_ptr<SimStream::Progress> progress;
  };
  std::mutex streams_m_;
  std::vector<LiveStream> streams_;
  std::vector<Quarantined> quarantine_;
  std::array<uint64_t, ipc::kMaxDevices> reset_generation_{};
  std::atomic<bool> dying_{false};
  std::mutex m_;
  std::map<uint64_t, Allocation> allocs_;
  std::vector<uint64_t> used_;
  std::vector<std::atomic<bool>> faulted_;
  std::vector<std::array<uint64_t, 3>> limits_;
  mutable std::mutex launch_m_;
  std::deque<SimLaunchRecord> launches_;
  std::atomic<uint64_t> events_created_{0}, event_queries_{0}, stream_queries_{0}, stream_writes_{0}, kernel_stores_{0};
  std::mutex log_m_;
  std::ofstream log_;
  std::mutex late_m_;
  std::vector<std::thread> late_threads_;
};

}  // namespace

std::vector<SimLaunchRecord> sim_launch_records(const Backend& sim) {
  const auto* s = dynamic_cast<const SimBackend*>(&sim);
  return s == nullptr ? std::vector<SimLaunchRecord>{} : s->launches();
}

SimCallCounts sim_call_counts(const Backend& sim) {
  const auto* s = dynamic_cast<const SimBackend*>(&sim);
  return s == nullptr ? SimCallCounts{} : s->call_counts();
}

std::unique_ptr<Backend> make_sim_backend(const SimOptions& options) {
  if (options.devices < 1 || options.devices > static_cast<int>(ipc::kMaxDevices))
    throw std::runtime_error(fmt::format("--sim-devices {} is out of range: use 1..{}", options.devices, ipc::kMaxDevices));
  return std::make_unique<SimBackend>(options);
}

}  // namespace funnel::server
