// The sim backend's memory: host memory stands in for device memory (aligned_alloc, or an
// mmap at a fixed address for mem_alloc_at); frees in stream order wait in quarantine for
// other streams' earlier work; copies and memsets run on the stream's thread.
#include <sys/mman.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "backend/sim/sim_backend.hpp"

namespace funnel::server::sim {

void release_memory(uint64_t address, const Allocation& a) noexcept {
  if (a.in_reservation)
    ::mmap(reinterpret_cast<void*>(address), a.size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
           -1, 0);
  else if (a.placed)
    ::munmap(reinterpret_cast<void*>(address), a.size);
  else
    std::free(reinterpret_cast<void*>(address));
}

Status SimBackend::mem_get_info(int device, uint64_t& free_bytes, uint64_t& total_bytes) {
  if (Status st = usable(device); st != Status::Success) return st;
  std::lock_guard lk(m_);
  total_bytes = options_.memory_bytes;
  free_bytes = total_bytes - used_[static_cast<size_t>(device)];
  return Status::Success;
}

Status SimBackend::allocate(int device, uint64_t size, bool mapped, DeviceAddress& out) {
  if (Status st = usable(device); st != Status::Success) return st;
  reap();
  if (size == 0 || size > (uint64_t{1} << 48)) return size == 0 ? Status::InvalidValue : Status::MemoryAllocation;
  const uint64_t rounded = (size + kAlign - 1) / kAlign * kAlign;
  std::lock_guard lk(m_);
  auto& used = used_[static_cast<size_t>(device)];
  if (rounded > options_.memory_bytes - used) return Status::MemoryAllocation;
  void* p = nullptr;
  if (mapped) {
    p = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return Status::MemoryAllocation;
  } else {
    p = std::aligned_alloc(kAlign, rounded);
    if (p == nullptr) return Status::MemoryAllocation;
  }
  used += rounded;
  out = reinterpret_cast<uint64_t>(p);
  allocs_[out] = {device, rounded, mapped};
  return Status::Success;
}

Status SimBackend::mem_alloc(int device, uint64_t size, DeviceAddress& out) {
  return allocate(device, size, false, out);
}

// As the cuda backend's virtual memory path: exactly `at`, 2 MiB granules, or AlreadyMapped.
Status SimBackend::mem_alloc_at(int device, uint64_t size, DeviceAddress at) {
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

// The virtual memory calls over this process's address space, as the cuda backend's over the
// GPU's: a reservation is a PROT_NONE range, a mapping makes part of it memory of a device.
Status SimBackend::address_reserve(uint64_t size, uint64_t alignment, DeviceAddress& out) {
  constexpr uint64_t kGranule = ipc::kPlacedGranule;
  if (size == 0 || size % kGranule != 0) return Status::InvalidValue;
  if (size > (uint64_t{1} << 40)) return Status::MemoryAllocation;  // this process's address space is the GPU's
  if (alignment < kGranule) alignment = kGranule;
  void* p = ::mmap(nullptr, size + alignment, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return Status::MemoryAllocation;
  const auto base = reinterpret_cast<uint64_t>(p);
  const uint64_t at = (base + alignment - 1) / alignment * alignment;
  if (at > base) ::munmap(p, at - base);
  if (const uint64_t tail = base + size + alignment - (at + size); tail > 0) ::munmap(to_ptr(at + size), tail);
  std::lock_guard lk(m_);
  reservations_[at] = size;
  out = at;
  return Status::Success;
}

Status SimBackend::address_free(DeviceAddress at, uint64_t size) {
  std::lock_guard lk(m_);
  auto it = reservations_.find(at);
  if (it == reservations_.end() || it->second != size) return Status::InvalidValue;
  ::munmap(to_ptr(at), size);
  reservations_.erase(it);
  return Status::Success;
}

Status SimBackend::mem_map(int device, DeviceAddress at, uint64_t size) {
  if (Status st = usable(device); st != Status::Success) return st;
  std::lock_guard lk(m_);
  auto r = reservations_.upper_bound(at);
  if (r == reservations_.begin() || size == 0) return Status::InvalidValue;
  --r;
  if (at + size > r->first + r->second) return Status::InvalidValue;
  auto& used = used_[static_cast<size_t>(device)];
  if (size > options_.memory_bytes - used) return Status::MemoryAllocation;
  if (::mmap(to_ptr(at), size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
    return Status::MemoryAllocation;
  used += size;
  allocs_[at] = {device, size, true, true};
  return Status::Success;
}

Status SimBackend::mem_unmap(int device, DeviceAddress at, uint64_t size) {
  if (!valid(device)) return Status::InvalidDevice;
  std::lock_guard lk(m_);
  auto it = allocs_.find(at);
  if (it == allocs_.end() || !it->second.in_reservation || it->second.size != size) return Status::InvalidValue;
  used_[static_cast<size_t>(it->second.device)] -= it->second.size;
  release_memory(at, it->second);
  allocs_.erase(it);
  return Status::Success;
}

Status SimBackend::mem_free(int device, DeviceAddress address) {
  if (!valid(device)) return Status::InvalidDevice;
  std::lock_guard lk(m_);
  auto it = allocs_.find(address);
  if (it == allocs_.end()) return Status::InvalidDevicePointer;
  used_[static_cast<size_t>(it->second.device)] -= it->second.size;
  release_memory(address, it->second);
  allocs_.erase(it);
  return Status::Success;
}

// Host memory is usable at once; handing it out early keeps stream order trivially.  Mapped
// where the kernel puts this process's mappings (the top of the address space), not from the
// heap: a pooled allocation cannot be moved when it lies on memory of the client (the client
// cannot choose its address, as on a GPU), and an ASan-built client's heap is where an
// ASan-built server's heap is.
Status SimBackend::mem_alloc_async(BackendStream& s, uint64_t size, DeviceAddress& out) {
  return allocate(s.device(), size, true, out);
}

// Stream-ordered, and after the work that other streams of the device queued before it:
// the memory is host memory here, so a copy another stream still runs on it must not find
// it freed (the fuzzer found that use after free; on a GPU it is the program's race on
// device memory, not the server's).  Until then the block waits in quarantine_.
Status SimBackend::mem_free_async(BackendStream& s, DeviceAddress address) {
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
void SimBackend::reap_locked() {
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

void SimBackend::reap() {
  std::lock_guard lk(streams_m_);
  reap_locked();
}

Status SimBackend::host_register(void* p, uint64_t size) {
  return (p == nullptr || size == 0) ? Status::InvalidValue : any_device();
}

Status SimBackend::copy(BackendStream& s, const CopyDesc& in) {
  if (Status st = usable(s.device()); st != Status::Success) return st;
  // An array's region: host memory whose rows are the array's row bytes apart.
  CopyDesc c = in;
  if (c.dst.array != nullptr) {
    c.dst.address = reinterpret_cast<uint64_t>(array_bytes_at(c.dst));
    c.dst_pitch = c.dst.array->shape.row_bytes();
  }
  if (c.src.array != nullptr) {
    c.src.address = reinterpret_cast<uint64_t>(array_bytes_at(c.src));
    c.src_pitch = c.src.array->shape.row_bytes();
  }
  if (c.dst.address == 0 || c.src.address == 0) return Status::InvalidValue;
  if (c.height > 1 && (c.dst_pitch < c.width || c.src_pitch < c.width)) return Status::InvalidPitchValue;
  stream(s).enqueue([c] {
    for (uint64_t r = 0; r < c.height; ++r)
      std::memmove(to_ptr(c.dst.address + r * c.dst_pitch), to_ptr(c.src.address + r * c.src_pitch), c.width);
  });
  return Status::Success;
}

Status SimBackend::memset(BackendStream& s, DeviceAddress dst, uint64_t pitch, uint64_t width, uint64_t height,
                          uint32_t value, uint32_t element) {
  if (Status st = usable(s.device()); st != Status::Success) return st;
  if (dst == 0) return Status::InvalidValue;
  if (height > 1 && pitch < width) return Status::InvalidPitchValue;
  stream(s).enqueue([=] {
    for (uint64_t r = 0; r < height; ++r) {
      auto* row = static_cast<std::byte*>(to_ptr(dst + r * pitch));
      if (element <= 1) {
        std::memset(row, static_cast<int>(value & 0xff), width);
        continue;
      }
      for (uint64_t i = 0; i < width; i += element) std::memcpy(row + i, &value, element);  // little-endian
    }
  });
  return Status::Success;
}

}  // namespace funnel::server::sim
