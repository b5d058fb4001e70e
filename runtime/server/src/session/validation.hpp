// Checks on values a client wrote into shared memory.  All arithmetic is
// overflow-checked: a hostile or corrupted record must fail validation, never wrap.
#pragma once
#include <cstdint>
#include <map>

#include "funnel/server/backend.hpp"

namespace funnel::server {

// Bytes spanned by `height` rows of `width` bytes, `pitch` apart: (height-1)*pitch + width.
// InvalidPitchValue when rows overlap, InvalidValue on overflow.  A zero width or height spans 0.
Status region_extent(uint64_t pitch, uint64_t width, uint64_t height, uint64_t& extent) noexcept;

// A launch record as the backend takes it (the priority still the client's).
LaunchDesc launch_desc(const ipc::LaunchCmd& c) noexcept;

// Whether [offset, offset+extent) lies inside [0, size).
bool within(uint64_t offset, uint64_t extent, uint64_t size) noexcept;

// The allocation (base -> size) that contains [address, address+extent), or end().
template <class Map>
typename Map::const_iterator containing(const Map& allocations, uint64_t address, uint64_t extent) noexcept {
  auto it = allocations.upper_bound(address);
  if (it == allocations.begin()) return allocations.end();
  --it;
  if (!within(address - it->first, extent == 0 ? 1 : extent, it->second.size)) return allocations.end();
  return it;
}

}  // namespace funnel::server
