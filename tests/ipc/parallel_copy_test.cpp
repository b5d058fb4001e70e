// ParallelCopy: every byte lands where it should for 1-D and 2-D copies of every size
// class (unsplit, split into uneven parts, more parts than rows), with several callers
// at once (only one may use the helpers; the rest copy alone), and the helpers stop.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "funnel/common/parallel_copy.hpp"
#include "watchdog.hpp"

namespace funnel {
namespace {

std::vector<std::byte> pattern(size_t n, uint32_t seed) {
  std::vector<std::byte> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x = x * 1103515245u + 12345u;
    b = static_cast<std::byte>(x >> 16);
  }
  return v;
}

void check_1d(ParallelCopy& pc, size_t n, uint32_t seed) {
  const auto src = pattern(n, seed);
  std::vector<std::byte> dst(n + 2, std::byte{0x5a});
  pc.copy(dst.data() + 1, n, src.data(), n, n, 1);
  ASSERT_EQ(dst.front(), std::byte{0x5a}) << "wrote before the destination, n=" << n;
  ASSERT_EQ(dst.back(), std::byte{0x5a}) << "wrote past the destination, n=" << n;
  ASSERT_TRUE(std::equal(src.begin(), src.end(), dst.begin() + 1)) << "n=" << n;
}

TEST(ParallelCopy, OneDimensionalEverySizeClass) {
  testing::run_with_watchdog([] {
    ParallelCopy pc(4);
    for (size_t n : {size_t{0}, size_t{1}, size_t{4095}, ParallelCopy::kMinSplit - 1, ParallelCopy::kMinSplit,
                     ParallelCopy::kMinSplit + 77, size_t{2} << 20, (size_t{3} << 20) + 13, size_t{16} << 20})
      check_1d(pc, n, static_cast<uint32_t>(n));
  });
}

TEST(ParallelCopy, TwoDimensionalKeepsPitchGaps) {
  testing::run_with_watchdog([] {
    ParallelCopy pc(3);
    // rows < threads, rows not a multiple of threads, many rows
    for (auto [width, rows] : {std::pair<size_t, size_t>{600 * 1024, 2}, {100 * 1024, 7}, {4096, 1000}}) {
      const size_t spitch = width + 64, dpitch = width + 128;
      const auto src = pattern(spitch * rows, static_cast<uint32_t>(rows));
      std::vector<std::byte> dst(dpitch * rows, std::byte{0x33});
      pc.copy(dst.data(), dpitch, src.data(), spitch, width, rows);
      for (size_t r = 0; r < rows; ++r) {
        ASSERT_TRUE(std::equal(src.begin() + static_cast<ptrdiff_t>(r * spitch),
                               src.begin() + static_cast<ptrdiff_t>(r * spitch + width),
                               dst.begin() + static_cast<ptrdiff_t>(r * dpitch)))
            << "row " << r << " of " << rows;
        for (size_t g = width; g < dpitch; ++g) ASSERT_EQ(dst[r * dpitch + g], std::byte{0x33}) << "pitch gap, row " << r;
      }
    }
  });
}

TEST(ParallelCopy, ConcurrentCallersEachGetTheirOwnBytes) {
  testing::run_with_watchdog([] {
    ParallelCopy pc(4);
    std::vector<std::thread> callers;
    std::vector<int> failures(4, 0);
    for (int t = 0; t < 4; ++t) {
      callers.emplace_back([&, t] {
        for (int i = 0; i < 20; ++i) {
          const size_t n = (size_t{1} << 20) + static_cast<size_t>(t * 4096 + i);
          const auto src = pattern(n, static_cast<uint32_t>(t * 100 + i));
          std::vector<std::byte> dst(n);
          pc.copy(dst.data(), n, src.data(), n, n, 1);
          if (dst != src) ++failures[static_cast<size_t>(t)];
        }
      });
    }
    for (auto& c : callers) c.join();
    for (int t = 0; t < 4; ++t) EXPECT_EQ(failures[static_cast<size_t>(t)], 0) << "caller " << t;
  });
}

TEST(ParallelCopy, OneThreadStartsNoHelperAndStillCopies) {
  testing::run_with_watchdog([] {
    ParallelCopy pc(1);
    EXPECT_EQ(pc.threads(), 1u);
    check_1d(pc, size_t{4} << 20, 7);
  });
}

TEST(ParallelCopy, ManyCopiesBackToBackThenDestroyed) {
  // Exercises the spin-then-sleep hand-off and the shutdown of sleeping helpers.
  testing::run_with_watchdog([] {
    for (int round = 0; round < 3; ++round) {
      ParallelCopy pc(4);
      for (int i = 0; i < 50; ++i) check_1d(pc, ParallelCopy::kMinSplit * 2 + static_cast<size_t>(i), static_cast<uint32_t>(i));
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // helpers go to sleep
      check_1d(pc, size_t{1} << 20, 99);
    }
  });
}

}  // namespace
}  // namespace funnel
