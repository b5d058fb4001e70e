// Bounds-checked little-endian reads for the fatbin and cubin parsers (private).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>

#include "funnel/fatbin/fatbin.hpp"

namespace funnel::fatbin::detail {

// Whether [offset, offset + size) lies within a buffer of `total` bytes, without overflow.
inline bool in_range(uint64_t offset, uint64_t size, uint64_t total) {
  return offset <= total && size <= total - offset;
}

// The bytes [offset, offset + size) of `bytes`; throws naming `what` when out of range.
inline std::span<const std::byte> sub(std::span<const std::byte> bytes, uint64_t offset, uint64_t size,
                                      const char* what) {
  if (!in_range(offset, size, bytes.size())) {
    throw Error(std::string(what) + ": bytes " + std::to_string(offset) + "+" + std::to_string(size) +
                " lie outside the " + std::to_string(bytes.size()) + "-byte buffer");
  }
  return bytes.subspan(static_cast<size_t>(offset), static_cast<size_t>(size));
}

template <typename T>
T read(std::span<const std::byte> bytes, uint64_t offset, const char* what) {
  static_assert(std::is_trivially_copyable_v<T>);
  T value;
  std::memcpy(&value, sub(bytes, offset, sizeof(T), what).data(), sizeof(T));
  return value;  // x86-64 and aarch64 hosts: little-endian like the formats
}

}  // namespace funnel::fatbin::detail
