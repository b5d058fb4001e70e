// MD2 (RFC 1319) and HMAC-MD2 (RFC 2104, a 16-byte block and digest).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

namespace funnel::driver {

// MD2 (RFC 1319), as the runtime's integrity check uses it.
class Md2 {
 public:
  void update(const void* data, size_t n) noexcept;
  std::array<uint8_t, 16> digest() noexcept;  // and starts over

 private:
  void compress() noexcept;
  std::array<uint8_t, 48> x_{};
  std::array<uint8_t, 16> block_{};
  std::array<uint8_t, 16> checksum_{};
  uint8_t l_ = 0;
  size_t used_ = 0;
};

// HMAC (RFC 2104) over MD2: a 16-byte key, MD2's 16-byte block.
std::array<uint8_t, 16> hmac_md2(const std::array<uint8_t, 16>& key, const void* data, size_t n) noexcept;

}  // namespace funnel::driver
