// The client-side tables: device allocations (and the address ranges they reserve in this
// process), __device__ variables, pinned and registered host memory, streams, events, the
// devices' default memory pools and the channel's event state words.  One lock guards them
// all; every method takes it itself and, but for with_pool's f, calls nothing outside the
// class while holding it (callers that hold a lock of their own, as HostFuncs and module
// variables do, take theirs first).
#pragma once
#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "funnel/ipc/commands.hpp"
#include "funnel/ipc/segment.hpp"

namespace funnel::client {

struct DeviceAlloc {
  uint64_t size;
  int device;
  bool pooled = false;  // stream-ordered (cudaMallocAsync): counted in the device's MemPoolObj
  bool mapped = false;  // memory mapped over a reserved range (cuMemMap): cuMemUnmap's, not a free's
  bool imported = false;  // another client's, opened by cudaIpcOpenMemHandle: closed, not freed
  bool graph = false;     // a graph's (memory alloc node, graphs.hpp): freed with the graph, not by cudaFree
};
// A device's default memory pool as this client sees it: a cudaMemPool_t points at one
// (api_mempool.cpp).  The pool itself is the server's; the counters are this client's
// stream-ordered allocations that were not freed yet.
struct MemPoolObj {
  int device = 0;
  int reuse[3] = {1, 1, 1};  // cudaMemPoolReuse* (attributes 1 to 3), remembered only
  uint64_t release_threshold = 0;  // remembered only
  uint64_t used = 0;
  uint64_t used_high = 0;
  uint64_t reserved_high = 0;
};
struct PinnedAlloc {
  uint64_t id;
  uint64_t size;
  std::shared_ptr<ipc::MappedFile> file;
  uint64_t device = 0;  // its address in the server, which kernels use (== the host address when mapped there)
  bool managed = false;  // cudaMallocManaged's (managed.hpp): always mapped at the server's address
  unsigned flags = 0;    // cudaHostAlloc's
};
struct StreamObj {
  uint64_t id;
  int device;
  unsigned flags;
  int priority;
};
struct EventObj {
  uint64_t id;
  int device;
  unsigned flags;
  uint32_t state_slot = ipc::kNoEventSlot;  // event state word the GPU stores into (the tables' lock)
  uint32_t generation = 0;  // of the last record if it asked for the store; else 0 (the tables' lock)
  bool polled = false;      // cudaEventQuery was called on it: its records ask for the store
  bool imported = false;    // another process's (cudaIpcOpenEventHandle): it records it, so ask the server
  // Records of it written to the ring (under the ring lock), and how many of them a
  // synchronize or query found complete.  Equal: the event is complete, and its synchronize
  // and query need no round trip (doc/design/channel.md, "Records on idle streams").
  std::atomic<uint64_t> written{0};
  std::atomic<uint64_t> completed{0};
  bool known_complete() const noexcept {
    return completed.load(std::memory_order_acquire) == written.load(std::memory_order_acquire);
  }
  void mark_completed(uint64_t written_before) noexcept {
    uint64_t c = completed.load(std::memory_order_relaxed);
    while (c < written_before && !completed.compare_exchange_weak(c, written_before, std::memory_order_release)) {
    }
  }
};

// Where a pointer lives, by the client's own maps.
struct Classified {
  enum Kind { Device, Pinned, Host } kind = Host;  // Host: pageable or registered
  uint64_t base = 0;    // allocation start (Device: device address; Pinned: local address)
  uint64_t size = 0;    // allocation size
  uint64_t pinned_id = 0;
  uint64_t pinned_device = 0;  // Pinned: the buffer's address in the server (the GPU's)
  bool managed = false;        // Pinned: managed memory (cudaMallocManaged), usable where device memory is
  unsigned pinned_flags = 0;   // Pinned: cudaHostAlloc's flags
  bool graph = false;          // Device: a graph's memory (DeviceAlloc::graph)
  int device = 0;
};

// What a call needs of an event, copied under the tables' lock.
struct EventRef {
  uint64_t id = 0;
  int device = 0;
  unsigned flags = 0;
  uint32_t slot = ipc::kNoEventSlot;  // the state word its last record stores, if it asked for the store
  uint32_t generation = 0;
};
// Plain: a look-up; Record: a record that asks for the GPU's store if the event is polled; Query:
// the program polls it; Graph: a graph records it (no store: its queries ask the server).
enum class EventUse { Plain, Record, Query, Graph };

class ClientTables {
 public:
  // ---- device allocations ------------------------------------------------------
  // Device addresses come from the server's address space, host addresses from ours: each
  // 2 MiB granule of a device allocation is reserved (PROT_NONE) in this process too
  // (tables.cpp says why).
  //
  // Reserves [addr, addr + a.size) here and records the allocation (a pooled one is counted
  // in its device's pool); false, with nothing kept, when part of the range is already in
  // use in this process.
  bool add_alloc(uint64_t addr, const DeviceAlloc& a);
  // A free 2 MiB aligned range of at least `size` bytes, reserved here for an allocation
  // that the server is to place there: in the far zone first when `far`, else (or when the
  // far zone has none) where the kernel offers one; 0 when none was found.
  uint64_t reserve_placement(uint64_t size, bool far) noexcept;
  // Records an allocation placed in a range reserve_placement() gave.
  void add_placed_alloc(uint64_t addr, const DeviceAlloc& a);
  // Gives back ranges of `size` bytes that reserve_placement() gave and no allocation took.
  void release_placements(std::span<const uint64_t> addrs, uint64_t size) noexcept;
  // Forgets the allocation at exactly `addr` (its pool count and range go too); nullopt
  // when there is none, or when it is (`mapped`) or is not a mapping of cuMemMap's, or is (`imported`) or is
  // not another client's memory opened by cudaIpcOpenMemHandle.
  std::optional<DeviceAlloc> remove_alloc(uint64_t addr, bool mapped = false, bool imported = false) noexcept;
  // Marks the allocation at exactly `addr` as a graph's (DeviceAlloc::graph); false for none.
  bool set_graph_alloc(uint64_t addr) noexcept;
  // A range the server reserved (cuMemAddressReserve), reserved here too: false when part of
  // it is in use in this process.  Mappings in it are add_alloc'd (mapped) as they come.
  bool add_reservation(uint64_t addr, uint64_t size);
  // Forgets a reservation of exactly [addr, addr + size); false when there is none.
  bool remove_reservation(uint64_t addr, uint64_t size) noexcept;
  // A __device__/__constant__ variable's address (SymbolGet).
  void add_global(uint64_t addr, const DeviceAlloc& a);
  // The device allocation or variable containing [addr, addr+len), if any.
  std::optional<DeviceAlloc> device_range(uint64_t addr, uint64_t len) noexcept;

  // ---- host memory -------------------------------------------------------------
  void add_pinned(uintptr_t addr, PinnedAlloc a);
  std::optional<PinnedAlloc> remove_pinned(uintptr_t addr) noexcept;
  // cudaHostRegister ranges.  add_registered: false when the range overlaps one registered.
  bool add_registered(uintptr_t addr, uint64_t size);
  bool remove_registered(uintptr_t addr) noexcept;
  bool is_registered(uintptr_t addr) noexcept;  // inside a registered range

  Classified classify(const void* p) noexcept;
  // Whether `addr` lies in one of the last kRecentFrees device allocations freed (and is not in a
  // live one since): funnel_memory_kind calls such an address invalid rather than host memory.
  bool recently_freed(uint64_t addr) noexcept;
  // Changes whenever device memory appears in this process's address space (an allocation, a
  // module global, an opened IPC handle): a range classify() called host memory stays host memory
  // while it does not (funnel_memory_generation).
  uint64_t memory_generation() const noexcept { return generation_.load(std::memory_order_acquire); }

  // ---- streams and events --------------------------------------------------------
  // The table owns them; the application's handle is the raw pointer returned.
  StreamObj* add_stream(std::unique_ptr<StreamObj> s);
  // nullptr when `s` is not one of ours.
  std::unique_ptr<StreamObj> remove_stream(StreamObj* s) noexcept;
  std::optional<StreamObj> find_stream(StreamObj* s) noexcept;  // a copy

  EventObj* add_event(std::unique_ptr<EventObj> ev);
  // nullptr when `ev` is not one of ours; its state word goes back to the free ones.
  std::unique_ptr<EventObj> remove_event(EventObj* ev) noexcept;
  bool has_event(EventObj* ev) noexcept;
  // What a call needs of `ev`, nullopt when it is not one of ours.  Query marks it polled;
  // Record takes the next generation of its state word when its record asks for the store.
  std::optional<EventRef> use_event(EventObj* ev, EventUse use) noexcept;

  // ---- event state words (channel.md, "Events") ----------------------------------
  // `slot_count` is the channel's number of event slots.  A slot's generations only grow,
  // across the events that use it in turn.
  uint32_t acquire_event_slot(uint32_t slot_count) noexcept;  // kNoEventSlot when all are taken
  void release_event_slot(uint32_t slot) noexcept;
  // A host function's pair of words: when `reached` and `done` are kNoEventSlot, takes two
  // slots for them first (false, with none taken, when two are not free); then sets both
  // one generation newer than the last of either, into `gen`.
  bool next_pair_generation(uint32_t slot_count, uint32_t& reached, uint32_t& done, uint32_t& gen) noexcept;
  void release_event_slot_pair(uint32_t reached, uint32_t done) noexcept;

  // ---- default memory pools --------------------------------------------------------
  // The default pool of `device`, made at first use, never freed.
  MemPoolObj& default_pool(int device);
  // The device whose default pool `handle` is; nullopt for any other handle.
  std::optional<int> pool_device(const void* handle) noexcept;
  // Runs f(MemPoolObj&) under the lock when `handle` is one of our pools (attributes are
  // read and written in place); `otherwise` when it is not.
  template <class R, class F>
  R with_pool(const void* handle, R otherwise, F&& f) {
    std::lock_guard lk(mu_);
    MemPoolObj* p = find_pool_locked(handle);
    return p != nullptr ? f(*p) : otherwise;
  }

  // cudaDeviceReset: the server freed everything of ours on `device`; forget it here too.
  void drop_device(int device) noexcept;

 private:
  void unreserve_granules_locked(uint64_t first, uint64_t last) noexcept;
  bool reserve_device_range_locked(uint64_t addr, uint64_t size) noexcept;
  void release_device_range_locked(uint64_t addr, uint64_t size) noexcept;
  void keep_reserved_locked(uint64_t at, uint64_t span);
  uint64_t reserve_free_range_locked(uint64_t size) noexcept;
  uint64_t reserve_far_range_locked(uint64_t size) noexcept;
  MemPoolObj& pool_locked(int device);
  MemPoolObj* find_pool_locked(const void* handle) noexcept;
  uint32_t acquire_event_slot_locked(uint32_t slot_count) noexcept;
  void release_event_slot_locked(uint32_t slot) noexcept;

  std::mutex mu_;
  std::map<uint64_t, DeviceAlloc> allocs_;
  std::atomic<uint64_t> generation_{0};  // memory_generation()
  static constexpr size_t kRecentFrees = 4096;
  std::map<uint64_t, uint64_t> freed_;     // recently freed device ranges: address -> bytes
  std::deque<uint64_t> freed_order_;       // their addresses, oldest first
  std::map<uint64_t, uint64_t> reservations_;  // cuMemAddressReserve: address -> bytes   // device address -> allocation
  // The 2 MiB granules of device addresses reserved in this process (PROT_NONE) -> how many
  // allocations use each.
  std::map<uint64_t, uint32_t> reserved_granules_;
  std::map<uintptr_t, PinnedAlloc> pinned_;   // local address -> pinned file
  std::map<uintptr_t, uint64_t> registered_;  // cudaHostRegister ranges
  std::map<uint64_t, DeviceAlloc> globals_;   // __device__/__constant__ variables (SymbolGet)
  std::map<StreamObj*, std::unique_ptr<StreamObj>> streams_;
  std::map<EventObj*, std::unique_ptr<EventObj>> events_;
  std::map<int, std::unique_ptr<MemPoolObj>> pools_;  // by device, made at first use, never freed
  std::vector<uint32_t> free_event_slots_;
  std::vector<uint32_t> slot_generation_;
};

}  // namespace funnel::client
