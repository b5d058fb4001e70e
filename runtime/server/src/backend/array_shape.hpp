// What both backends need of an array's shape (doc/design/arrays.md): the bytes of a format's
// channel and the shape of a mipmapped array's level.
#pragma once
#include <algorithm>
#include <cstdint>

#include "funnel/server/backend.hpp"

namespace funnel::server {

// Bytes of one channel of a CUarray_format (0: a format funnel does not take).  The values are
// the driver's: UNSIGNED_INT8 1, INT16 2, INT32 3, SIGNED_INT8 8, INT16 9, INT32 0xa, HALF 0x10,
// FLOAT 0x20.
inline uint32_t format_bytes(uint32_t format) noexcept {
  switch (format) {
    case 0x01: case 0x08: return 1;
    case 0x02: case 0x09: case 0x10: return 2;
    case 0x03: case 0x0a: case 0x20: return 4;
    default: return 0;
  }
}

// Level `level` of a mipmapped array: each dimension halved `level` times (at least 1), layers
// (a layered array's depth) kept.
inline ArrayShape level_shape(const ArrayShape& s, uint32_t level) noexcept {
  ArrayShape l = s;
  l.levels = 0;
  const auto shrink = [level](uint64_t v) { return v == 0 ? 0 : std::max<uint64_t>(1, v >> level); };
  l.width = shrink(s.width);
  l.height = shrink(s.height);
  if ((s.flags & ipc::kArrayLayered) == 0) l.depth = shrink(s.depth);
  return l;
}

// The bytes an array's levels hold (what its memory counts against the client's limit).
inline uint64_t array_bytes(const ArrayShape& s) noexcept {
  uint64_t total = 0;
  const uint32_t levels = s.levels == 0 ? 1 : s.levels;
  for (uint32_t i = 0; i < levels; ++i) {
    const ArrayShape l = s.levels == 0 ? s : level_shape(s, i);
    total += l.row_bytes() * l.rows() * l.slices();
  }
  return total;
}

}  // namespace funnel::server
