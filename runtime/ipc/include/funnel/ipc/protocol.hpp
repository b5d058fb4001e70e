// Messages on the server's Unix socket (SOCK_SEQPACKET: one message per send).
// A client connection stays open for the client's whole life: its hang-up is how
// each side learns that the other died.
//
//   client  -> server : HelloMsg (role Client)
//   server  -> client : AttachReply (status, channel file name)
//   client  -> server : MappedMsg  (the client mapped the channel; the server unlinks the file)
//   ... all further traffic goes through the channel segment ...
//
//   control -> server : HelloMsg (role Control), then ControlRequest; server -> control: JSON text
#pragma once
#include <cstdint>
#include <type_traits>

#include "funnel/ipc/channel_layout.hpp"  // kProtocolVersion, kMaxDevices

namespace funnel::ipc {

inline constexpr uint64_t kSocketMagic = 0x314b434f534e4e46ull;  // "FNNSOCK1"
inline constexpr const char* kSocketName = "server.sock";
inline constexpr const char* kStartLockName = "start.lock";
inline constexpr uint32_t kMaxControlReply = 256 * 1024;

enum class Role : uint32_t { Client = 1, Control = 2 };

struct HelloMsg {
  uint64_t magic;
  uint32_t version;
  Role role;
  int32_t pid;
  int32_t mpi_rank;     // -1 when unknown
  char command[128];    // the client's command line, for accounting and logs (NUL-terminated)
  // FUNNEL_DEVICE_MEM_LIMIT (or CUDA_MPS_PINNED_DEVICE_MEM_LIMIT) by device: the most
  // device memory the server lets this client hold there; 0: no limit.  (Protocol 4.)
  uint64_t device_mem_limit[kMaxDevices];
  // FUNNEL_GPU_FRACTION (or CUDA_MPS_ACTIVE_THREAD_PERCENTAGE) in 1/10000 of a GPU's SMs,
  // for every device the client uses; 0 or 10000: the whole GPU.  (Protocol 5.)
  uint32_t gpu_share_bp;
  uint32_t gpu_placement;    // GpuPlacement
  uint32_t client_priority;  // ClientPriority (CUDA_MPS_CLIENT_PRIORITY's numbers)
  uint32_t reserved;
};

// How the SM partitions of clients with a GPU fraction are placed (FUNNEL_GPU_PLACEMENT).
enum class GpuPlacement : uint32_t {
  Shared = 0,    // caps that may overlap other clients' (MPS's active thread percentage)
  Disjoint = 1,  // SMs reserved for this client alone among disjoint clients
};
// CUDA_MPS_CLIENT_PRIORITY: 0 normal, 1 below normal.
enum class ClientPriority : uint32_t { Normal = 0, BelowNormal = 1 };
inline constexpr uint32_t kGpuShareWhole = 10000;

struct AttachReply {
  uint64_t magic;
  uint32_t version;
  int32_t status;       // Status
  uint32_t client_id;
  uint32_t reserved;
  uint64_t segment_size;
  char channel_file[64];  // file name inside the run directory
  char message[256];      // why, when status != Success
};

struct MappedMsg {
  uint32_t client_id;
  // The server's ordinal of the GPU the client starts on (FUNNEL_GPU_MAP /
  // FUNNEL_RANKS_PER_GPU, else 0): its worker runs on that GPU's cores.  (Protocol 6.)
  int32_t home_device;
};

struct ControlRequest {
  char verb[32];   // stats, status, clients, plan, terminate, defaults, shutdown
  char arg[224];   // "key=value ..." (NUL-terminated): terminate client=ID | pid=PID;
                   // shutdown [force] [timeout_s=S]; defaults [fraction_bp=N] [mem_limit=B]
                   // [priority=normal|below-normal] (doc/funnelctl.md)
};

static_assert(std::is_trivially_copyable_v<HelloMsg>);
static_assert(std::is_trivially_copyable_v<AttachReply>);
static_assert(std::is_trivially_copyable_v<ControlRequest>);

// File names inside the run directory.
inline constexpr const char* kChannelFilePrefix = "channel.";  // channel.<client_id>
inline constexpr const char* kPinnedFilePrefix = "pinned.";    // pinned.<client_id>.<id>

}  // namespace funnel::ipc
