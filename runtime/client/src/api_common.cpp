#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>

#include "api.hpp"

namespace funnel::client {
namespace {

thread_local bool t_ptds_gone = false;  // trivially destructible: readable at any time

// The per-thread default streams of this thread (one per device), destroyed when the
// thread exits.  Work on one after that (from an exit handler: the main thread's thread_local
// objects are destroyed before them) goes to the legacy default stream.
struct PerThreadStreams {
  Runtime* owner = nullptr;
  std::map<int, uint64_t> ids;
  ~PerThreadStreams() {
    t_ptds_gone = true;
    if (owner == nullptr || owner != &Runtime::get()) return;  // forked since: not ours to destroy
    for (const auto& [dev, id] : ids) (void)owner->post(Opcode::StreamDestroy, dev, id, nullptr, 0);
  }
};

thread_local int t_device = 0;
thread_local cudaError_t t_last_error = cudaSuccess;
thread_local PerThreadStreams t_ptds;

}  // namespace

int& current_device() noexcept { return t_device; }

std::atomic<unsigned>& context_flags(int device) noexcept {
  static std::array<std::atomic<unsigned>, ipc::kMaxDevices> flags{};
  static std::atomic<unsigned> none{0};
  return device >= 0 && static_cast<uint32_t>(device) < ipc::kMaxDevices ? flags[static_cast<size_t>(device)] : none;
}

cudaError_t device_by_pci_bus_id(const char* id, int& device) noexcept {
  auto parse = [](const char* s, unsigned& dom, unsigned& bus, unsigned& dev, unsigned& fn) {
    const long colons = std::count(s, s + std::strlen(s), ':');
    dom = fn = 0;
    if (colons == 2 && std::strchr(s, '.') != nullptr) return std::sscanf(s, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) == 4;
    if (colons == 2) return std::sscanf(s, "%x:%x:%x", &dom, &bus, &dev) == 3;
    return colons == 1 && std::sscanf(s, "%x:%x.%x", &bus, &dev, &fn) == 3;
  };
  unsigned want[4], have[4];
  if (!parse(id, want[0], want[1], want[2], want[3])) return cudaErrorInvalidValue;
  Runtime& rt = Runtime::get();
  for (int d = 0; d < rt.device_count(); ++d) {
    if (parse(rt.device(d).pci_bus_id, have[0], have[1], have[2], have[3]) &&
        std::equal(std::begin(want), std::end(want), std::begin(have))) {
      device = d;
      return cudaSuccess;
    }
  }
  return cudaErrorInvalidDevice;
}

std::atomic<int>& cache_config(int device) noexcept {
  static std::array<std::atomic<int>, ipc::kMaxDevices> v{};
  static std::atomic<int> none{0};
  return device >= 0 && static_cast<uint32_t>(device) < ipc::kMaxDevices ? v[static_cast<size_t>(device)] : none;
}

cudaError_t get_limit(int device, uint32_t limit, uint64_t& value) {
  const ipc::LimitCmd c{limit, 0, 0};
  Reply r;
  const cudaError_t e = to_cuda(Runtime::get().call(ipc::Opcode::GetLimit, device, 0, &c, sizeof c, &r));
  if (e == cudaSuccess) value = r.value[0];
  return e;
}

cudaError_t set_limit(int device, uint32_t limit, uint64_t value) {
  const ipc::LimitCmd c{limit, 0, value};
  return to_cuda(Runtime::get().call(ipc::Opcode::SetLimit, device, 0, &c, sizeof c));
}

cudaError_t profiler(int device, bool start) {
  const ipc::ProfilerCmd c{start ? 1u : 0u, 0};
  return to_cuda(Runtime::get().call(ipc::Opcode::Profiler, device, 0, &c, sizeof c));
}

cudaError_t reset_persisting_l2(int device) {
  return to_cuda(Runtime::get().call(ipc::Opcode::ResetPersistingL2, device, 0, nullptr, 0));
}

cudaError_t can_access_peer(int* can, int device, int peer) noexcept {
  if (can == nullptr) return cudaErrorInvalidValue;
  const int n = Runtime::get().device_count();
  if (device < 0 || device >= n || peer < 0 || peer >= n) return cudaErrorInvalidDevice;
  *can = 0;
  return cudaSuccess;
}

cudaError_t host_get_flags(unsigned* flags, const void* p) noexcept {
  if (flags == nullptr || p == nullptr) return cudaErrorInvalidValue;
  const Classified c = Runtime::get().tables.classify(p);
  if (c.kind != Classified::Pinned || c.managed) return cudaErrorInvalidValue;
  *flags = c.pinned_flags | cudaHostAllocMapped;  // as the H100 answers: mapped, not portable
  return cudaSuccess;
}

cudaError_t set_context_flags(int device, unsigned flags, const char* call) noexcept {
  constexpr unsigned kSchedule = 0x7u, kKept = kSchedule | 0x8u | 0x10u;  // + MAP_HOST, LMEM_RESIZE_TO_MAX
  const unsigned sched = flags & kSchedule;
  if (sched != 0 && sched != 1 && sched != 2 && sched != 4) return cudaErrorInvalidValue;
  if ((flags & ~kKept) != 0) {
    report_unsupported(fmt::format("{} with flags({})", call, flags & ~kKept).c_str());
    return cudaErrorNotSupported;
  }
  context_flags(device).store(flags);
  return cudaSuccess;
}
cudaError_t& last_error() noexcept { return t_last_error; }

cudaError_t resolve_stream(cudaStream_t s, bool per_thread, StreamRef& out) noexcept {
  Runtime& rt = Runtime::get();
  if (cudaError_t e = to_cuda(rt.ready()); e != cudaSuccess) return e;
  if (s == nullptr) s = per_thread ? cudaStreamPerThread : cudaStreamLegacy;
  if (s == cudaStreamPerThread && t_ptds_gone) s = cudaStreamLegacy;
  if (s == cudaStreamLegacy) {
    out = {0, t_device};
    return cudaSuccess;
  }
  if (s == cudaStreamPerThread) {
    if (t_ptds.owner != &rt) {
      t_ptds.owner = &rt;
      t_ptds.ids.clear();
    }
    auto it = t_ptds.ids.find(t_device);
    if (it == t_ptds.ids.end()) {
      // An ordinary blocking stream, created without a round trip (ids are ours).
      const uint64_t id = rt.next_stream_id.fetch_add(1);
      ipc::StreamCreateCmd c{id, 0, 0};
      if (cudaError_t e = to_cuda(rt.post(Opcode::StreamCreate, t_device, 0, &c, sizeof c)); e != cudaSuccess)
        return e;
      it = t_ptds.ids.emplace(t_device, id).first;
    }
    out = {it->second, t_device};
    return cudaSuccess;
  }
  const std::optional<StreamObj> obj = rt.tables.find_stream(reinterpret_cast<StreamObj*>(s));
  if (!obj) return cudaErrorInvalidResourceHandle;
  out = {obj->id, obj->device, (obj->flags & cudaStreamNonBlocking) == 0};
  return cudaSuccess;
}

}  // namespace funnel::client

namespace funnel::client {

int stub_unsupported(const char* name) noexcept {
  report_unsupported(name);
  return record(cudaErrorNotSupported);
}

}  // namespace funnel::client
