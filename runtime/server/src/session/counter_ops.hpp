// The server's relaxed counters: how they are added to (session.hpp's ClientCounters and
// ServerTotals, the streams' GPU busy time in legacy_stream.cpp).
#pragma once
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace funnel::server {

// Pick-up delays of a client's waited calls (from the client's write of the record to the
// worker's read of it), and the worker's time on each (from that read until the call was
// issued to the driver and answered or left to the GPU to answer), in log2 buckets of
// microseconds: bucket 0 is under 1 us, bucket b holds [2^(b-1), 2^b) us; the last one,
// 32.8-65.5 ms (CommandHeader::posted_us wraps there; a longer time counts there too).
inline constexpr size_t kPickupBuckets = 17;
inline size_t pickup_bucket(uint16_t delay_us) noexcept { return static_cast<size_t>(std::bit_width(delay_us)); }
inline size_t time_bucket(uint64_t us) noexcept {
  return pickup_bucket(static_cast<uint16_t>(us < 0xffff ? us : 0xffff));
}

// Waited calls by opcode (ClientCounters::waited): every opcode number is below this
// (worker.cpp checks it against the command table).
inline constexpr size_t kOpcodeSlots = 128;

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
