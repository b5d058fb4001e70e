// Managed memory of both fronts: managed.hpp.
#include "managed.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "graphs.hpp"
#include "pinned.hpp"

namespace funnel::client {

namespace {

// What the program advised and prefetched, per managed buffer (by its address).
struct Advice {
  bool read_mostly = false;
  cudaMemLocation preferred{cudaMemLocationTypeInvalid, 0};
  std::set<int> accessed_by;
  cudaMemLocation last_prefetch{cudaMemLocationTypeInvalid, 0};
};

struct AdviceTable {
  std::mutex mu;
  std::map<uint64_t, Advice> by_base;
};
AdviceTable& advice_table() {
  static auto* t = new AdviceTable;  // lives past exit
  return *t;
}

// The managed buffer that holds [p, p + n): its base; 0 when none does.
uint64_t managed_base(const void* p, size_t n) {
  const Classified c = Runtime::get().tables.classify(p);
  if (c.kind != Classified::Pinned || !c.managed || n == 0) return 0;
  const auto a = reinterpret_cast<uint64_t>(p);
  return n <= c.size - (a - c.base) ? c.base : 0;
}

// A location a prefetch or an advice may name: a device of this process, or the host.
bool location_ok(const cudaMemLocation& l) {
  if (l.type == cudaMemLocationTypeDevice) return l.id >= 0 && l.id < Runtime::get().device_count();
  return l.type == cudaMemLocationTypeHost || l.type == cudaMemLocationTypeHostNuma ||
         l.type == cudaMemLocationTypeHostNumaCurrent;
}

// The legacy answer of a location: its device, cudaCpuDeviceId for the host, cudaInvalidDeviceId
// for none.
int legacy_id(const cudaMemLocation& l) {
  if (l.type == cudaMemLocationTypeDevice) return l.id;
  if (l.type == cudaMemLocationTypeInvalid) return cudaInvalidDeviceId;
  return cudaCpuDeviceId;
}

}  // namespace

cudaError_t managed_alloc(void** ptr, size_t size, unsigned flags) {
  if (ptr == nullptr || (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost)) return cudaErrorInvalidValue;
  *ptr = nullptr;
  if (size == 0) return cudaSuccess;  // as CUDA since 11.2
  const cudaError_t e = pinned_alloc(ptr, size, cudaHostAllocPortable | cudaHostAllocMapped, true);
  if (e == cudaSuccess) {
    AdviceTable& t = advice_table();
    std::lock_guard lk(t.mu);
    t.by_base[reinterpret_cast<uint64_t>(*ptr)] = Advice{};
  }
  return e;
}

bool managed_free(void* ptr, cudaError_t& result) {
  if (managed_base(ptr, 1) != reinterpret_cast<uint64_t>(ptr)) return false;
  {
    AdviceTable& t = advice_table();
    std::lock_guard lk(t.mu);
    t.by_base.erase(reinterpret_cast<uint64_t>(ptr));
  }
  result = pinned_free(ptr, true);
  return true;
}

cudaError_t managed_prefetch(const void* p, size_t n, cudaMemLocation location, unsigned flags, cudaStream_t stream,
                             bool ptds) {
  if (cudaError_t e = attach(); e != cudaSuccess) return e;
  const uint64_t base = managed_base(p, n);
  if (base == 0 || flags != 0 || !location_ok(location)) return cudaErrorInvalidValue;
  StreamRef s;
  if (cudaError_t e = resolve_stream(stream, ptds, s); e != cudaSuccess) return e;
  if (s.capturing()) return capture_refuse(s, "cudaMemPrefetchAsync in a stream capture");
  AdviceTable& t = advice_table();
  std::lock_guard lk(t.mu);
  t.by_base[base].last_prefetch = location;
  return cudaSuccess;
}

cudaError_t managed_advise(const void* p, size_t n, int advice, cudaMemLocation location) {
  if (cudaError_t e = attach(); e != cudaSuccess) return e;
  const uint64_t base = managed_base(p, n);
  if (base == 0) return cudaErrorInvalidValue;
  const bool needs_location = advice == cudaMemAdviseSetPreferredLocation || advice == cudaMemAdviseSetAccessedBy ||
                              advice == cudaMemAdviseUnsetAccessedBy;
  if (needs_location && !location_ok(location)) return cudaErrorInvalidValue;
  AdviceTable& t = advice_table();
  std::lock_guard lk(t.mu);
  Advice& a = t.by_base[base];
  switch (advice) {
    case cudaMemAdviseSetReadMostly:
      a.read_mostly = true;
      break;
    case cudaMemAdviseUnsetReadMostly:
      a.read_mostly = false;
      break;
    case cudaMemAdviseSetPreferredLocation:
      a.preferred = location;
      break;
    case cudaMemAdviseUnsetPreferredLocation:
      a.preferred = {cudaMemLocationTypeInvalid, 0};
      break;
    case cudaMemAdviseSetAccessedBy:
      a.accessed_by.insert(legacy_id(location));
      break;
    case cudaMemAdviseUnsetAccessedBy:
      a.accessed_by.erase(legacy_id(location));
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

cudaError_t managed_range_attribute(void* data, size_t size, int attribute, const void* p, size_t n) {
  if (data == nullptr) return cudaErrorInvalidValue;
  if (cudaError_t e = attach(); e != cudaSuccess) return e;
  const uint64_t base = managed_base(p, n);
  if (base == 0) return cudaErrorInvalidValue;
  AdviceTable& t = advice_table();
  std::lock_guard lk(t.mu);
  const Advice& a = t.by_base[base];
  auto put = [&](int v) {
    if (size != sizeof(int)) return cudaErrorInvalidValue;
    std::memcpy(data, &v, sizeof v);
    return cudaSuccess;
  };
  switch (attribute) {
    case cudaMemRangeAttributeReadMostly:
      return put(a.read_mostly ? 1 : 0);
    case cudaMemRangeAttributePreferredLocation:
      return put(legacy_id(a.preferred));
    case cudaMemRangeAttributeAccessedBy: {
      if (size % sizeof(int) != 0) return cudaErrorInvalidValue;
      auto* out = static_cast<int*>(data);
      const size_t slots = size / sizeof(int);
      size_t i = 0;
      for (int d : a.accessed_by)
        if (i < slots) out[i++] = d;
      for (; i < slots; ++i) out[i] = cudaInvalidDeviceId;
      return cudaSuccess;
    }
    case cudaMemRangeAttributeLastPrefetchLocation:
      return put(legacy_id(a.last_prefetch));
    case cudaMemRangeAttributePreferredLocationType:
      return put(a.preferred.type);
    case cudaMemRangeAttributePreferredLocationId:
      return put(a.preferred.id);
    case cudaMemRangeAttributeLastPrefetchLocationType:
      return put(a.last_prefetch.type);
    case cudaMemRangeAttributeLastPrefetchLocationId:
      return put(a.last_prefetch.id);
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t managed_attach(cudaStream_t stream, void* p, size_t length, unsigned flags, bool ptds) {
  if (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost && flags != cudaMemAttachSingle)
    return cudaErrorInvalidValue;
  if (cudaError_t e = attach(); e != cudaSuccess) return e;
  const uint64_t base = managed_base(p, length == 0 ? 1 : length);
  if (base == 0 || (length == 0 && base != reinterpret_cast<uint64_t>(p))) return cudaErrorInvalidValue;
  StreamRef s;
  return resolve_stream(stream, ptds, s);
}

}  // namespace funnel::client
