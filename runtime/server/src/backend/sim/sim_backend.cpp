// The sim backend (sim_backend.hpp says what it is and where each part lives).  This file:
// the backend's life, the device it describes, limits, reset, and the factory and test
// hooks of funnel/server/sim_backend.hpp.
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "backend/sim/sim_backend.hpp"
#include "funnel/server/sim_backend.hpp"

namespace funnel::server {
namespace sim {

SimBackend::SimBackend(const SimOptions& o)
    : options_(o), used_(static_cast<size_t>(o.devices), 0), faulted_(static_cast<size_t>(o.devices)) {
  limits_.resize(static_cast<size_t>(o.devices), kDefaultLimits);
  if (!o.launch_log.empty()) {
    log_.open(o.launch_log, std::ios::app);
    if (!log_) throw std::runtime_error(fmt::format("cannot open the sim launch log {} (FUNNEL_SIM_LAUNCH_LOG): {}",
                                                    o.launch_log, std::strerror(errno)));
  }
}

SimBackend::~SimBackend() {
  for (auto& t : late_threads_) t.join();  // stores held by a test (SimOptions::store_after_idle)
  dying_ = true;
  std::lock_guard lk(m_);
  for (auto& [addr, a] : allocs_) release_memory(addr, a);
}

void SimBackend::describe(int device, ipc::DeviceRecord& out) {
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
  set(108, static_cast<int>(kMaxPersistingL2));  // MAX_PERSISTING_L2_CACHE_SIZE
  set(109, 134213632); // MAX_ACCESS_POLICY_WINDOW_SIZE
  set(111, 1024);      // RESERVED_SHARED_MEMORY_PER_BLOCK
  set(115, 1);         // MEMORY_POOLS_SUPPORTED
  set(120, 1);         // CLUSTER_LAUNCH
}

namespace {
// The limits the sim has: all but the device runtime's sync depth, unsupported on Hopper under
// CUDA 13 (measured on the H100).
bool has_limit(Limit limit) noexcept {
  return static_cast<uint32_t>(limit) < kLimits && limit != Limit::DevRuntimeSyncDepth;
}
}  // namespace

Status SimBackend::set_limit(int device, Limit limit, uint64_t value) {
  if (Status st = usable(device); st != Status::Success) return st;
  if (!has_limit(limit)) return Status::UnsupportedLimit;
  // As the driver: the L2 fetch granularity is 0 to 128 bytes; the persisting set-aside at most
  // the device's MAX_PERSISTING_L2_CACHE_SIZE (describe()).
  if (limit == Limit::MaxL2FetchGranularity && value > 128) return Status::InvalidValue;
  if (limit == Limit::PersistingL2CacheSize && value > kMaxPersistingL2) return Status::InvalidValue;
  std::lock_guard lk(m_);
  limits_[static_cast<size_t>(device)][static_cast<size_t>(limit)] = value;
  return Status::Success;
}

Status SimBackend::get_limit(int device, Limit limit, uint64_t& value) {
  if (Status st = usable(device); st != Status::Success) return st;
  if (!has_limit(limit)) return Status::UnsupportedLimit;
  std::lock_guard lk(m_);
  value = limits_[static_cast<size_t>(device)][static_cast<size_t>(limit)];
  return Status::Success;
}

// Counted (sim_call_counts), and logged as the server's driver would show it in a profiler.
Status SimBackend::set_profiling(int device, bool on) {
  if (Status st = usable(device); st != Status::Success) return st;
  (on ? profiling_on_ : profiling_off_).fetch_add(1, std::memory_order_relaxed);
  spdlog::info("device {}: profiling {}", device, on ? "started" : "stopped");
  return Status::Success;
}

// As cuDevicePrimaryCtxReset: the fault is gone, and so is whatever memory the device
// still held; limits are back at their defaults.
Status SimBackend::reset_device(int device) {
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

}  // namespace sim

std::vector<SimLaunchRecord> sim_launch_records(const Backend& backend) {
  const auto* s = dynamic_cast<const sim::SimBackend*>(&backend);
  return s == nullptr ? std::vector<SimLaunchRecord>{} : s->launches();
}

SimCallCounts sim_call_counts(const Backend& backend) {
  const auto* s = dynamic_cast<const sim::SimBackend*>(&backend);
  return s == nullptr ? SimCallCounts{} : s->call_counts();
}

std::unique_ptr<Backend> make_sim_backend(const SimOptions& options) {
  if (options.devices < 1 || options.devices > static_cast<int>(ipc::kMaxDevices))
    throw std::runtime_error(fmt::format("--sim-devices {} is out of range: use 1..{}", options.devices, ipc::kMaxDevices));
  return std::make_unique<sim::SimBackend>(options);
}

}  // namespace funnel::server
