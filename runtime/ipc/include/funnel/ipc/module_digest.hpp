// The digest that names a fat binary between client and server (ModuleCmd::digest): the
// first 16 bytes of the SHA-256 of its bytes (OpenSSL's, which uses the CPU's SHA instructions:
// every PyTorch process hashes cuBLAS's images at its first matmul; doc/performance.md).  The client computes it once per fat binary it loads; the
// server recomputes it over uploaded bytes before it loads or caches them.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace funnel::ipc {

using ModuleDigest = std::array<uint8_t, 16>;

ModuleDigest module_digest(std::span<const std::byte> bytes) noexcept;

}  // namespace funnel::ipc
