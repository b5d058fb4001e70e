// The digest that names a fat binary between client and server (ModuleCmd::digest):
// Boost.Uuid's SHA-1 name generator over the bytes, in the nil namespace.  The client
// computes it once per registered fat binary; the server recomputes it over uploaded
// bytes before it loads or caches them.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace funnel::ipc {

using ModuleDigest = std::array<uint8_t, 16>;

ModuleDigest module_digest(std::span<const std::byte> bytes) noexcept;

}  // namespace funnel::ipc
