#include "session/resources.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

#include "session/counter_ops.hpp"
#include "session/ipc_registry.hpp"
#include "session/validation.hpp"

namespace funnel::server {

bool ClientResources::pinned_range_ok(uint64_t address, uint64_t extent) const {
  for (const auto& [id, p] : pinned) {
    const auto base = reinterpret_cast<uint64_t>(p.file.data());
    if (address >= base && within(address - base, extent == 0 ? 1 : extent, p.size)) return true;
  }
  return false;
}

bool ClientResources::device_range_ok(uint64_t address, uint64_t extent) const {
  if (containing(allocations, address, extent) != allocations.end() ||
      containing(symbols, address, extent) != symbols.end() || containing(imported, address, extent) != imported.end())
    return true;
  // Across mappings of one device that follow each other (cuMemMap'd chunks of a reserved range,
  // as PyTorch's expandable segments map them): each must start where the one before ends.
  auto it = allocations.upper_bound(address);
  if (it == allocations.begin() || extent == 0) return false;
  --it;
  const int device = it->second.device;
  uint64_t covered = address;
  const uint64_t end = address + extent;
  if (end < address) return false;
  while (it != allocations.end() && it->second.mapped && it->second.device == device && it->first <= covered) {
    covered = std::max(covered, it->first + it->second.size);
    if (covered >= end) return true;
    ++it;
  }
  return false;
}

EventEntry* ClientResources::find_event(uint64_t id) {
  auto it = events.find(id);
  return it == events.end() ? nullptr : &it->second;
}

Status ClientResources::resolve_location(const ipc::Location& l, uint64_t pitch, uint64_t width, uint64_t height,
                                CopyEndpoint& out, bool& is_device) const {
  uint64_t extent = 0;
  if (Status st = region_extent(pitch, width, height, extent); st != Status::Success) return st;
  switch (l.space) {
    case ipc::MemSpace::Device: {
      if (!device_range_ok(l.address, extent)) return Status::InvalidValue;
      out = {true, l.address};
      is_device = true;
      return Status::Success;
    }
    case ipc::MemSpace::Staging: {
      const auto& hd = view_.header();
      if (l.index >= hd.staging_slots || !within(l.address, extent, hd.staging_slot_size)) return Status::InvalidValue;
      out = {false, reinterpret_cast<uint64_t>(view_.staging(l.index)) + l.address};
      is_device = false;
      return Status::Success;
    }
    case ipc::MemSpace::Pinned: {
      auto it = pinned.find(l.id);
      if (it == pinned.end() || !within(l.address, extent, it->second.size)) return Status::InvalidValue;
      out = {false, reinterpret_cast<uint64_t>(it->second.file.data()) + l.address};
      is_device = false;
      return Status::Success;
    }
    case ipc::MemSpace::Array: {
      // The region's rows stay in one slice of the array, its pitch the array's rows.
      auto it = arrays.find(l.id);
      if (it == arrays.end() || it->second.array->shape.levels != 0) return Status::InvalidValue;
      const ArrayShape& a = it->second.array->shape;
      const uint64_t row = a.row_bytes(), slice = row * a.rows();
      if (row == 0 || (height > 1 && pitch != row)) return Status::InvalidValue;
      const uint64_t z = l.address / slice, y = l.address % slice / row, x = l.address % row;
      if (z >= a.slices() || width > row - x || height > a.rows() - y) return Status::InvalidValue;
      out = CopyEndpoint{true, 0, it->second.array.get(), x, y, z};
      is_device = true;
      return Status::Success;
    }
  }
  return Status::InvalidValue;
}

void ClientResources::free_allocation(uint64_t address, const DeviceAllocation& a) {
  // Memory other clients have open (IPC) stays until the last of them closes it.
  const bool now = a.mapped || shared_.ipc == nullptr || shared_.ipc->owner_frees(address);
  const Status st = !now        ? Status::Success
                    : a.mapped ? backend_.mem_unmap(a.device, address, a.size)
                               : backend_.mem_free(a.device, address);
  if (st != Status::Success) spdlog::warn("client {}: freeing {:#x} failed: status {}", shared_.id, address, static_cast<int>(st));
  sub(counters_.device_memory_bytes, a.size);
  sub(counters_.allocations, 1);
}

void ClientResources::free_pinned(PinnedEntry& p) {
  backend_.host_unregister(p.file.data());
  p.file = ipc::MappedFile();
  if (::unlink(p.path.c_str()) != 0 && errno != ENOENT)
    spdlog::warn("client {}: cannot remove {}: {}", shared_.id, p.path.string(), std::strerror(errno));
  sub(counters_.pinned_bytes, p.size);
  sub(counters_.pinned_allocations, 1);
}

void ClientResources::remember_allocation(uint64_t address, const DeviceAllocation& a) {
  allocations[address] = a;
  device_used[static_cast<size_t>(a.device)] += a.size;
}

std::map<uint64_t, DeviceAllocation>::iterator ClientResources::forget_allocation(
    std::map<uint64_t, DeviceAllocation>::iterator it) {
  device_used[static_cast<size_t>(it->second.device)] -= it->second.size;
  return allocations.erase(it);
}

bool ClientResources::within_mem_limit(int device, uint64_t size) const noexcept {
  const uint64_t limit = shared_.device_mem_limit[static_cast<size_t>(device)];
  const uint64_t used = device_used[static_cast<size_t>(device)];
  return limit == 0 || (used <= limit && size <= limit - used);
}

void ClientResources::limit_mem_info(int device, uint64_t& free_bytes, uint64_t& total) const noexcept {
  // Under FUNNEL_DEVICE_MEM_LIMIT the client sees a GPU of the limit's size, of which
  // the rest of its limit is free (never more than the GPU has free).
  if (const uint64_t limit = shared_.device_mem_limit[static_cast<size_t>(device)]; limit != 0) {
    const uint64_t used = device_used[static_cast<size_t>(device)];
    free_bytes = std::min(free_bytes, used < limit ? limit - used : 0);
    total = std::min(total, limit);
  }
}

bool ClientResources::uses_device(int device) const {
  for (const auto& [addr, a] : allocations)
    if (a.device == device) return true;
  for (const auto& [id, e] : events)
    if (e.device == device) return true;
  return false;
}

void ClientResources::release_device(int device) {
  release_arrays(device);
  for (auto it = events.begin(); it != events.end();) {
    if (it->second.device == device) {
      if (it->second.interprocess && !it->second.imported && shared_.ipc != nullptr) shared_.ipc->forget_event(it->second.event);
      it = events.erase(it);
      sub(counters_.events, 1);
    } else {
      ++it;
    }
  }
  for (auto it = allocations.begin(); it != allocations.end();) {
    if (it->second.device == device) {
      free_allocation(it->first, it->second);
      it = forget_allocation(it);
    } else {
      ++it;
    }
  }
  close_imported(device);
}

void ClientResources::close_imported(int device) {
  for (auto it = imported.begin(); it != imported.end();) {
    if (device >= 0 && it->second.device != device) {
      ++it;
      continue;
    }
    if (shared_.ipc != nullptr) shared_.ipc->close(it->first);
    it = imported.erase(it);
  }
}

void ClientResources::release_arrays(int device) {
  for (auto it = textures.begin(); it != textures.end();) {
    if (device >= 0 && it->second.device != device) {
      ++it;
      continue;
    }
    (void)backend_.texture_destroy(it->second.device, it->first, it->second.surface);
    it = textures.erase(it);
  }
  for (auto it = arrays.begin(); it != arrays.end();) {
    const int d = it->second.array->device;
    if (device >= 0 && d != device) {
      ++it;
      continue;
    }
    device_used[static_cast<size_t>(d)] -= it->second.bytes;
    sub(counters_.device_memory_bytes, it->second.bytes);
    it = arrays.erase(it);
  }
}

void ClientResources::release_allocations_and_events() {
  release_arrays(-1);
  for (const auto& [addr, a] : allocations) free_allocation(addr, a);
  allocations.clear();
  for (const auto& [addr, bytes] : reservations)
    if (const Status st = backend_.address_free(addr, bytes); st != Status::Success)
      spdlog::warn("client {}: freeing the reserved range {:#x} failed: status {}", shared_.id, addr, static_cast<int>(st));
  reservations.clear();
  close_imported(-1);
  device_used = {};
  sub(counters_.events, events.size());
  for (const auto& [id, e] : events)
    if (e.interprocess && !e.imported && shared_.ipc != nullptr) shared_.ipc->forget_event(e.event);
  events.clear();
}

void ClientResources::release_pinned() {
  for (auto& [id, p] : pinned) free_pinned(p);
  pinned.clear();
}

}  // namespace funnel::server
