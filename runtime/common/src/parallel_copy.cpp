#include "funnel/common/parallel_copy.hpp"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstring>

namespace funnel {
namespace {

void pause() noexcept {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

unsigned usable_cpus() noexcept {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return static_cast<unsigned>(std::max(1, CPU_COUNT(&set)));
}

// After a copy, helpers spin this long for the next one before they sleep.
constexpr auto kHelperSpin = std::chrono::microseconds(200);

}  // namespace

ParallelCopy::ParallelCopy(unsigned threads) {
  const unsigned n = std::min(std::max(threads, 1u), usable_cpus());
  helpers_.reserve(n - 1);
  for (unsigned i = 1; i < n; ++i) helpers_.emplace_back([this] { helper_loop(); });
}

ParallelCopy::~ParallelCopy() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : helpers_) t.join();
}

void ParallelCopy::copy(std::byte* dst, uint64_t dst_pitch, const std::byte* src, uint64_t src_pitch, uint64_t width,
                        uint64_t rows) noexcept {
  const uint64_t bytes = width * rows;
  if (bytes == 0) return;  // memcpy must not see the null pointers of an empty copy
  std::unique_lock lk(busy_, std::defer_lock);
  if (helpers_.empty() || bytes < kMinSplit || !lk.try_lock()) {
    for (uint64_t r = 0; r < rows; ++r) std::memcpy(dst + r * dst_pitch, src + r * src_pitch, width);
    return;
  }
  // No helper is inside job_ (the previous copy waited for that), so it may be rewritten.
  const uint64_t max_parts = std::min<uint64_t>(threads(), bytes / (kMinSplit / 2));
  job_ = Job{dst, dst_pitch, src, src_pitch, width, rows,
             static_cast<unsigned>(rows == 1 ? max_parts : std::min<uint64_t>(max_parts, rows))};
  next_part_.store(0, std::memory_order_relaxed);
  done_parts_.store(0, std::memory_order_relaxed);
  active_.store(true, std::memory_order_seq_cst);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  generation_.notify_all();
  run_parts();
  while (done_parts_.load(std::memory_order_acquire) != job_.parts) pause();
  // Helpers that saw active_ may still be inside; wait them out before job_ changes.
  active_.store(false, std::memory_order_seq_cst);
  while (inside_.load(std::memory_order_seq_cst) != 0) pause();
}

void ParallelCopy::run_parts() noexcept {
  for (;;) {
    const unsigned part = next_part_.fetch_add(1, std::memory_order_relaxed);
    if (part >= job_.parts) return;
    copy_part(part);
    done_parts_.fetch_add(1, std::memory_order_release);
  }
}

void ParallelCopy::copy_part(unsigned part) noexcept {
  const Job& j = job_;
  if (j.rows == 1) {
    // Cut at 64-byte boundaries so that no two threads write one cache line.
    const uint64_t per = (j.width / j.parts + 63) & ~uint64_t{63};
    const uint64_t begin = std::min<uint64_t>(j.width, per * part);
    const uint64_t end = part + 1 == j.parts ? j.width : std::min<uint64_t>(j.width, begin + per);
    if (end > begin) std::memcpy(j.dst + begin, j.src + begin, end - begin);
    return;
  }
  const uint64_t per = (j.rows + j.parts - 1) / j.parts;
  const uint64_t end = std::min<uint64_t>(j.rows, per * (part + 1));
  for (uint64_t r = per * part; r < end; ++r) std::memcpy(j.dst + r * j.dst_pitch, j.src + r * j.src_pitch, j.width);
}

void ParallelCopy::helper_loop() noexcept {
  uint32_t seen = generation_.load();
  for (;;) {
    const auto spin_until = std::chrono::steady_clock::now() + kHelperSpin;
    while (generation_.load(std::memory_order_acquire) == seen && std::chrono::steady_clock::now() < spin_until)
      pause();
    generation_.wait(seen, std::memory_order_acquire);
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    // The caller clears active_ and then waits for inside_ == 0: a helper that enters
    // after that sees active_ false and leaves job_ alone (both sides seq_cst).
    inside_.fetch_add(1, std::memory_order_seq_cst);
    if (active_.load(std::memory_order_seq_cst)) run_parts();
    inside_.fetch_sub(1, std::memory_order_seq_cst);
  }
}

}  // namespace funnel
