#include "session/validation.hpp"

namespace funnel::server {

Status memset_shape(const ipc::MemsetCmd& c, MemsetShape& out) noexcept {
  const uint32_t element = c.element == 0 ? 1 : c.element;
  if (element != 1 && element != 2 && element != 4) return Status::InvalidValue;
  const uint64_t pitch = c.height > 1 ? c.pitch : c.width;
  if (c.address % element != 0 || c.width % element != 0 || pitch % element != 0) return Status::InvalidValue;
  out = MemsetShape{pitch, element, element == 4 ? c.value : c.value & ((1u << (8 * element)) - 1)};
  return Status::Success;
}

Status region_extent(uint64_t pitch, uint64_t width, uint64_t height, uint64_t& extent) noexcept {
  if (width == 0 || height == 0) {
    extent = 0;
    return Status::Success;
  }
  if (height > 1 && pitch < width) return Status::InvalidPitchValue;
  uint64_t rows = 0;
  if (__builtin_mul_overflow(height - 1, pitch, &rows)) return Status::InvalidValue;
  if (__builtin_add_overflow(rows, width, &extent)) return Status::InvalidValue;
  return Status::Success;
}

bool within(uint64_t offset, uint64_t extent, uint64_t size) noexcept {
  return offset <= size && extent <= size - offset;
}

}  // namespace funnel::server
