// The memory commands: allocations, pinned buffers, copies, memset.  As every handler, each
// validates what it was given (everything came out of shared memory) and returns an error
// status without side effects, or does the work and answers (at once or through Completions).
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <system_error>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "funnel/ipc/futex.hpp"
#include "funnel/ipc/protocol.hpp"
#include "session/worker.hpp"
#include "session/validation.hpp"

namespace funnel::server {
namespace {

constexpr uint64_t kPage = 4096;

}  // namespace

// ---- memory ----------------------------------------------------------------

Status Worker::allocate(const ipc::CommandHeader& h, const ipc::MemAllocCmd& c, bool async) {
  if (one_way(h)) return Status::InvalidValue;
  if (Status st = check_device(h.device); st != Status::Success) return st;
  if (c.size == 0) {
    answers_.answer(h, {0});
    return Status::Success;
  }
  DeviceAddress addr = 0;
  int device = h.device;
  if (async) {
    if (c.address != 0) return Status::InvalidValue;  // placed allocations are not pooled
    Status st;
    StreamEntry* s = find_stream(h, st);
    if (s == nullptr) return st;
    // FUNNEL_DEVICE_MEM_LIMIT counts on the device of the stream.
    if (!res_.within_mem_limit(s->device, c.size)) return Status::MemoryAllocation;
    if (st = streams_.before_work(*s); st != Status::Success) return st;
    if (st = backend_.mem_alloc_async(*s->stream, c.size, addr); st != Status::Success) return st;
    streams_.after_work(*s);
    device = s->device;
  } else {
    if (!res_.within_mem_limit(h.device, c.size)) return Status::MemoryAllocation;
    Status st;
    if (c.address == 0) {
      st = backend_.mem_alloc(h.device, c.size, addr);
    } else {
      // A range the client reserved because our first address lay on its own memory.
      if (c.address % ipc::kPlacedGranule != 0 || c.address >= ipc::kPlacedAddressLimit ||
          c.size >= ipc::kPlacedAddressLimit)
        return Status::InvalidValue;
      st = backend_.mem_alloc_at(h.device, c.size, c.address);
      addr = c.address;
      spdlog::debug("client {}: {} bytes placed at {:#x} (the first address lay on the client's memory): status {}",
                    shared_.id, c.size, c.address, static_cast<int>(st));
    }
    if (st != Status::Success) return st;
  }
  res_.remember_allocation(addr, {device, c.size});
  add(counters_.device_memory_bytes, c.size);
  raise_peak(counters_.device_memory_peak, counters_.device_memory_bytes.load(std::memory_order_relaxed));
  add(counters_.allocations, 1);
  answers_.answer(h, {addr});
  return Status::Success;
}

Status Worker::free_memory(const ipc::CommandHeader& h, const ipc::AddressCmd& c, bool async) {
  if (c.address == 0) {
    answers_.answer(h);
    return Status::Success;
  }
  auto it = res_.allocations.find(c.address);
  if (it == res_.allocations.end() || it->second.mapped) return Status::InvalidDevicePointer;
  const DeviceAllocation a = it->second;
  if (async) {
    Status st;
    StreamEntry* s = find_stream(h, st);
    if (s == nullptr) return st;
    if (st = streams_.before_work(*s); st != Status::Success) return st;
    waits_.drain();  // a released wait's word may lie in it (stream_waits.hpp)
    if (st = backend_.mem_free_async(*s->stream, c.address); st != Status::Success) return st;
    streams_.after_work(*s);
    res_.forget_allocation(it);
    sub(counters_.device_memory_bytes, a.size);
    sub(counters_.allocations, 1);
    answers_.answer(h);
    return Status::Success;
  }
  return free_when_drained(h, it);
}

// Removes the allocation now so that later commands cannot use it, and frees (or unmaps) it once
// earlier work is done: every device's streams, not only its device's: a copy or memset on
// another device's stream may use this memory (peer access), and freeing it under that work
// would hand memory that a DMA still uses to the next allocation (found by tests/fuzz).
// A mapping being unmapped stays in res_.unmapping until it is, so that its reservation cannot go
// before it (AddressFree refuses meanwhile).
Status Worker::free_when_drained(const ipc::CommandHeader& h, std::map<uint64_t, DeviceAllocation>::iterator it) {
  const uint64_t address = it->first;
  const DeviceAllocation a = it->second;
  res_.forget_allocation(it);
  if (a.mapped) res_.unmapping[address] = a.size;
  completions_.when_drained(-1, h.reply_slot, h.seq, [this, address, a](Status) {
    waits_.drain();  // a released wait's word may lie in it (stream_waits.hpp)
    res_.free_allocation(address, a);
    if (a.mapped) res_.unmapping.erase(address);
    return Status::Success;
  });
  return Status::Success;
}

// ---- virtual memory (cuMemAddressReserve, cuMemMap, ...) ---------------------------------------

namespace {
constexpr uint64_t kGranule = ipc::kPlacedGranule;
constexpr uint64_t kMaxReservedPerClient = uint64_t{4} << 40;
bool granules(uint64_t address, uint64_t size) noexcept {
  return size != 0 && size % kGranule == 0 && address % kGranule == 0 && address < ipc::kPlacedAddressLimit &&
         size < ipc::kPlacedAddressLimit && address + size <= ipc::kPlacedAddressLimit;
}
// Whether something of `m` (keyed by start, value its size) overlaps [at, at + size).
template <class Map, class SizeOf>
bool overlaps(const Map& m, uint64_t at, uint64_t size, SizeOf size_of) {
  auto it = m.lower_bound(at);
  if (it != m.end() && it->first < at + size) return true;
  return it != m.begin() && std::prev(it)->first + size_of(std::prev(it)->second) > at;
}
}  // namespace

Status Worker::address_reserve(const ipc::CommandHeader& h, const ipc::AddressReserveCmd& c) {
  if (one_way(h)) return Status::InvalidValue;
  const uint64_t alignment = c.alignment == 0 ? kGranule : c.alignment;
  if (!granules(0, c.size) || !std::has_single_bit(alignment) || alignment % kGranule != 0 ||
      alignment > (uint64_t{1} << 30))
    return Status::InvalidValue;
  // At most 4 TiB reserved per client: the server's own address space is shared by every client.
  uint64_t reserved = 0;
  for (const auto& [addr, bytes] : res_.reservations) reserved += bytes;
  if (c.size > kMaxReservedPerClient - std::min(reserved, kMaxReservedPerClient)) return Status::MemoryAllocation;
  DeviceAddress at = 0;
  if (Status st = backend_.address_reserve(c.size, alignment, at); st != Status::Success) return st;
  res_.reservations[at] = c.size;
  answers_.answer(h, {at});
  return Status::Success;
}

Status Worker::address_free(const ipc::CommandHeader& h, const ipc::AddressRangeCmd& c) {
  if (one_way(h)) return Status::InvalidValue;
  auto it = res_.reservations.find(c.address);
  if (it == res_.reservations.end() || it->second != c.size) return Status::InvalidValue;
  // Unmapped first, as the driver requires (and the unmaps done, not only asked for).
  if (overlaps(res_.allocations, c.address, c.size, [](const DeviceAllocation& a) { return a.size; }) ||
      overlaps(res_.unmapping, c.address, c.size, [](uint64_t size) { return size; }))
    return Status::InvalidValue;
  if (Status st = backend_.address_free(c.address, c.size); st != Status::Success) return st;
  res_.reservations.erase(it);
  answers_.answer(h);
  return Status::Success;
}

Status Worker::mem_map(const ipc::CommandHeader& h, const ipc::AddressRangeCmd& c) {
  if (one_way(h)) return Status::InvalidValue;
  if (Status st = check_device(h.device); st != Status::Success) return st;
  if (!granules(c.address, c.size)) return Status::InvalidValue;
  // Inside one reservation of this client's, on nothing mapped or allocated there.
  auto r = res_.reservations.upper_bound(c.address);
  if (r == res_.reservations.begin()) return Status::InvalidValue;
  --r;
  if (c.address + c.size > r->first + r->second) return Status::InvalidValue;
  if (overlaps(res_.allocations, c.address, c.size, [](const DeviceAllocation& a) { return a.size; }))
    return Status::AlreadyMapped;
  if (!res_.within_mem_limit(h.device, c.size)) return Status::MemoryAllocation;
  if (Status st = backend_.mem_map(h.device, c.address, c.size); st != Status::Success) return st;
  res_.remember_allocation(c.address, {h.device, c.size, true});
  add(counters_.device_memory_bytes, c.size);
  raise_peak(counters_.device_memory_peak, counters_.device_memory_bytes.load(std::memory_order_relaxed));
  add(counters_.allocations, 1);
  answers_.answer(h);
  return Status::Success;
}

// As a synchronous free: gone for later commands at once, unmapped once earlier work is done.
Status Worker::mem_unmap(const ipc::CommandHeader& h, const ipc::AddressRangeCmd& c) {
  if (one_way(h)) return Status::InvalidValue;
  auto it = res_.allocations.find(c.address);
  if (it == res_.allocations.end() || !it->second.mapped) return Status::InvalidValue;
  if (it->second.size != c.size) return Status::NotSupported;  // part of a mapping
  return free_when_drained(h, it);
}

Status Worker::mem_get_info(const ipc::CommandHeader& h) {
  if (one_way(h)) return Status::InvalidValue;
  if (Status st = check_device(h.device); st != Status::Success) return st;
  uint64_t free_bytes = 0, total = 0;
  if (Status st = backend_.mem_get_info(h.device, free_bytes, total); st != Status::Success) return st;
  // Under FUNNEL_DEVICE_MEM_LIMIT the client sees a GPU of the limit's size, of which
  // the rest of its limit is free (never more than the GPU has free).
  if (const uint64_t limit = shared_.device_mem_limit[static_cast<size_t>(h.device)]; limit != 0) {
    const uint64_t used = res_.device_used[static_cast<size_t>(h.device)];
    free_bytes = std::min(free_bytes, used < limit ? limit - used : 0);
    total = std::min(total, limit);
  }
  answers_.answer(h, {free_bytes, total});
  return Status::Success;
}

Status Worker::pinned_alloc(const ipc::CommandHeader& h, const ipc::PinnedAllocCmd& c) {
  if (one_way(h)) return Status::InvalidValue;
  if (c.size == 0) {
    answers_.answer(h, {0, 0});
    return Status::Success;
  }
  if (c.size > (uint64_t{1} << 46)) return Status::MemoryAllocation;
  const uint64_t size = (c.size + kPage - 1) / kPage * kPage;
  const uint64_t id = res_.next_pinned_id++;
  PinnedEntry p;
  p.path = shared_.run_dir / fmt::format("{}{}.{}", ipc::kPinnedFilePrefix, shared_.id, id);
  p.size = size;
  try {
    p.file = ipc::MappedFile::create_in_pinned_zone(p.path, size);
  } catch (const std::system_error& e) {
    spdlog::error("client {}: pinned allocation of {} bytes failed: {}", shared_.id, size, e.what());
    return Status::MemoryAllocation;
  }
  if (Status st = backend_.host_register(p.file.data(), size); st != Status::Success) {
    p.file = ipc::MappedFile();
    ::unlink(p.path.c_str());
    return st;
  }
  // Its address here: registered memory is mapped for the GPU at the same address (unified
  // addressing), so the client maps the file there too when it can (zero-copy kernels).
  const auto address = reinterpret_cast<uint64_t>(p.file.data());
  res_.pinned.emplace(id, std::move(p));
  add(counters_.pinned_bytes, size);
  add(counters_.pinned_allocations, 1);
  answers_.answer(h, {id, size, address});
  return Status::Success;
}

Status Worker::pinned_free(const ipc::CommandHeader& h, const ipc::PinnedFreeCmd& c) {
  auto it = res_.pinned.find(c.id);
  if (it == res_.pinned.end()) return Status::InvalidValue;
  auto entry = std::make_shared<PinnedEntry>(std::move(it->second));
  res_.pinned.erase(it);
  completions_.when_drained(-1, h.reply_slot, h.seq, [this, entry](Status) {
    res_.free_pinned(*entry);
    return Status::Success;
  });
  return Status::Success;
}

// ---- copies -----------------------------------------------------------------

Status Worker::copy(const ipc::CommandHeader& h, const ipc::CopyCmd& c) {
  if (!completions_.empty()) {  // a staging slot in use again: its last chunk was seen (gpu_marks_slot)
    const uint32_t slots = view_.header().staging_slots;
    if (c.src.space == ipc::MemSpace::Staging && c.src.index < slots) completions_.settle_reused(view_.staging_state(c.src.index));
    if (c.dst.space == ipc::MemSpace::Staging && c.dst.index < slots) completions_.settle_reused(view_.staging_state(c.dst.index));
  }
  CopyDesc d{};
  bool dst_dev = false, src_dev = false;
  Status st = res_.resolve_location(c.dst, c.dst_pitch, c.width, c.height, d.dst, dst_dev);
  if (st == Status::Success) st = res_.resolve_location(c.src, c.src_pitch, c.width, c.height, d.src, src_dev);
  StreamEntry* s = nullptr;
  if (st == Status::Success) s = find_stream(h, st);
  if (st == Status::Success && c.width != 0 && c.height != 0) {
    d.width = c.width;
    d.height = c.height;
    d.dst_pitch = c.height > 1 ? c.dst_pitch : c.width;
    d.src_pitch = c.height > 1 ? c.src_pitch : c.width;
    st = streams_.before_work(*s);
    if (st == Status::Success) st = backend_.copy(*s->stream, d);
    if (st == Status::Success) streams_.after_work(*s);
  }
  if (st != Status::Success) {
    answers_.release_staging(c);
    return st;
  }
  const uint64_t bytes = c.width * c.height;
  if (dst_dev && !src_dev) bump(counters_.bytes_h2d, bytes);
  if (src_dev && !dst_dev) bump(counters_.bytes_d2h, bytes);
  const bool staging = c.src.space == ipc::MemSpace::Staging || c.dst.space == ipc::MemSpace::Staging;
  if (!staging && one_way(h)) return Status::Success;
  // A staged chunk: the GPU marks the slot itself where it can (Ready to copy out, or Free to
  // fill again), so the client goes on without waiting for this thread.
  if (staging && one_way(h)) {
    if (c.dst.space == ipc::MemSpace::Staging && src_dev && completions_.gpu_marks_slot(*s, c.dst.index, ipc::StagingState::Ready))
      return Status::Success;
    if (c.src.space == ipc::MemSpace::Staging && dst_dev && completions_.gpu_marks_slot(*s, c.src.index, ipc::StagingState::Free))
      return Status::Success;
  }
  if (!staging) {
    // A copy the client waits for: the GPU answers it where it can (Completions).
    completions_.when_complete(*s, h.reply_slot, h.seq, nullptr, true);
    return Status::Success;
  }
  completions_.when_complete(*s, h.reply_slot, h.seq, [this, c](Status done) {
    answers_.release_staging(c);
    return done;
  });
  return Status::Success;
}

Status Worker::memset(const ipc::CommandHeader& h, const ipc::MemsetCmd& c) {
  uint64_t extent = 0;
  if (Status st = region_extent(c.pitch, c.width, c.height, extent); st != Status::Success) return st;
  if (extent == 0) {
    answers_.answer(h);
    return Status::Success;
  }
  if (!res_.device_range_ok(c.address, extent) && !res_.pinned_range_ok(c.address, extent)) return Status::InvalidValue;
  MemsetShape shape{};
  if (Status st = memset_shape(c, shape); st != Status::Success) return st;
  Status st;
  StreamEntry* s = find_stream(h, st);
  if (s == nullptr) return st;
  if (st = streams_.before_work(*s); st != Status::Success) return st;
  if (st = backend_.memset(*s->stream, c.address, shape.pitch, c.width, c.height, shape.value, shape.element); st != Status::Success)
    return st;
  streams_.after_work(*s);
  answers_.answer(h);
  return Status::Success;
}


}  // namespace funnel::server
