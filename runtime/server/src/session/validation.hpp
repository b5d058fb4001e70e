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

// A memset's element, row pitch and value as the backend takes them (a memset command's, or a
// graph memset node's): the element 1 (0 reads as 1), 2 or 4 bytes; the pitch of one row its
// width; the address, width and pitch multiples of the element; the value cut to one element.
// InvalidValue otherwise.  The caller checks the region it spans.
struct MemsetShape {
  uint64_t pitch;
  uint32_t element;
  uint32_t value;
};
Status memset_shape(const ipc::MemsetCmd& c, MemsetShape& out) noexcept;

// A launch record as the backend takes it (the priority still the client's).
LaunchDesc launch_desc(const ipc::LaunchCmd& c) noexcept;

// A command sent without a reply slot (a one-way post of a command that must be waited for).
inline bool one_way(const ipc::CommandHeader& h) noexcept { return h.reply_slot == ipc::kNoReply; }

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
