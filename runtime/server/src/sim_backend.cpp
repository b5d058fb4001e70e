// The sim backend: host memory stands in for device memory and every stream is a
// host thread running closures in FIFO order, so the whole server (ordering, events,
// staging, accounting) can be tested on a machine without a GPU.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "funnel/server/backend.hpp"

namespace funnel::server {
namespace {

using Clock = std::chrono::steady_clock;
// Waits are sliced so that a backend being destroyed is noticed: nothing waits forever.
constexpr auto kSlice = std::chrono::milliseconds(50);
constexpr uint64_t kAlign = 256;

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
  int device_;
  bool timing_;
  std::shared_ptr<EventState> st_;
};

class SimStream final : public BackendStream {
 public:
  SimStream(int device, const std::atomic<bool>& dying) : device_(device), dying_(dying) {
    thread_ = std::thread([this] { loop(); });
  }
  ~SimStream() override {
    {
      std::lock_guard lk(m_);
      closing_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  int device() const noexcept override { return device_; }

  void enqueue(std::function<void()> f) {
    {
      std::lock_guard lk(m_);
      q_.push_back(std::move(f));
      ++submitted_;
    }
    cv_.notify_all();
  }
  bool idle() {
    std::lock_guard lk(m_);
    return done_ == submitted_;
  }
  bool wait_idle() {
    std::unique_lock lk(m_);
    while (done_ != submitted_) {
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
      ++done_;
      cv_.notify_all();
    }
  }

  int device_;
  const std::atomic<bool>& dying_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  uint64_t submitted_ = 0;
  uint64_t done_ = 0;
  bool closing_ = false;
  std::thread thread_;
};

struct Allocation {
  int device;
  uint64_t size;
};

class SimBackend final : public Backend {
 public:
  explicit SimBackend(const SimOptions& o) : options_(o), used_(static_cast<size_t>(o.devices), 0) {
    limits_.resize(static_cast<size_t>(o.devices), {1024, 1u << 20, 8u << 20});
  }
  ~SimBackend() override {
    dying_ = true;
    std::lock_guard lk(m_);
    for (auto& [addr, a] : allocs_) std::free(to_ptr(addr));
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
    if (!valid(device)) return Status::InvalidDevice;
    std::lock_guard lk(m_);
    total_bytes = options_.memory_bytes;
    free_bytes = total_bytes - used_[static_cast<size_t>(device)];
    return Status::Success;
  }

  Status mem_alloc(int device, uint64_t size, DeviceAddress& out) override {
    if (!valid(device)) return Status::InvalidDevice;
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

  Status mem_free(int device, DeviceAddress address) override {
    if (!valid(device)) return Status::InvalidDevice;
    std::lock_guard lk(m_);
    auto it = allocs_.find(address);
    if (it == allocs_.end()) return Status::InvalidDevicePointer;
    used_[static_cast<size_t>(it->second.device)] -= it->second.size;
    std::free(to_ptr(address));
    allocs_.erase(it);
    return Status::Success;
  }

  Status mem_alloc_async(BackendStream& s, uint64_t size, DeviceAddress& out) override {
    // Host memory is usable at once; handing it out early keeps stream order trivially.
    return mem_alloc(s.device(), size, out);
  }

  Status mem_free_async(BackendStream& s, DeviceAddress address) override {
    {
      std::lock_guard lk(m_);
      if (allocs_.find(address) == allocs_.end()) return Status::InvalidDevicePointer;
    }
    const int dev = s.device();
    stream(s).enqueue([this, dev, address] { mem_free(dev, address); });
    return Status::Success;
  }

  Status host_register(void* p, uint64_t size) override {
    return (p == nullptr || size == 0) ? Status::InvalidValue : Status::Success;
  }
  Status host_unregister(void* p) override { return p == nullptr ? Status::InvalidValue : Status::Success; }

  void priority_range(int, int& least, int& greatest) override {
    least = 0;
    greatest = -5;
  }

  Status create_stream(int device, int, std::unique_ptr<BackendStream>& out) override {
    if (!valid(device)) return Status::InvalidDevice;
    out = std::make_unique<SimStream>(device, dying_);
    return Status::Success;
  }

  Status create_event(int device, bool timing, std::unique_ptr<BackendEvent>& out) override {
    if (!valid(device)) return Status::InvalidDevice;
    out = std::make_unique<SimEvent>(device, timing);
    return Status::Success;
  }

  Status copy(BackendStream& s, const CopyDesc& c) override {
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
    if (dst == 0) return Status::InvalidValue;
    if (height > 1 && pitch < width) return Status::InvalidPitchValue;
    stream(s).enqueue([=] {
      for (uint64_t r = 0; r < height; ++r) std::memset(to_ptr(dst + r * pitch), value, width);
    });
    return Status::Success;
  }

  Status record(BackendEvent& e, BackendStream& s) override {
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
    stream(s).enqueue([&word, value] { word.store(value, std::memory_order_release); });
    return Status::Success;
  }

  Status wait(BackendStream& s, BackendEvent& e) override {
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

  Status query(BackendEvent& e) override {
    auto& st = *event(e).st_;
    std::lock_guard lk(st.m);
    return st.completed >= st.recorded ? Status::Success : Status::NotReady;
  }
  Status query(BackendStream& s) override { return stream(s).idle() ? Status::Success : Status::NotReady; }

  Status elapsed_ms(BackendEvent& start, BackendEvent& end, float& ms) override {
    auto& a = event(start);
    auto& b = event(end);
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

  Status synchronize(BackendStream& s) override { return stream(s).wait_idle() ? Status::Success : Status::Unknown; }

  // Kernels: not implemented yet in this backend (funnel core part 2 fills these in).
  Status module_load(std::span<const std::byte>, std::unique_ptr<BackendModule>&) override { return Status::NotSupported; }
  Status kernel_get(BackendModule&, const std::string&, std::unique_ptr<BackendKernel>&, std::vector<ParamLayout>&,
                    uint32_t&) override {
    return Status::NotSupported;
  }
  Status global_get(BackendModule&, int, const std::string&, DeviceAddress&, uint64_t&) override {
    return Status::NotSupported;
  }
  Status launch(BackendStream&, BackendKernel&, const LaunchDesc&, std::span<const std::byte>) override {
    return Status::NotSupported;
  }
  Status func_attributes(BackendKernel&, int, ipc::FuncAttributes&) override { return Status::NotSupported; }
  Status func_set_attribute(BackendKernel&, int, uint32_t, int32_t) override { return Status::NotSupported; }
  Status occupancy(BackendKernel&, int, uint32_t, uint64_t, uint32_t, int&) override { return Status::NotSupported; }
  Status wait_value(BackendStream&, std::atomic<uint32_t>&, uint32_t) override { return Status::NotSupported; }

  Status set_limit(int device, Limit limit, uint64_t value) override {
    if (!valid(device)) return Status::InvalidDevice;
    const auto i = static_cast<size_t>(limit);
    if (i >= 3) return Status::UnsupportedLimit;
    std::lock_guard lk(m_);
    limits_[static_cast<size_t>(device)][i] = value;
    return Status::Success;
  }
  Status get_limit(int device, Limit limit, uint64_t& value) override {
    if (!valid(device)) return Status::InvalidDevice;
    const auto i = static_cast<size_t>(limit);
    if (i >= 3) return Status::UnsupportedLimit;
    std::lock_guard lk(m_);
    value = limits_[static_cast<size_t>(device)][i];
    return Status::Success;
  }

 private:
  static void* to_ptr(uint64_t a) noexcept { return reinterpret_cast<void*>(a); }
  static SimStream& stream(BackendStream& s) noexcept { return static_cast<SimStream&>(s); }
  static SimEvent& event(BackendEvent& e) noexcept { return static_cast<SimEvent&>(e); }
  bool valid(int device) const noexcept { return device >= 0 && device < options_.devices; }

  SimOptions options_;
  std::atomic<bool> dying_{false};
  std::mutex m_;
  std::map<uint64_t, Allocation> allocs_;
  std::vector<uint64_t> used_;
  std::vector<std::array<uint64_t, 3>> limits_;
};

}  // namespace

std::unique_ptr<Backend> make_sim_backend(const SimOptions& options) {
  if (options.devices < 1 || options.devices > static_cast<int>(ipc::kMaxDevices))
    throw std::runtime_error(fmt::format("--sim-devices {} is out of range: use 1..{}", options.devices, ipc::kMaxDevices));
  return std::make_unique<SimBackend>(options);
}

}  // namespace funnel::server
