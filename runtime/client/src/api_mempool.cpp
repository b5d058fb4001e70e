// Memory pools: each device's default pool, the one cudaMallocAsync uses.  The pool
// itself lives in the server (its CUDA context allocates and trims it); a cudaMemPool_t
// here is a MemPoolObj that remembers the attributes set on it and counts this
// client's stream-ordered allocations, so that the used and reserved attributes answer
// what this client holds.  Pools of one's own (cudaMemPoolCreate) are not supported:
// doc/not-supported.md.
#include <algorithm>
#include <optional>
#include <utility>

#include "api.hpp"
#include "mem_pool.hpp"

using namespace funnel::client;

namespace funnel::client {

cudaError_t pool_device(cudaMemPool_t pool, int& device) noexcept {
  const std::optional<int> d = Runtime::get().tables.pool_device(pool);
  if (!d) return cudaErrorInvalidValue;
  device = *d;
  return cudaSuccess;
}

}  // namespace funnel::client

namespace {

cudaError_t default_pool(cudaMemPool_t* pool, int device) {
  if (pool == nullptr) return cudaErrorInvalidValue;
  Runtime& rt = Runtime::get();
  if (cudaError_t e = to_cuda(rt.ready()); e != cudaSuccess) return e;
  if (device < 0 || device >= rt.device_count()) return cudaErrorInvalidDevice;
  *pool = reinterpret_cast<cudaMemPool_t>(&rt.tables.default_pool(device));
  return cudaSuccess;
}

// Reads or writes one attribute of a pool of ours, under the tables' lock.
template <class F>
cudaError_t with_pool(cudaMemPool_t pool, void* value, F&& f) {
  if (value == nullptr) return cudaErrorInvalidValue;
  return Runtime::get().tables.with_pool(pool, cudaErrorInvalidValue, std::forward<F>(f));
}

bool is_reuse(cudaMemPoolAttr a) {
  return a == cudaMemPoolReuseFollowEventDependencies || a == cudaMemPoolReuseAllowOpportunistic ||
         a == cudaMemPoolReuseAllowInternalDependencies;
}

// Reserved memory is what this client holds: the server's pool may keep more.
cudaError_t get_attribute(const MemPoolObj& p, cudaMemPoolAttr a, void* value) {
  if (is_reuse(a)) {
    *static_cast<int*>(value) = p.reuse[a - cudaMemPoolReuseFollowEventDependencies];
    return cudaSuccess;
  }
  uint64_t v = 0;
  switch (a) {
    case cudaMemPoolAttrReleaseThreshold: v = p.release_threshold; break;
    case cudaMemPoolAttrReservedMemCurrent: case cudaMemPoolAttrUsedMemCurrent: v = p.used; break;
    case cudaMemPoolAttrReservedMemHigh: v = p.reserved_high; break;
    case cudaMemPoolAttrUsedMemHigh: v = p.used_high; break;
    default: return cudaErrorInvalidValue;
  }
  *static_cast<uint64_t*>(value) = v;
  return cudaSuccess;
}

// The release threshold is remembered and answered back; the server's pool keeps its own
// (the server trims it).  The high-water marks can only be reset (to 0, which means "to
// the current value", as in CUDA).
cudaError_t set_attribute(MemPoolObj& p, cudaMemPoolAttr a, const void* value) {
  if (is_reuse(a)) {
    p.reuse[a - cudaMemPoolReuseFollowEventDependencies] = *static_cast<const int*>(value);
    return cudaSuccess;
  }
  const uint64_t v = *static_cast<const uint64_t*>(value);
  switch (a) {
    case cudaMemPoolAttrReleaseThreshold: p.release_threshold = v; return cudaSuccess;
    case cudaMemPoolAttrReservedMemHigh:
      if (v != 0) return cudaErrorInvalidValue;
      p.reserved_high = p.used;
      return cudaSuccess;
    case cudaMemPoolAttrUsedMemHigh:
      if (v != 0) return cudaErrorInvalidValue;
      p.used_high = p.used;
      return cudaSuccess;
    default: return cudaErrorInvalidValue;  // the current values are read-only
  }
}

}  // namespace

FUNNEL_API cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  return guarded(__func__, [&] { return default_pool(pool, device); });
}
// Only the default pool can be a device's current pool.
FUNNEL_API cudaError_t cudaDeviceGetMemPool(cudaMemPool_t* pool, int device) {
  return guarded(__func__, [&] { return default_pool(pool, device); });
}
FUNNEL_API cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t pool) {
  return guarded(__func__, [&] {
    cudaMemPool_t own = nullptr;
    if (cudaError_t e = default_pool(&own, device); e != cudaSuccess) return e;
    if (pool == own) return cudaSuccess;
    int other = 0;
    if (pool == nullptr || pool_device(pool, other) == cudaSuccess) return cudaErrorInvalidValue;
    report_unsupported("cudaDeviceSetMemPool with a pool other than the device's default pool");
    return cudaErrorNotSupported;
  });
}

FUNNEL_API cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  return guarded(__func__, [&] {
    return with_pool(pool, value, [&](MemPoolObj& p) { return get_attribute(p, attr, value); });
  });
}
FUNNEL_API cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  return guarded(__func__, [&] {
    return with_pool(pool, value, [&](MemPoolObj& p) { return set_attribute(p, attr, value); });
  });
}

// The server's pool is trimmed by the server (its release threshold, and when memory is
// short); a client's request is checked and accepted.
FUNNEL_API cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t /*min_bytes_to_keep*/) {
  return guarded(__func__, [&] {
    int device = 0;
    return pool_device(pool, device);
  });
}
