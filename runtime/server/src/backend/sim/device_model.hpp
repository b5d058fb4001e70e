// The device the sim backend describes: an H100-like sm_90 part (describe, occupancy,
// SM groups, stream priorities all answer from these).
#pragma once
#include <cstdint>

namespace funnel::server::sim {

constexpr uint64_t kAlign = 256;  // of every allocation and module variable

// The device the sim describes (an H100-like sm_90 part); occupancy uses these.
constexpr uint32_t kMaxThreadsPerBlock = 1024;
constexpr uint32_t kMaxThreadsPerSm = 2048;
constexpr uint32_t kMaxBlocksPerSm = 32;
constexpr uint32_t kRegistersPerSm = 65536;
constexpr uint32_t kRegisterAllocation = 256;  // registers are allocated per warp in units of this
constexpr uint64_t kSharedPerSm = 233472;
constexpr uint64_t kSharedPerBlockOptin = 232448;
constexpr uint64_t kSharedPerBlockDefault = 49152;
constexpr uint64_t kReservedSharedPerBlock = 1024;
constexpr uint32_t kMultiprocessors = 132;
// An H100 as the driver splits it (cuDevSmResourceSplitByCount at its granularity of 8,
// co-scheduling kept): 15 groups of 8 SMs and 12 left over.
constexpr uint32_t kSmGroupSize = 8;
constexpr uint32_t kSmGroups = 15;
// Stream priorities, as an H100's: 0 (least) to -5 (greatest).
constexpr int kLeastPriority = 0;
constexpr int kGreatestPriority = -5;

}  // namespace funnel::server::sim
