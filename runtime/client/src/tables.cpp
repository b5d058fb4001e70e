#include "tables.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>

namespace funnel::client {

namespace {

// Device addresses come from the server's address space, host addresses from ours: nothing
// keeps one of our heap blocks or pinned mappings from lying at the address of one of our
// device allocations, and classify() (cudaMemcpyDefault, pointer attributes) would take it
// for device memory (the GPU soak saw wrong data and InvalidValue from it).  Natively the
// driver's unified address space rules that out by reserving the device ranges in the
// process; so does this: each 2 MiB granule of a device allocation is mapped PROT_NONE here.
constexpr uint64_t kGranule = ipc::kPlacedGranule;

// `n` rounded up to a multiple of the granule.
constexpr uint64_t round_up_to_granule(uint64_t n) noexcept { return (n + kGranule - 1) / kGranule * kGranule; }

// [kFarBegin, kFarEnd): a zone where neither we nor the server map anything by default (the
// executable and its heap lie below it, the mmap area of libraries, threads and segments far
// above).  reserve_free_range_locked's range lies just below our other mappings, which is
// where the server's own mappings are when both address spaces are laid out alike (ASLR off,
// as `setarch -R` or a site's policy does, or two mmap bases that fell close): there the
// server refuses every such range (found by CI: every cudaMalloc of mpi_cuda failed with
// AlreadyMapped).
constexpr uint64_t kFarBegin = uint64_t{16} << 40, kFarEnd = uint64_t{64} << 40;

}  // namespace

// ---- address ranges of device allocations (all under mu_) ------------------------------

void ClientTables::unreserve_granules_locked(uint64_t first, uint64_t last) noexcept {
  for (uint64_t g = first; g <= last; ++g) {
    auto it = reserved_granules_.find(g);
    if (it == reserved_granules_.end()) continue;
    if (--it->second == 0) {
      ::munmap(reinterpret_cast<void*>(g * kGranule), kGranule);
      reserved_granules_.erase(it);
    }
  }
}

// False when part of the range is already in use in this process (then nothing is kept).
bool ClientTables::reserve_device_range_locked(uint64_t addr, uint64_t size) noexcept {
  const uint64_t first = addr / kGranule, last = (addr + size - 1) / kGranule;
  for (uint64_t g = first; g <= last; ++g) {
    if (auto it = reserved_granules_.find(g); it != reserved_granules_.end()) {
      ++it->second;
      continue;
    }
    void* want = reinterpret_cast<void*>(g * kGranule);
    void* got = ::mmap(want, kGranule, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE,
                       -1, 0);
    if (got != want) {  // in use (EEXIST), or a kernel before 4.17 that took the address as a hint
      if (got != MAP_FAILED) ::munmap(got, kGranule);
      if (g > first) unreserve_granules_locked(first, g - 1);
      return false;
    }
    reserved_granules_.emplace(g, 1);
  }
  return true;
}

// The device allocation [addr, addr + size) is gone: its address range is no longer
// reserved in this process.
void ClientTables::release_device_range_locked(uint64_t addr, uint64_t size) noexcept {
  if (size != 0) unreserve_granules_locked(addr / kGranule, (addr + size - 1) / kGranule);
}

// Counts the granules of [at, at + span), just mapped PROT_NONE here, as reserved once each.
void ClientTables::keep_reserved_locked(uint64_t at, uint64_t span) {
  for (uint64_t g = at / kGranule; g < (at + span) / kGranule; ++g) reserved_granules_.emplace(g, 1);
}

// A 2 MiB aligned range of at least `size` bytes that nothing of this process uses, reserved
// (PROT_NONE) for a device allocation placed there; 0 when the address space is full.
uint64_t ClientTables::reserve_free_range_locked(uint64_t size) noexcept {
  const uint64_t span = round_up_to_granule(size);
  void* p = ::mmap(nullptr, span + kGranule, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return 0;
  const auto start = reinterpret_cast<uint64_t>(p);
  const uint64_t aligned = round_up_to_granule(start);
  if (aligned > start) ::munmap(p, aligned - start);
  if (const uint64_t end = start + span + kGranule; end > aligned + span)
    ::munmap(reinterpret_cast<void*>(aligned + span), end - (aligned + span));
  keep_reserved_locked(aligned, span);
  return aligned;
}

// A 2 MiB aligned range of at least `size` bytes, reserved (PROT_NONE) at a random place of
// [kFarBegin, kFarEnd); 0 when no free range was found (a smaller address space, say).
uint64_t ClientTables::reserve_far_range_locked(uint64_t size) noexcept {
  const uint64_t span = round_up_to_granule(size);
  if (span > kFarEnd - kFarBegin) return 0;
  // Different in every process (mu_, which the caller holds, guards it).
  static std::mt19937_64 rng(static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                             (static_cast<uint64_t>(::getpid()) << 32));
  const uint64_t places = (kFarEnd - kFarBegin - span) / kGranule + 1;
  for (int tries = 0; tries < 16; ++tries) {
    const uint64_t at = kFarBegin + rng() % places * kGranule;
    void* want = reinterpret_cast<void*>(at);
    void* got = ::mmap(want, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (got == want) {
      keep_reserved_locked(at, span);
      return at;
    }
    if (got != MAP_FAILED) ::munmap(got, span);  // a kernel before 4.17 took it as a hint
  }
  return 0;
}

// ---- device allocations ------------------------------------------------------------------

bool ClientTables::add_alloc(uint64_t addr, const DeviceAlloc& a) {
  std::lock_guard lk(mu_);
  if (!reserve_device_range_locked(addr, a.size)) return false;
  allocs_[addr] = a;
  generation_.fetch_add(1, std::memory_order_release);
  if (a.pooled) {
    try {
      MemPoolObj& p = pool_locked(a.device);
      p.used += a.size;
      p.used_high = std::max(p.used_high, p.used);
      p.reserved_high = std::max(p.reserved_high, p.used);
    } catch (...) {
    }
  }
  return true;
}

uint64_t ClientTables::reserve_placement(uint64_t size, bool far) noexcept {
  std::lock_guard lk(mu_);
  uint64_t at = far ? reserve_far_range_locked(size) : 0;
  if (at == 0) at = reserve_free_range_locked(size);
  return at;
}

void ClientTables::add_placed_alloc(uint64_t addr, const DeviceAlloc& a) {
  std::lock_guard lk(mu_);
  allocs_[addr] = a;
  generation_.fetch_add(1, std::memory_order_release);
}

void ClientTables::release_placements(std::span<const uint64_t> addrs, uint64_t size) noexcept {
  std::lock_guard lk(mu_);
  for (uint64_t a : addrs) release_device_range_locked(a, size);
}

bool ClientTables::add_reservation(uint64_t addr, uint64_t size) {
  std::lock_guard lk(mu_);
  if (!reserve_device_range_locked(addr, size)) return false;
  reservations_[addr] = size;
  return true;
}

bool ClientTables::remove_reservation(uint64_t addr, uint64_t size) noexcept {
  std::lock_guard lk(mu_);
  auto it = reservations_.find(addr);
  if (it == reservations_.end() || it->second != size) return false;
  release_device_range_locked(addr, size);
  reservations_.erase(it);
  return true;
}

std::optional<DeviceAlloc> ClientTables::remove_alloc(uint64_t addr, bool mapped, bool imported) noexcept {
  std::lock_guard lk(mu_);
  auto it = allocs_.find(addr);
  if (it == allocs_.end() || it->second.mapped != mapped || it->second.imported != imported) return std::nullopt;
  const DeviceAlloc a = it->second;
  if (a.pooled) {
    if (auto p = pools_.find(a.device); p != pools_.end()) p->second->used -= std::min(a.size, p->second->used);
  }
  release_device_range_locked(addr, a.size);
  allocs_.erase(it);
  if (!imported && freed_.insert_or_assign(addr, a.size).second) {
    freed_order_.push_back(addr);
    if (freed_order_.size() > kRecentFrees) {
      freed_.erase(freed_order_.front());
      freed_order_.pop_front();
    }
  }
  return a;
}

bool ClientTables::recently_freed(uint64_t addr) noexcept {
  std::lock_guard lk(mu_);
  auto it = freed_.upper_bound(addr);
  if (it == freed_.begin()) return false;
  --it;
  return addr < it->first + std::max<uint64_t>(it->second, 1);
}

bool ClientTables::set_graph_alloc(uint64_t addr) noexcept {
  std::lock_guard lk(mu_);
  auto it = allocs_.find(addr);
  if (it == allocs_.end()) return false;
  it->second.graph = true;
  return true;
}

void ClientTables::add_global(uint64_t addr, const DeviceAlloc& a) {
  std::lock_guard lk(mu_);
  globals_[addr] = a;
  generation_.fetch_add(1, std::memory_order_release);
}

std::optional<DeviceAlloc> ClientTables::device_range(uint64_t addr, uint64_t len) noexcept {
  std::lock_guard lk(mu_);
  for (const auto* table : {&allocs_, &globals_}) {
    auto it = table->upper_bound(addr);
    if (it == table->begin()) continue;
    --it;
    const uint64_t off = addr - it->first;
    if (off > it->second.size) continue;
    if (len <= it->second.size - off) return it->second;
    // Across mappings of one device that follow each other (cuMemMap'd chunks of a reserved
    // range): the first one's record stands for the whole run.
    const DeviceAlloc first = it->second;
    uint64_t covered = it->first + it->second.size;
    const uint64_t end = addr + len;
    if (end < addr || !first.mapped) continue;
    for (++it; it != table->end() && it->first == covered && it->second.mapped && it->second.device == first.device;
         ++it) {
      covered += it->second.size;
      if (covered >= end) return first;
    }
  }
  return std::nullopt;
}

// ---- host memory -------------------------------------------------------------------------

void ClientTables::add_pinned(uintptr_t addr, PinnedAlloc a) {
  std::lock_guard lk(mu_);
  pinned_[addr] = std::move(a);
}

std::optional<PinnedAlloc> ClientTables::remove_pinned(uintptr_t addr) noexcept {
  std::lock_guard lk(mu_);
  auto it = pinned_.find(addr);
  if (it == pinned_.end()) return std::nullopt;
  std::optional<PinnedAlloc> a{std::move(it->second)};
  pinned_.erase(it);
  return a;
}

bool ClientTables::add_registered(uintptr_t addr, uint64_t size) {
  std::lock_guard lk(mu_);
  auto it = registered_.upper_bound(addr + size - 1);
  if (it != registered_.begin()) {
    --it;
    if (it->first + it->second > addr) return false;
  }
  registered_[addr] = size;
  return true;
}

bool ClientTables::remove_registered(uintptr_t addr) noexcept {
  std::lock_guard lk(mu_);
  return registered_.erase(addr) != 0;
}

bool ClientTables::is_registered(uintptr_t addr) noexcept {
  std::lock_guard lk(mu_);
  auto it = registered_.upper_bound(addr);
  return it != registered_.begin() && (--it, addr < it->first + it->second);
}

Classified ClientTables::classify(const void* p) noexcept {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard lk(mu_);
  Classified c;
  for (const auto* table : {&allocs_, &globals_}) {
    auto it = table->upper_bound(a);
    if (it == table->begin()) continue;
    --it;
    if (a < it->first + std::max<uint64_t>(it->second.size, 1)) {
      c.kind = Classified::Device;
      c.base = it->first;
      c.size = it->second.size;
      c.device = it->second.device;
      c.graph = it->second.graph;
      // A cuMemMap'd chunk: with the chunks of the device that follow it without a gap (copies
      // may span them, as on the GPU).
      for (auto next = std::next(it); it->second.mapped && next != table->end() && next->second.mapped &&
                                      next->second.device == c.device && next->first == c.base + c.size;
           ++next)
        c.size += next->second.size;
      return c;
    }
  }
  if (auto it = pinned_.upper_bound(a); it != pinned_.begin()) {
    --it;
    if (a < it->first + it->second.size) {
      c.kind = Classified::Pinned;
      c.base = it->first;
      c.size = it->second.size;
      c.pinned_id = it->second.id;
      c.pinned_device = it->second.device;
      c.managed = it->second.managed;
      c.pinned_flags = it->second.flags;
      return c;
    }
  }
  return c;
}

// ---- streams and events -------------------------------------------------------------------

StreamObj* ClientTables::add_stream(std::unique_ptr<StreamObj> s) {
  StreamObj* raw = s.get();
  std::lock_guard lk(mu_);
  streams_.emplace(raw, std::move(s));
  return raw;
}

std::unique_ptr<StreamObj> ClientTables::remove_stream(StreamObj* s) noexcept {
  std::lock_guard lk(mu_);
  auto node = streams_.extract(s);
  return node.empty() ? nullptr : std::move(node.mapped());
}

std::optional<StreamObj> ClientTables::find_stream(StreamObj* s) noexcept {
  std::lock_guard lk(mu_);
  auto it = streams_.find(s);
  if (it == streams_.end()) return std::nullopt;
  return *it->second;
}

EventObj* ClientTables::add_event(std::unique_ptr<EventObj> ev) {
  EventObj* raw = ev.get();
  std::lock_guard lk(mu_);
  events_.emplace(raw, std::move(ev));
  return raw;
}

std::unique_ptr<EventObj> ClientTables::remove_event(EventObj* ev) noexcept {
  std::lock_guard lk(mu_);
  auto node = events_.extract(ev);
  if (node.empty()) return nullptr;
  release_event_slot_locked(node.mapped()->state_slot);
  return std::move(node.mapped());
}

bool ClientTables::has_event(EventObj* ev) noexcept {
  std::lock_guard lk(mu_);
  return events_.contains(ev);
}

std::optional<EventRef> ClientTables::use_event(EventObj* handle, EventUse use) noexcept {
  std::lock_guard lk(mu_);
  auto it = events_.find(handle);
  if (it == events_.end()) return std::nullopt;
  EventObj& ev = *it->second;
  if (use == EventUse::Query) ev.polled = true;
  if (use == EventUse::Graph) ev.generation = 0;
  if (use == EventUse::Record) {
    // Only an event that the program polls asks for the GPU's store: the store costs the
    // server a cuStreamWriteValue32 per record (doc/design/channel.md, "Event state words").
    const bool store = ev.polled && ev.state_slot != ipc::kNoEventSlot;
    if (store) {
      uint32_t& g = slot_generation_[ev.state_slot];
      if (++g == 0) ++g;  // 0 means "never recorded"
      ev.generation = g;
    } else {
      ev.generation = 0;
    }
  }
  return EventRef{ev.id, ev.device, ev.flags, ev.generation != 0 ? ev.state_slot : ipc::kNoEventSlot, ev.generation};
}

// ---- event state words --------------------------------------------------------------------

uint32_t ClientTables::acquire_event_slot_locked(uint32_t slot_count) noexcept {
  if (slot_generation_.size() != slot_count) {
    slot_generation_.assign(slot_count, 0);
    free_event_slots_.clear();
    for (uint32_t i = slot_count; i-- > 0;) free_event_slots_.push_back(i);
  }
  if (free_event_slots_.empty()) return ipc::kNoEventSlot;
  const uint32_t s = free_event_slots_.back();
  free_event_slots_.pop_back();
  return s;
}

void ClientTables::release_event_slot_locked(uint32_t slot) noexcept {
  if (slot < slot_generation_.size()) free_event_slots_.push_back(slot);
}

uint32_t ClientTables::acquire_event_slot(uint32_t slot_count) noexcept {
  std::lock_guard lk(mu_);
  return acquire_event_slot_locked(slot_count);
}

void ClientTables::release_event_slot(uint32_t slot) noexcept {
  std::lock_guard lk(mu_);
  release_event_slot_locked(slot);
}

bool ClientTables::next_pair_generation(uint32_t slot_count, uint32_t& reached, uint32_t& done,
                                        uint32_t& gen) noexcept {
  std::lock_guard lk(mu_);
  if (reached == ipc::kNoEventSlot && done == ipc::kNoEventSlot) {
    reached = acquire_event_slot_locked(slot_count);
    done = acquire_event_slot_locked(slot_count);
    if (reached == ipc::kNoEventSlot || done == ipc::kNoEventSlot) {
      release_event_slot_locked(reached);
      release_event_slot_locked(done);
      reached = done = ipc::kNoEventSlot;
      return false;
    }
  }
  // The later of the two (wrapping compare), so that neither word's generations go back.
  const uint32_t ga = slot_generation_[reached], gb = slot_generation_[done];
  uint32_t g = (static_cast<int32_t>(ga - gb) >= 0 ? ga : gb) + 1;
  if (g == 0) g = 1;
  slot_generation_[reached] = slot_generation_[done] = g;
  gen = g;
  return true;
}

void ClientTables::release_event_slot_pair(uint32_t reached, uint32_t done) noexcept {
  std::lock_guard lk(mu_);
  release_event_slot_locked(reached);
  release_event_slot_locked(done);
}

// ---- default memory pools -----------------------------------------------------------------

MemPoolObj& ClientTables::pool_locked(int device) {
  auto& p = pools_[device];
  if (!p) {
    p = std::make_unique<MemPoolObj>();
    p->device = device;
  }
  return *p;
}

MemPoolObj* ClientTables::find_pool_locked(const void* handle) noexcept {
  for (const auto& [dev, p] : pools_)
    if (p.get() == handle) return p.get();
  return nullptr;
}

MemPoolObj& ClientTables::default_pool(int device) {
  std::lock_guard lk(mu_);
  return pool_locked(device);
}

std::optional<int> ClientTables::pool_device(const void* handle) noexcept {
  std::lock_guard lk(mu_);
  const MemPoolObj* p = find_pool_locked(handle);
  if (p == nullptr) return std::nullopt;
  return p->device;
}

// ---- cudaDeviceReset ----------------------------------------------------------------------

void ClientTables::drop_device(int device) noexcept {
  std::lock_guard lk(mu_);
  std::erase_if(allocs_, [&](const auto& kv) {
    if (kv.second.device != device) return false;
    release_device_range_locked(kv.first, kv.second.size);
    return true;
  });
  if (auto it = pools_.find(device); it != pools_.end()) it->second->used = 0;
  std::erase_if(streams_, [&](const auto& kv) { return kv.second->device == device; });
  std::erase_if(events_, [&](const auto& kv) { return kv.second->device == device; });
}

}  // namespace funnel::client
