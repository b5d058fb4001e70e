// The server's relaxed counters: how they are added to (session.hpp's ClientCounters and
// ServerTotals, the streams' GPU busy time in legacy_stream.cpp).
#pragma once
#include <atomic>
#include <cstdint>

namespace funnel::server {

inline void add(std::atomic<uint64_t>& c, uint64_t v) noexcept { c.fetch_add(v, std::memory_order_relaxed); }
inline void sub(std::atomic<uint64_t>& c, uint64_t v) noexcept { c.fetch_sub(v, std::memory_order_relaxed); }
// For the ClientCounters every command bumps: the session's worker is their only writer,
// so a load and a store keep them exact without a locked read-modify-write per command.
inline void bump(std::atomic<uint64_t>& c, uint64_t v) noexcept {
  c.store(c.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
}
// A high-water mark with one writer (the session's worker).
inline void raise_peak(std::atomic<uint64_t>& peak, uint64_t v) noexcept {
  if (v > peak.load(std::memory_order_relaxed)) peak.store(v, std::memory_order_relaxed);
}

}  // namespace funnel::server
