// The sim backend: host memory stands in for device memory and every stream is a
// host thread running closures in FIFO order, so the whole server (ordering, events,
// staging, accounting) can be tested on a machine without a GPU.  Kernels are not
// executed: a launch is recorded (kernel, shape, parameter buffer) in stream order, so
// tests check what a client packed; modules are read with funnel::fatbin.
// Its calls are defined by concern: memory.cpp (allocations, stream-ordered frees, copies,
// memsets), streams.cpp (streams, events, partitions, stream memory writes and waits),
// kernels.cpp (modules, launches, attributes, occupancy), sim_backend.cpp (the device it
// describes, limits, reset, the factory and test hooks).
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backend/sim/device_model.hpp"
#include "backend/sim/modules.hpp"
#include "backend/sim/streams.hpp"
#include "funnel/server/backend.hpp"
#include "funnel/server/sim_backend.hpp"

namespace funnel::server::sim {

struct Allocation {
  int device;
  uint64_t size;
  bool placed = false;  // mapped (mem_alloc_at, mem_alloc_async), not from the heap: munmap it
  bool in_reservation = false;  // mem_map over a reserved range: back to PROT_NONE, not unmapped
};

// Frees an allocation's host memory (memory.cpp).
void release_memory(uint64_t address, const Allocation& a) noexcept;
// Where an array endpoint's region starts (arrays.cpp); its rows are the array's row bytes apart.
std::byte* array_bytes_at(const CopyEndpoint& e);

class SimBackend final : public Backend {
 public:
  explicit SimBackend(const SimOptions& o);

  std::vector<SimLaunchRecord> launches() const {
    std::lock_guard lk(launch_m_);
    return {launches_.begin(), launches_.end()};
  }
  SimCallCounts call_counts() const {
    return {events_created_.load(std::memory_order_relaxed), event_queries_.load(std::memory_order_relaxed),
            stream_queries_.load(std::memory_order_relaxed), stream_writes_.load(std::memory_order_relaxed),
            kernel_stores_.load(std::memory_order_relaxed), profiling_on_.load(std::memory_order_relaxed),
            profiling_off_.load(std::memory_order_relaxed)};
  }
  ~SimBackend() override;

  const char* name() const noexcept override { return "sim"; }
  int device_count() const noexcept override { return options_.devices; }

  // sim_backend.cpp
  void describe(int device, ipc::DeviceRecord& out) override;
  Status set_limit(int device, Limit limit, uint64_t value) override;
  Status get_limit(int device, Limit limit, uint64_t& value) override;
  Status set_profiling(int device, bool on) override;
  Status reset_device(int device) override;
  bool resets_in_process() const noexcept override { return options_.resets_in_process; }
  uint32_t max_streams_per_client() const noexcept override { return options_.max_streams_per_client; }

  // memory.cpp
  Status mem_get_info(int device, uint64_t& free_bytes, uint64_t& total_bytes) override;
  Status mem_alloc(int device, uint64_t size, DeviceAddress& out) override;
  Status mem_alloc_at(int device, uint64_t size, DeviceAddress at) override;
  Status address_reserve(uint64_t size, uint64_t alignment, DeviceAddress& out) override;
  Status address_free(DeviceAddress at, uint64_t size) override;
  Status mem_map(int device, DeviceAddress at, uint64_t size) override;
  Status mem_unmap(int device, DeviceAddress at, uint64_t size) override;
  Status mem_free(int device, DeviceAddress address) override;
  Status mem_alloc_async(BackendStream& s, uint64_t size, DeviceAddress& out) override;
  // arrays.cpp
  Status array_create(int device, const ArrayShape& shape, std::unique_ptr<BackendArray>& out) override;
  Status array_level(BackendArray& mipmap, uint32_t level, std::unique_ptr<BackendArray>& out) override;
  Status texture_create(int device, const ipc::TexCreateCmd& c, const BackendArray* array, uint64_t& handle) override;
  Status texture_destroy(int device, uint64_t handle, bool surface) override;
  Status mem_free_async(BackendStream& s, DeviceAddress address) override;
  Status host_register(void* p, uint64_t size) override;
  Status host_unregister(void* p) override { return p == nullptr ? Status::InvalidValue : any_device(); }
  Status copy(BackendStream& s, const CopyDesc& c) override;
  Status memset(BackendStream& s, DeviceAddress dst, uint64_t pitch, uint64_t width, uint64_t height,
                uint32_t value, uint32_t element) override;

  // streams.cpp
  void priority_range(int, int& least, int& greatest) override;
  Status create_stream(int device, int priority, const std::shared_ptr<BackendPartition>& partition,
                       std::unique_ptr<BackendStream>& out) override;
  Status sm_groups(int device, SmGroups& out) override;
  Status create_partition(int device, std::span<const uint32_t> groups,
                          std::shared_ptr<BackendPartition>& out) override;
  Status create_event(int device, bool timing, std::unique_ptr<BackendEvent>& out) override;
  Status record(BackendEvent& e, BackendStream& s) override;
  Status write_value(BackendStream& s, std::atomic<uint32_t>& word, uint32_t value) override;
  Status stream_mem_op(BackendStream& s, DeviceAddress address, ipc::StreamMemOp op, uint64_t value,
                       uint32_t flags) override;
  Status store_word(BackendStream& s, std::atomic<uint32_t>& word, uint32_t value) override;
  Status wait(BackendStream& s, BackendEvent& e) override;
  Status query(BackendEvent& e) override;
  Status query(BackendStream& s) override;
  Status elapsed_ms(BackendEvent& start, BackendEvent& end, float& ms) override;
  Status synchronize(BackendStream& s) override;
  Status wait_value(BackendStream& s, std::atomic<uint32_t>& word, uint32_t value) override;

  // kernels.cpp
  Status module_load(std::span<const std::byte> image, std::unique_ptr<BackendModule>& out) override;
  Status kernel_get(BackendModule& mod, const std::string& name, std::unique_ptr<BackendKernel>& out,
                    std::vector<ParamLayout>& params, uint32_t& param_bytes) override;
  Status global_get(BackendModule& mod, int device, const std::string& name, DeviceAddress& address,
                    uint64_t& size, bool& managed) override;
  Status launch(BackendStream& s, BackendKernel& kernel, const LaunchDesc& d, std::span<const std::byte> params) override;
  Status launch_batch(BackendStream& s, std::span<const BatchedLaunch> launches, size_t& launched) override;
  Status func_attributes(BackendKernel& kernel, int device, ipc::FuncAttributes& out) override;
  Status func_set_attribute(BackendKernel& kernel, int device, uint32_t attribute, int32_t value) override;
  Status occupancy(BackendKernel& kernel, int device, uint32_t block_size, uint64_t dynamic_shared_bytes, uint32_t,
                   int& blocks_per_sm) override;
  Status available_dynamic_smem(BackendKernel& kernel, int device, uint32_t blocks_per_sm, uint32_t block_size,
                                uint64_t& bytes) override;
  Status max_active_clusters(BackendKernel& kernel, int device, const LaunchDesc& d, int& clusters) override;
  Status max_cluster_size(BackendKernel& kernel, int device, const LaunchDesc& d, int& size) override;
  Status tensor_map_encode(int device, const ipc::TensorMapCmd& c,
                           std::array<std::byte, ipc::kTensorMapBytes>& map) override;
  Status launch_occupancy(BackendKernel& kernel, int device, const LaunchDesc& d, int& per_sm);
  Status reset_persisting_l2(int device) override { return valid(device) ? Status::Success : Status::InvalidDevice; }
  Status stream_access_policy(BackendStream& s, DeviceAddress, uint64_t, float, uint32_t, uint32_t) override {
    return usable(s.device());
  }

 private:
  // memory.cpp
  void reap_locked();
  void reap();
  // mem_alloc and mem_alloc_async: from the heap, or mapped (the top of the address space).
  Status allocate(int device, uint64_t size, bool mapped, DeviceAddress& out);
  // streams.cpp
  Status store_late(BackendStream& s, std::atomic<uint32_t>& word, uint32_t value);
  // kernels.cpp
  Status launch_one(BackendStream& s, BackendKernel& kernel, const LaunchDesc& d, std::span<const std::byte> params,
                    uint32_t batch);
  void record_launch(SimLaunchRecord r);

  static void* to_ptr(uint64_t a) noexcept { return reinterpret_cast<void*>(a); }
  static SimStream& stream(BackendStream& s) noexcept { return static_cast<SimStream&>(s); }
  static SimEvent& event(BackendEvent& e) noexcept { return static_cast<SimEvent&>(e); }
  static SimModule& module(BackendModule& m) noexcept { return static_cast<SimModule&>(m); }

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
  // An H100's defaults: stack, printf FIFO, heap, device-runtime sync depth (not kept: has_limit)
  // and pending launches, L2 fetch granularity, persisting L2 set-aside.
  static constexpr uint64_t kMaxPersistingL2 = 31457280;  // an H100's
  static constexpr std::array<uint64_t, kLimits> kDefaultLimits{1024, 1u << 20, 8u << 20, 0, 2048, 64, 0};

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
  std::map<uint64_t, uint64_t> reservations_;  // address_reserve: address -> bytes (m_)
  std::vector<uint64_t> used_;
  std::vector<std::atomic<bool>> faulted_;
  std::vector<std::array<uint64_t, kLimits>> limits_;
  mutable std::mutex launch_m_;
  std::deque<SimLaunchRecord> launches_;
  std::atomic<uint64_t> events_created_{0}, event_queries_{0}, stream_queries_{0}, stream_writes_{0}, kernel_stores_{0};
  std::atomic<uint64_t> next_texture_{0x7e0000000001};  // texture and surface object handles
  std::atomic<uint64_t> profiling_on_{0}, profiling_off_{0};
  std::mutex log_m_;
  std::ofstream log_;
  std::mutex late_m_;
  std::vector<std::thread> late_threads_;
};

}  // namespace funnel::server::sim
