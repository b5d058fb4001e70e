// The generated tables behind cuGetProcAddress and cuGetErrorName/String, and their searches.
#include <algorithm>

#include "driver.hpp"
#include "error_table.inc"
#include "log.hpp"
#include "proc_table.inc"

namespace funnel::driver {

int not_supported(const char* name) noexcept {
  client::report_unsupported(name);
  return 801;  // CUDA_ERROR_NOT_SUPPORTED
}

void* find_proc(std::string_view name, int version, bool per_thread, int& status) noexcept {
  const auto* first = std::lower_bound(std::begin(kProcTable), std::end(kProcTable), name,
                                       [](const ProcEntry& e, std::string_view n) { return e.name < n; });
  const auto* last = first;
  while (last != std::end(kProcTable) && last->name == name) ++last;
  const ProcEntry* best = nullptr;
  for (const auto* e = first; e != last; ++e)
    if (e->per_thread == 0 && e->version <= version && (best == nullptr || e->version >= best->version)) best = e;
  if (best == nullptr) {
    status = first != last ? 2 : 1;
    return nullptr;
  }
  // The per-thread form of that very function (cuMemcpyHtoDAsync_v2_ptsz), never an older one.
  if (per_thread)
    for (const auto* e = first; e != last; ++e)
      if (e->per_thread != 0 && e->symbol.size() == best->symbol.size() + 5 && e->symbol.starts_with(best->symbol))
        best = e;
  status = 0;
  return reinterpret_cast<void*>(best->function);
}

const ErrorEntry* find_error(int code) noexcept {
  for (const auto& e : kErrorTable)
    if (e.code == code) return &e;
  return nullptr;
}

}  // namespace funnel::driver
