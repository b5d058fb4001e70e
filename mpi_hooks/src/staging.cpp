// Device buffers staged through pinned host memory: staging.hpp.
#include "staging.hpp"

#include <cuda_runtime_api.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <unordered_set>

#include "funnel/funnel.h"

namespace funnel::mpi {
namespace {

// ---- host memory this process has mapped --------------------------------------------------
// funnel knows its device allocations and the ones freed lately; an address it does not know
// may still be a device pointer of another process (or one freed long ago), which the MPI
// library would fault on.  Such an address is not mapped here: mincore says so.  The answer is
// kept per 2 MiB granule, so a program that reuses its buffers asks once per granule.
constexpr uintptr_t kGranule = uintptr_t{1} << 21;
std::mutex g_mapped_mu;
std::unordered_set<uintptr_t> g_mapped;  // granules seen mapped

bool mapped(const void* p, size_t bytes) noexcept {
  const long page_size = ::sysconf(_SC_PAGESIZE);
  const auto page = static_cast<uintptr_t>(page_size > 0 ? page_size : 4096);
  const auto first = reinterpret_cast<uintptr_t>(p);
  const uintptr_t last = first + (bytes == 0 ? 0 : bytes - 1);
  for (uintptr_t g = first / kGranule; g <= last / kGranule; ++g) {
    {
      std::lock_guard lk(g_mapped_mu);
      if (g_mapped.contains(g)) continue;
    }
    // The first and last page of the range within this granule.
    const uintptr_t lo = std::max(first, g * kGranule) / page * page;
    const uintptr_t hi = std::min(last, g * kGranule + kGranule - 1) / page * page;
    unsigned char v[1];
    for (uintptr_t at : {lo, hi})
      if (::mincore(reinterpret_cast<void*>(at), 1, v) != 0) return false;
    std::lock_guard lk(g_mapped_mu);
    g_mapped.insert(g);
  }
  return true;
}

// ---- the pool of pinned staging buffers ----------------------------------------------------
constexpr size_t kMinClass = 4096;
size_t size_class(size_t bytes) noexcept {
  size_t c = kMinClass;
  while (c < bytes) c <<= 1;
  return c;
}
std::mutex g_pool_mu;
std::multimap<size_t, void*> g_pool;  // free buffers by size class
size_t g_pool_bytes = 0;
constexpr size_t kPoolKeep = size_t{256} << 20;  // free bytes kept for reuse; the rest freed

// ---- requests with staged buffers ------------------------------------------------------------
std::mutex g_pending_mu;
std::map<MPI_Request, std::vector<Staged>> g_pending;
struct Persistent {
  Staged buffer;
  bool send;
  bool active = false;  // started and not completed yet
};
std::map<MPI_Request, Persistent> g_persistent;
std::vector<std::vector<Staged>> g_orphans;  // staged requests freed while active (never completed here)
std::atomic<size_t> g_pending_count{0};      // entries of g_pending and g_persistent

void count_locked() { g_pending_count.store(g_pending.size() + g_persistent.size(), std::memory_order_release); }

}  // namespace

namespace {

struct TypeShape {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Aint extent = 0, true_lb = 0, true_extent = 0;
  int size = 0;
};
// The shapes of the predefined datatypes this thread used (a predefined handle always means the
// same type; a derived one may be freed and its handle reused, so those are asked each time).
thread_local std::array<TypeShape, 8> t_named;
thread_local unsigned t_next_named = 0;

bool shape_of(MPI_Datatype type, TypeShape& s) noexcept {
  for (const TypeShape& n : t_named)
    if (n.type == type && type != MPI_DATATYPE_NULL) {
      s = n;
      return true;
    }
  MPI_Aint lb = 0;
  s.type = type;
  if (PMPI_Type_get_extent(type, &lb, &s.extent) != MPI_SUCCESS ||
      PMPI_Type_get_true_extent(type, &s.true_lb, &s.true_extent) != MPI_SUCCESS ||
      PMPI_Type_size(type, &s.size) != MPI_SUCCESS)
    return false;
  int integers = 0, addresses = 0, types = 0, combiner = 0;
  if (PMPI_Type_get_envelope(type, &integers, &addresses, &types, &combiner) == MPI_SUCCESS &&
      combiner == MPI_COMBINER_NAMED)
    t_named[t_next_named++ % t_named.size()] = s;
  return true;
}

}  // namespace

Extent extent_of(int count, MPI_Datatype type) noexcept {
  if (count <= 0 || type == MPI_DATATYPE_NULL) return {};
  TypeShape t;
  if (!shape_of(type, t)) return {};
  // Element i covers [i * extent + true_lb, i * extent + true_lb + true_extent).
  const MPI_Aint last = static_cast<MPI_Aint>(count - 1) * t.extent;
  const MPI_Aint lo = std::min<MPI_Aint>(0, last) + t.true_lb;
  const MPI_Aint hi = std::max<MPI_Aint>(0, last) + t.true_lb + t.true_extent;
  const auto bytes = static_cast<size_t>(std::max<MPI_Aint>(hi - lo, 0));
  return {static_cast<std::ptrdiff_t>(lo), bytes, static_cast<size_t>(t.size) * static_cast<size_t>(count) == bytes};
}

Extent extent_of(const int* counts, const int* displs, int n, MPI_Datatype type) noexcept {
  MPI_Aint lb = 0, extent = 0;
  if (counts == nullptr || displs == nullptr || PMPI_Type_get_extent(type, &lb, &extent) != MPI_SUCCESS) return {};
  std::ptrdiff_t lo = 0, hi = 0;
  size_t covered = 0;
  bool any = false, dense = true;
  for (int i = 0; i < n; ++i) {
    const Extent e = extent_of(counts[i], type);
    if (e.bytes == 0) continue;
    covered += e.bytes;
    dense = dense && e.dense;
    const std::ptrdiff_t start = static_cast<std::ptrdiff_t>(displs[i]) * extent + e.offset;
    const std::ptrdiff_t end = start + static_cast<std::ptrdiff_t>(e.bytes);
    lo = any ? std::min(lo, start) : start;
    hi = any ? std::max(hi, end) : end;
    any = true;
  }
  // Dense when the pieces are dense and tile the whole range (they may also overlap: then the
  // range is read first, which is always right).
  return any ? Extent{lo, static_cast<size_t>(hi - lo), dense && covered == static_cast<size_t>(hi - lo)} : Extent{};
}

// The host ranges this thread's last calls used, valid while funnel's memory generation stays:
// a program that passes the same host buffers again pays a few compares (doc/mpi.md: host buffers
// pay nothing measurable).
struct HostRange {
  uintptr_t lo = 0, hi = 0;
  unsigned long long generation = ~0ULL;
};
thread_local std::array<HostRange, 4> t_host_ranges;
thread_local unsigned t_next_host_range = 0;

Kind kind_of(const void* buf, Extent e) noexcept {
  if (e.bytes == 0 || buf == MPI_IN_PLACE || buf == MPI_BOTTOM) return Kind::Host;
  const auto* first = static_cast<const std::byte*>(buf) + e.offset;
  const auto lo = reinterpret_cast<uintptr_t>(first), hi = lo + e.bytes;
  const unsigned long long generation = funnel_memory_generation();
  for (const HostRange& r : t_host_ranges)
    if (r.generation == generation && lo >= r.lo && hi <= r.hi) return Kind::Host;
  int device = 0;
  switch (funnel_memory_kind(first, e.bytes, &device)) {
    case FUNNEL_MEMORY_DEVICE: return Kind::Device;
    case FUNNEL_MEMORY_INVALID: return Kind::Invalid;
    default: break;
  }
  if (!mapped(first, e.bytes)) return Kind::Invalid;
  t_host_ranges[t_next_host_range++ % t_host_ranges.size()] = HostRange{lo, hi, generation};
  return Kind::Host;
}

StagingBuffer::StagingBuffer(size_t bytes) {
  const size_t c = size_class(bytes);
  {
    std::lock_guard lk(g_pool_mu);
    if (auto it = g_pool.find(c); it != g_pool.end()) {
      p_ = it->second;
      size_ = c;
      g_pool_bytes -= c;
      g_pool.erase(it);
      return;
    }
  }
  if (cudaMallocHost(&p_, c) != cudaSuccess) {
    p_ = nullptr;
    return;
  }
  size_ = c;
}

StagingBuffer& StagingBuffer::operator=(StagingBuffer&& o) noexcept {
  if (this != &o) {
    this->~StagingBuffer();
    p_ = o.p_;
    size_ = o.size_;
    o.p_ = nullptr;
  }
  return *this;
}

StagingBuffer::~StagingBuffer() {
  if (p_ == nullptr) return;
  {
    std::lock_guard lk(g_pool_mu);
    if (g_pool_bytes + size_ <= kPoolKeep) {
      g_pool.emplace(size_, p_);
      g_pool_bytes += size_;
      p_ = nullptr;
      return;
    }
  }
  (void)cudaFreeHost(p_);
  p_ = nullptr;
}

Staged::Staged(const void* buf, Extent e, bool in, bool out, const char* call)
    : ptr_(const_cast<void*>(buf)), out_(out) {
  const Kind k = kind_of(buf, e);
  if (k == Kind::Host) return;
  char m[320];
  if (k == Kind::Invalid) {
    std::snprintf(m, sizeof m,
                  "%s: the buffer at %p (%zu bytes) is neither host memory of this process nor inside one of its "
                  "live CUDA allocations (freed, past the allocation's end, or another process's): MPI_ERR_BUFFER",
                  call, static_cast<const void*>(static_cast<const std::byte*>(buf) + e.offset), e.bytes);
    warn(m);
    ok_ = false;
    return;
  }
  device_ = const_cast<std::byte*>(static_cast<const std::byte*>(buf)) + e.offset;
  bytes_ = e.bytes;
  host_ = StagingBuffer(e.bytes);
  if (!host_) {
    std::snprintf(m, sizeof m, "%s: no pinned staging buffer of %zu bytes for a device buffer: MPI_ERR_BUFFER", call,
                  e.bytes);
    warn(m);
    ok_ = false;
    return;
  }
  ptr_ = host_.data() - e.offset;
  // A buffer the call only writes is read first too when it has gaps, so that the copy back
  // leaves the bytes between its elements as they were.
  if (in || !e.dense) ok_ = copy(false, call);
}

bool Staged::copy(bool to_device, const char* call) noexcept {
  if (!host_) return true;
  const cudaError_t r = to_device ? cudaMemcpy(device_, host_.data(), bytes_, cudaMemcpyHostToDevice)
                                  : cudaMemcpy(host_.data(), device_, bytes_, cudaMemcpyDeviceToHost);
  if (r == cudaSuccess) return true;
  char m[240];
  std::snprintf(m, sizeof m, "%s: copying %s failed: %s", call,
                to_device ? "a received message to its device buffer" : "a device buffer to the host",
                cudaGetErrorName(r));
  warn(m);
  return false;
}

bool Staged::refill() noexcept { return copy(false, "MPI_Start"); }

bool Staged::finish() noexcept { return !out_ || copy(true, "completing a receive"); }

void keep_until_done(MPI_Request request, std::vector<Staged> buffers) {
  std::erase_if(buffers, [](const Staged& s) { return !s.staged(); });
  if (buffers.empty() || request == MPI_REQUEST_NULL) return;
  std::lock_guard lk(g_pending_mu);
  g_pending[request] = std::move(buffers);
  count_locked();
}

void keep_persistent(MPI_Request request, Staged buffer, bool send) {
  if (!buffer.staged() || request == MPI_REQUEST_NULL) return;
  std::lock_guard lk(g_pending_mu);
  g_persistent.insert_or_assign(request, Persistent{std::move(buffer), send, false});
  count_locked();
}

bool start_persistent(MPI_Request request) noexcept {
  std::lock_guard lk(g_pending_mu);
  auto it = g_persistent.find(request);
  if (it == g_persistent.end()) return true;
  it->second.active = true;
  return !it->second.send || it->second.buffer.refill();
}

bool complete(MPI_Request request) noexcept {
  std::vector<Staged> buffers;
  {
    std::lock_guard lk(g_pending_mu);
    if (auto p = g_persistent.find(request); p != g_persistent.end()) {
      if (!p->second.active) return true;  // an inactive persistent request completes at once
      p->second.active = false;
      return p->second.send || p->second.buffer.finish();
    }
    auto it = g_pending.find(request);
    if (it == g_pending.end()) return true;
    buffers = std::move(it->second);
    g_pending.erase(it);
    count_locked();
  }
  bool ok = true;
  for (auto& b : buffers) ok = b.finish() && ok;
  return ok;
}

void free_request(MPI_Request request) noexcept {
  std::lock_guard lk(g_pending_mu);
  if (auto p = g_persistent.find(request); p != g_persistent.end()) {
    // Freed while started: MPI still uses the host copy, which then stays until the process ends.
    if (p->second.active) {
      try {
        std::vector<Staged> keep;
        keep.push_back(std::move(p->second.buffer));
        g_orphans.push_back(std::move(keep));
      } catch (...) {
      }
    }
    g_persistent.erase(p);
    count_locked();
    return;
  }
  auto it = g_pending.find(request);
  if (it == g_pending.end()) return;
  warn("MPI_Request_free of a request with a device buffer still in flight: its host copy is kept until the process "
      "ends, and a receive's data never reaches the device (complete the request with MPI_Wait or MPI_Test instead)");
  try {
    g_orphans.push_back(std::move(it->second));
  } catch (...) {
  }
  g_pending.erase(it);
  count_locked();
}

bool any_pending() noexcept { return g_pending_count.load(std::memory_order_acquire) != 0; }

void warn(const char* what) noexcept {
  std::fprintf(stderr, "funnel (libfunnel_mpi, pid %d): %s\n", static_cast<int>(::getpid()), what);
}

int buffer_error(MPI_Comm comm) noexcept {
  PMPI_Comm_call_errhandler(comm == MPI_COMM_NULL ? MPI_COMM_WORLD : comm, MPI_ERR_BUFFER);
  return MPI_ERR_BUFFER;
}

}  // namespace funnel::mpi
