// A launch's parameter buffer, built from the application's `void** args` and the
// kernel's layout as the server reported it (doc/design/kernels.md, "Launch"): each
// args[i] copied (param_size bytes) to param_offset, zeros between.  Pure, so that
// tests/client checks it without a server.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "funnel/ipc/commands.hpp"

namespace funnel::client {

// Whether every parameter of `layout` (pack_param values) lies inside `param_bytes`.
inline bool layout_fits(std::span<const uint64_t> layout, uint32_t param_bytes) noexcept {
  for (const uint64_t p : layout) {
    const uint64_t end = uint64_t{ipc::param_offset(p)} + ipc::param_size(p);
    if (end > param_bytes) return false;
  }
  return param_bytes <= ipc::kMaxParamBytes;
}

// Fills out[0, param_bytes).  `args` may be null only when the layout is empty; the
// layout must fit (layout_fits).
inline void pack_params(std::span<const uint64_t> layout, uint32_t param_bytes, void* const* args,
                        std::byte* out) noexcept {
  std::memset(out, 0, param_bytes);
  for (size_t i = 0; i < layout.size(); ++i) {
    const uint32_t size = ipc::param_size(layout[i]);
    if (size != 0) std::memcpy(out + ipc::param_offset(layout[i]), args[i], size);
  }
}

}  // namespace funnel::client
