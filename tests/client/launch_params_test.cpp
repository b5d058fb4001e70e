// The launch parameter buffer (runtime/client/src/launch_params.hpp): each argument at
// its offset, zeros between and after.
#include "launch_params.hpp"

#include <gtest/gtest.h>

#include <array>
#include <vector>

namespace funnel::client {
namespace {

using ipc::pack_param;

TEST(LaunchParams, CopiesEachArgumentToItsOffsetAndZeroesTheGaps) {
  // (char, double, short, int*) as nvcc lays them out: 0, 8, 16, 24; 32 bytes.
  const std::vector<uint64_t> layout = {pack_param(0, 1), pack_param(8, 8), pack_param(16, 2), pack_param(24, 8)};
  char c = 'x';
  double d = 2.5;
  short s = 0x1234;
  int* p = reinterpret_cast<int*>(0x1122334455667788ull);
  void* args[] = {&c, &d, &s, &p};
  std::array<std::byte, 32> out;
  out.fill(std::byte{0xee});
  ASSERT_TRUE(layout_fits(layout, 32));
  pack_params(layout, 32, args, out.data());

  std::array<std::byte, 32> want{};
  std::memcpy(&want[0], &c, 1);
  std::memcpy(&want[8], &d, 8);
  std::memcpy(&want[16], &s, 2);
  std::memcpy(&want[24], &p, 8);
  EXPECT_EQ(out, want);
}

TEST(LaunchParams, LargeStructParameter) {
  std::vector<std::byte> big(4000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::byte>(i * 7 + 1);
  int n = 3;
  const std::vector<uint64_t> layout = {pack_param(0, 4), pack_param(8, 4000)};
  void* args[] = {&n, big.data()};
  std::vector<std::byte> out(4008, std::byte{0xee});
  pack_params(layout, 4008, args, out.data());
  EXPECT_EQ(std::memcmp(out.data(), &n, 4), 0);
  EXPECT_EQ(out[4], std::byte{0});
  EXPECT_EQ(std::memcmp(out.data() + 8, big.data(), big.size()), 0);
}

TEST(LaunchParams, NoParametersNeedNoArgs) {
  std::byte out[1] = {std::byte{0xee}};
  pack_params({}, 0, nullptr, out);
  EXPECT_EQ(out[0], std::byte{0xee});
}

TEST(LaunchParams, LayoutOutsideTheBufferIsRejected) {
  EXPECT_FALSE(layout_fits(std::vector<uint64_t>{pack_param(4, 8)}, 8));
  EXPECT_FALSE(layout_fits(std::vector<uint64_t>{pack_param(0xffffffffu, 0xffffffffu)}, 16));
  EXPECT_FALSE(layout_fits({}, ipc::kMaxParamBytes + 1));
  EXPECT_TRUE(layout_fits(std::vector<uint64_t>{pack_param(0, 8)}, 8));
}

}  // namespace
}  // namespace funnel::client
