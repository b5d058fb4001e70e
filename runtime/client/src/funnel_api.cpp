// funnel's own C API (include/funnel/funnel.h), beside the CUDA runtime API.
#include "funnel/funnel.h"

#include "api.hpp"

namespace funnel::client {

FUNNEL_API int funnel_attach(void) { return static_cast<int>(attach()); }

FUNNEL_API int funnel_is_attached(void) { return Runtime::get().attached() ? 1 : 0; }

FUNNEL_API int funnel_memory_kind(const void* p, size_t n, int* device) {
  try {
    ClientTables& t = Runtime::get().tables;
    const Classified c = t.classify(p);
    if (c.kind == Classified::Device) {
      if (device != nullptr) *device = c.device;
      const uint64_t offset = reinterpret_cast<uint64_t>(p) - c.base;
      return offset <= c.size && n <= c.size - offset ? FUNNEL_MEMORY_DEVICE : FUNNEL_MEMORY_INVALID;
    }
    if (c.kind == Classified::Host && t.recently_freed(reinterpret_cast<uint64_t>(p))) return FUNNEL_MEMORY_INVALID;
    return FUNNEL_MEMORY_HOST;
  } catch (...) {
    return FUNNEL_MEMORY_HOST;
  }
}

FUNNEL_API unsigned long long funnel_memory_generation(void) { return Runtime::get().tables.memory_generation(); }

FUNNEL_API int funnel_detach(void) {
  return static_cast<int>(guarded(__func__, [&] {
    Runtime& rt = Runtime::get();
    cudaError_t first = cudaSuccess;
    if (!rt.attached() || rt.left()) return first;
    for (int dev = 0; dev < rt.device_count(); ++dev) {
      const cudaError_t e = to_cuda(rt.call(Opcode::DeviceSynchronize, dev, 0, nullptr, 0));
      if (first == cudaSuccess) first = e;
    }
    const auto wait = rt.settings() != nullptr ? rt.settings()->attach_timeout : std::chrono::milliseconds(30000);
    if (!rt.detach_and_wait(wait))
      log_error(fmt::format("funnel: funnel_detach: the server did not confirm the detach within {} ms "
                            "(FUNNEL_ATTACH_TIMEOUT_MS); going on",
                            wait.count()));
    return first;
  }));
}

}  // namespace funnel::client
