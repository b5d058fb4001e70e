// What a client holds on the server: its device allocations (and what they count against
// FUNNEL_DEVICE_MEM_LIMIT), pinned buffers, events and the symbols it looked up; where a
// copy may read and write.  The worker thread alone uses it; the counters it keeps are read
// by the main loop.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <unordered_map>

#include "funnel/ipc/channel_layout.hpp"
#include "funnel/ipc/commands.hpp"
#include "funnel/ipc/segment.hpp"
#include "funnel/server/backend.hpp"
#include "session/session.hpp"

namespace funnel::server {

struct DeviceAllocation {
  int device;
  uint64_t size;
  bool mapped = false;  // new memory mapped over a reservation (MemMap): freed by MemUnmap only
};

struct EventEntry {
  std::shared_ptr<BackendEvent> event;
  int device;
  bool timing;
  bool recorded = false;
  bool interprocess = false;  // cudaEventInterprocess: may be exported (IpcExportEvent)
  bool imported = false;      // another client's, opened here (IpcOpenEvent)
  // The state word the last record stores before the event itself (nullptr: none): once the
  // client saw it, the event counts as complete to the client though the driver may take a
  // few microseconds more to record it (Worker::event_elapsed waits for that).
  const std::atomic<uint32_t>* word = nullptr;
  uint32_t generation = 0;
  bool seen_complete() const {
    return word != nullptr && ipc::generation_reached(word->load(std::memory_order_acquire), generation);
  }
};

struct PinnedEntry {
  ipc::MappedFile file;
  std::filesystem::path path;
  uint64_t size;
};

// A __device__/__constant__ variable this client asked for: copies may use it.
struct SymbolRange {
  uint64_t size;
  uint64_t module_id;
};

// An array of this client's (ArrayCreate), or a level of one of its mipmapped arrays
// (ArrayLevel: `mipmap` names it; it goes with it).  `bytes` count against the device-memory limit.
struct ArrayEntry {
  std::shared_ptr<BackendArray> array;
  uint64_t mipmap = 0;
  uint64_t bytes = 0;
  std::shared_ptr<BackendArray> parent;  // a level: its mipmapped array (the level's memory)
};

// A texture or surface object: it keeps its array alive (a level's mipmapped array too), so that
// no kernel reads memory freed under it.
struct TextureEntry {
  int device;
  bool surface;
  std::shared_ptr<BackendArray> array;
  std::shared_ptr<BackendArray> parent;
};

class ClientResources {
 public:
  ClientResources(SessionShared& shared, Backend& backend, const ipc::ChannelView& view)
      : shared_(shared), backend_(backend), view_(view), counters_(shared.counters) {}

  // Every change of allocations goes through these: they keep device_used (what counts
  // against the client's device-memory limit) equal to the sum of its allocations.
  void remember_allocation(uint64_t address, const DeviceAllocation& a);
  std::map<uint64_t, DeviceAllocation>::iterator forget_allocation(std::map<uint64_t, DeviceAllocation>::iterator it);
  // Whether `size` more bytes on `device` stay within the client's limit there.
  bool within_mem_limit(int device, uint64_t size) const noexcept;
  // The limit's view of the device (MemGetInfo): free and total bytes made no larger than it.
  void limit_mem_info(int device, uint64_t& free_bytes, uint64_t& total) const noexcept;
  // Returns the memory to the backend and the counters (the entry is the caller's to forget).
  void free_allocation(uint64_t address, const DeviceAllocation& a);
  void free_pinned(PinnedEntry& p);
  // Whether [address, address+extent) lies in one allocation or one symbol of this client.
  bool device_range_ok(uint64_t address, uint64_t extent) const;
  // Whether it lies in one pinned buffer of this client, at the buffer's address here (which the
  // GPU sees too): managed memory, which memsets may set.
  bool pinned_range_ok(uint64_t address, uint64_t extent) const;
  // A copy's source or destination: device memory of the client's, a staging slot or a pinned
  // buffer, checked to hold the whole region.
  Status resolve_location(const ipc::Location& l, uint64_t pitch, uint64_t width, uint64_t height,
                          CopyEndpoint& out, bool& is_device) const;
  EventEntry* find_event(uint64_t id);
  bool uses_device(int device) const;
  // A device fault: the events and allocations on `device` are dropped (the memory freed).
  void release_device(int device);
  // Teardown: the allocations and events freed; then, once the streams are gone, the pinned buffers.
  void release_allocations_and_events();
  void release_pinned();
  // Closes the other clients' allocations this one opened (on `device`; -1: all).
  void close_imported(int device);
  // Destroys the texture and surface objects and arrays on `device` (-1: all).
  void release_arrays(int device);

  std::map<uint64_t, DeviceAllocation> allocations;  // by base address
  std::array<uint64_t, ipc::kMaxDevices> device_used{};  // bytes of allocations by device
  std::unordered_map<uint64_t, EventEntry> events;
  std::unordered_map<uint64_t, PinnedEntry> pinned;
  std::map<uint64_t, SymbolRange> symbols;  // by device address
  std::map<uint64_t, uint64_t> reservations;  // AddressReserve: address -> bytes
  std::map<uint64_t, DeviceAllocation> imported;  // other clients' allocations opened by IpcOpen, by base
  std::map<uint64_t, uint64_t> unmapping;     // MemUnmap asked for, waiting for earlier work: address -> bytes
  uint64_t next_pinned_id = 1;
  std::unordered_map<uint64_t, ArrayEntry> arrays;       // by the client's id
  std::unordered_map<uint64_t, TextureEntry> textures;   // by handle

 private:
  SessionShared& shared_;
  Backend& backend_;
  ipc::ChannelView view_;
  ClientCounters& counters_;
};

}  // namespace funnel::server
