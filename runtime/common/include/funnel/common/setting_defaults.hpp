// The default values of the FUNNEL_* settings that code outside runtime/common needs as
// constants (funnel::server::ServerOptions' defaults): written here once, used by
// Settings' initializers, setting_table() and the server (tests/ipc/config_test.cpp checks
// that the table's default texts say the same).
#pragma once
#include <cstdint>

namespace funnel::setting_default {

inline constexpr int64_t kIdleExitMs = 3000;         // FUNNEL_IDLE_EXIT_MS
inline constexpr int64_t kAttachTimeoutMs = 30000;   // FUNNEL_ATTACH_TIMEOUT_MS
inline constexpr uint32_t kStagingSlots = 4;         // FUNNEL_STAGING_SLOTS
inline constexpr uint32_t kStagingSlotKb = 2048;     // FUNNEL_STAGING_SLOT_KB
inline constexpr uint32_t kMaxClients = 256;         // FUNNEL_MAX_CLIENTS
inline constexpr uint32_t kCopyThreads = 4;          // FUNNEL_COPY_THREADS
inline constexpr uint32_t kDeviceConnections = 16;    // FUNNEL_DEVICE_CONNECTIONS
inline constexpr uint32_t kServerSpinUs = 2000;      // FUNNEL_SERVER_SPIN_US
inline constexpr uint32_t kServerIdleSpinUs = 50;    // FUNNEL_SERVER_IDLE_SPIN_US
inline constexpr uint32_t kServerSpinBackoffMs = 100;  // FUNNEL_SERVER_SPIN_BACKOFF_MS
inline constexpr uint32_t kServerWorkers = 0;        // FUNNEL_SERVER_WORKERS
inline constexpr uint32_t kLaunchBatch = 32;         // FUNNEL_LAUNCH_BATCH
// FUNNEL_LAUNCH_BATCH's largest value: the server sizes its CUDA graphs by it.
inline constexpr uint32_t kLaunchBatchMax = 64;

}  // namespace funnel::setting_default
