#include "funnel/affinity/cpu_list.hpp"

#include <gtest/gtest.h>

#include <stdexcept>

namespace funnel::affinity {
namespace {

TEST(CpuList, ParsesRangesAndSingles) {
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11"), (CpuList{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpu_list("5,1,1"), (CpuList{1, 5}));
  EXPECT_TRUE(parse_cpu_list("").empty());
}

TEST(CpuList, FormatsCollapsedRanges) {
  EXPECT_EQ(format_cpu_list({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(format_cpu_list({}), "");
  EXPECT_EQ(format_cpu_list(parse_cpu_list("2,18")), "2,18");
}

TEST(CpuList, RejectsMalformedText) {
  EXPECT_THROW(parse_cpu_list("1-"), std::invalid_argument);
  EXPECT_THROW(parse_cpu_list("a"), std::invalid_argument);
  EXPECT_THROW(parse_cpu_list("4-2"), std::invalid_argument);
  EXPECT_THROW(parse_cpu_list("1,,2"), std::invalid_argument);
}

TEST(CpuList, SetOperations) {
  EXPECT_EQ(cpu_union({1, 3}, {2, 3}), (CpuList{1, 2, 3}));
  EXPECT_TRUE(intersects({1, 5}, {5, 9}));
  EXPECT_FALSE(intersects({1, 5}, {2, 9}));
  EXPECT_TRUE(contains({1, 5}, 5));
  EXPECT_FALSE(contains({1, 5}, 2));
}

}  // namespace
}  // namespace funnel::affinity
