// Commands a client writes into its ring.  A record is a CommandHeader followed by
// the opcode's payload struct (and, for variable-sized commands, trailing bytes),
// padded to a multiple of kRecordAlign.  The server copies each record out of the
// ring before it looks at it, then checks its framing against the command table below
// (check_framing) before its handler validates the payload's fields.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <type_traits>

#include "funnel/ipc/channel_layout.hpp"

namespace funnel::ipc {

// The command table: every command, once.  X(name, number, payload, trailing, queues, handler)
//   payload   the struct after the header (NoPayload: nothing follows it)
//   trailing  NameBytes / ParamBytes: that many bytes follow the payload, counted by its
//             name_bytes / param_bytes field (at most kMaxNameBytes / kMaxParamBytes); NoBytes
//   queues    Queues: the command queues work on header.stream (0: the legacy stream), so the
//             stream is busy after it (the client's idle-stream bookkeeping, doc/design/channel.md
//             "Idle streams"); NoQueue: a stream of 0 means "no stream"
//   handler   the server's member function for it (Worker::dispatch, runtime/server/src/session/worker.cpp)
// The enum, the framing rule, queues_on_stream and the server's dispatch are expanded from it:
// a new command is a row here and a handler in the server.  "->" says what a waited call's
// reply holds; one-way commands report an error through the channel's deferred error.
#define FUNNEL_IPC_COMMANDS(X)                                                                             \
  X(Pad, 0, NoPayload, NoBytes, NoQueue, pad) /* filler to the end of the ring; the server skips it */          \
  /* Memory */                                                                                              \
  X(MemAlloc, 1, MemAllocCmd, NoBytes, NoQueue, mem_alloc) /* -> value[0] = device address */              \
  X(MemFree, 2, AddressCmd, NoBytes, NoQueue, mem_free) /* synchronous, as cudaFree */                      \
  X(MemAllocAsync, 3, MemAllocCmd, NoBytes, Queues, mem_alloc_async) /* -> value[0] = device address */     \
  X(MemFreeAsync, 4, AddressCmd, NoBytes, Queues, mem_free_async) /* stream-ordered, one-way */             \
  X(MemGetInfo, 5, NoPayload, NoBytes, NoQueue, mem_get_info) /* -> value[0] = free, value[1] = total */         \
  /* -> value[0] = pinned id, value[1] = size, value[2] = its address in the server (and the GPU's); */    \
  /* file pinned.<client>.<id> */                                                                           \
  X(PinnedAlloc, 6, PinnedAllocCmd, NoBytes, NoQueue, pinned_alloc)                                         \
  X(PinnedFree, 7, PinnedFreeCmd, NoBytes, NoQueue, pinned_free) /* synchronous */                          \
  X(Copy, 8, CopyCmd, NoBytes, Queues, copy) /* one-way unless a reply slot is given */                     \
  X(Memset, 9, MemsetCmd, NoBytes, Queues, memset) /* one-way */                                            \
  /* Virtual memory (cuMemAddressReserve, cuMemMap; doc/design/driver-client.md): a range of the  */        \
  /* server's address space, and new memory of header.device mapped over part of it.  Waited.      */        \
  X(AddressReserve, 10, AddressReserveCmd, NoBytes, NoQueue, address_reserve) /* -> value[0] = address */  \
  X(AddressFree, 11, AddressRangeCmd, NoBytes, NoQueue, address_free)                                       \
  X(MemMap, 12, AddressRangeCmd, NoBytes, NoQueue, mem_map)                                                 \
  X(MemUnmap, 13, AddressRangeCmd, NoBytes, NoQueue, mem_unmap) /* once earlier work is done */             \
  /* Streams and events (ids are chosen by the client) */                                                   \
  X(StreamCreate, 20, StreamCreateCmd, NoBytes, NoQueue, stream_create) /* one-way */                       \
  /* header.stream, one-way (pending work still completes) */                                               \
  X(StreamDestroy, 21, NoPayload, NoBytes, NoQueue, stream_destroy)                                              \
  X(StreamSynchronize, 22, NoPayload, NoBytes, NoQueue, stream_synchronize) /* -> when its work is done */       \
  X(StreamQuery, 23, NoPayload, NoBytes, NoQueue, stream_query) /* -> status Success or NotReady */              \
  X(StreamWaitEvent, 24, EventCmd, NoBytes, Queues, stream_wait_event) /* one-way */                        \
  /* a 32- or 64-bit write to, or wait on, device memory of this client (cuStreamWriteValue*, */            \
  /* cuStreamWaitValue*), one-way, on header.stream */                                                      \
  X(StreamMemOp, 25, StreamMemOpCmd, NoBytes, Queues, stream_mem_op)                                        \
  /* header.stream's access-policy window (cudaStreamSetAttribute); waited */                              \
  X(StreamAttribute, 26, StreamAttributeCmd, NoBytes, NoQueue, stream_attribute)                            \
  X(EventCreate, 30, EventCreateCmd, NoBytes, NoQueue, event_create) /* one-way */                          \
  X(EventDestroy, 31, EventCmd, NoBytes, NoQueue, event_destroy) /* one-way */                              \
  X(EventRecord, 32, EventRecordCmd, NoBytes, Queues, event_record) /* on header.stream, one-way */         \
  X(EventSynchronize, 33, EventCmd, NoBytes, NoQueue, event_synchronize) /* -> when the event completed */  \
  X(EventQuery, 34, EventCmd, NoBytes, NoQueue, event_query) /* -> Success or NotReady */                   \
  /* -> value[0] = bit pattern of a float (ms) */                                                           \
  X(EventElapsedTime, 35, EventPairCmd, NoBytes, NoQueue, event_elapsed)                                    \
  /* Device */                                                                                              \
  /* -> when all of this client's work on header.device is done */                                          \
  X(DeviceSynchronize, 40, NoPayload, NoBytes, NoQueue, device_synchronize)                                      \
  /* frees everything this client holds on header.device */                                                 \
  X(DeviceReset, 41, NoPayload, NoBytes, NoQueue, device_reset)                                                  \
  X(SetLimit, 42, LimitCmd, NoBytes, NoQueue, set_limit)                                                    \
  X(GetLimit, 43, LimitCmd, NoBytes, NoQueue, get_limit) /* -> value[0] */                                  \
  /* cudaProfilerStart/Stop: this client's profiled range on header.device (server: profiler.hpp) */      \
  X(Profiler, 44, ProfilerCmd, NoBytes, NoQueue, profiler)                                                  \
  /* cudaCtxResetPersistingL2Cache: header.device's persisting L2 lines made normal; waited */             \
  X(ResetPersistingL2, 45, NoPayload, NoBytes, NoQueue, reset_persisting_l2)                                \
  /* -> once every earlier command was consumed (not necessarily completed) */                              \
  X(Fence, 50, NoPayload, NoBytes, NoQueue, fence)                                                               \
  /* Kernels (doc/design/kernels.md).  Module and kernel ids are chosen by the client. */                   \
  /* -> value[0] = 1: the server holds these bytes (module loaded), 0: send them */                         \
  X(ModuleQuery, 60, ModuleCmd, NoBytes, NoQueue, module_query)                                             \
  /* one-way: staging slot bytes appended to the module's upload (slot freed) */                            \
  X(ModuleData, 61, ModuleDataCmd, NoBytes, NoQueue, module_data)                                           \
  /* -> once the uploaded bytes were checked against the hash and loaded */                                 \
  X(ModuleLoad, 62, ModuleCmd, NoBytes, NoQueue, module_load)                                               \
  X(ModuleUnload, 63, ModuleCmd, NoBytes, NoQueue, module_unload) /* one-way (its kernels become invalid) */ \
  /* + name bytes: a __managed__ variable of a kModuleHasManaged upload (after ModuleQuery, before      \
     ModuleLoad): its storage is the client's managed memory at address (doc/design/managed.md) */         \
  X(ModuleManaged, 76, ModuleManagedCmd, NameBytes, NoQueue, module_managed)                                \
  /* + name bytes -> value[0] = params, value[1] = param buffer bytes, value[2..4] = params 0..2 as         \
     pack_param() */                                                                                        \
  X(KernelGet, 64, KernelGetCmd, NameBytes, NoQueue, kernel_get)                                            \
  /* -> value[0..4] = params first..first+4 as pack_param() */                                              \
  X(KernelParams, 65, KernelParamsCmd, NoBytes, NoQueue, kernel_params)                                     \
  X(Launch, 66, LaunchCmd, ParamBytes, Queues, launch) /* + param buffer bytes, one-way, on header.stream */ \
  /* + name bytes -> value[0] = device address, value[1] = size (header.device) */                          \
  X(SymbolGet, 67, SymbolGetCmd, NameBytes, NoQueue, symbol_get)                                            \
  /* -> FuncAttributes packed by pack_func_attributes() (header.device) */                                  \
  X(FuncGetAttributes, 68, KernelCmd, NoBytes, NoQueue, func_get_attributes)                                \
  X(FuncSetAttribute, 69, FuncSetAttributeCmd, NoBytes, NoQueue, func_set_attribute)                        \
  /* -> value[0] = active blocks per multiprocessor (header.device) */                                      \
  X(Occupancy, 70, OccupancyCmd, NoBytes, NoQueue, occupancy)                                               \
  X(HostFunc, 71, HostFuncCmd, NoBytes, Queues, host_func) /* one-way, on header.stream */                  \
  /* dynamic_shared_bytes = blocks per multiprocessor -> value[0] = dynamic shared memory available per     \
     block (header.device) */                                                                               \
  X(OccupancyDynamicSmem, 72, OccupancyCmd, NoBytes, NoQueue, occupancy_dynamic_smem)                       \
  /* param_bytes 0 (no parameters follow) -> value[0] = clusters */                                         \
  X(MaxActiveClusters, 73, LaunchCmd, NoBytes, NoQueue, max_active_clusters)                                \
  /* cluster dimensions ignored -> value[0] = the largest cluster size that fits (header.device) */          \
  X(MaxClusterSize, 75, LaunchCmd, NoBytes, NoQueue, max_cluster_size)                                      \
  /* cuTensorMapEncodeTiled's arguments -> value[0..4] = bytes 40 x part.. of the 128-byte map */            \
  X(TensorMapEncode, 74, TensorMapCmd, NoBytes, NoQueue, tensor_map_encode)                                 \
  /* 77..79 stay reserved for kernels. */                                                                   \
  /* Graphs (doc/design/graphs.md): a graph's nodes, each after those it depends on, into build    */      \
  /* graph_id (index 0 starts it), then instantiated into an executable graph (ids the client's). */      \
  X(GraphNode, 80, GraphNodeCmd, GraphBytes, NoQueue, graph_node) /* + dependencies, params; one-way */     \
  X(GraphInstantiate, 81, GraphBuildCmd, NoBytes, NoQueue, graph_instantiate) /* the build is consumed */   \
  X(GraphUpdate, 82, GraphBuildCmd, NoBytes, NoQueue, graph_update) /* the exec's nodes, same topology */   \
  X(GraphLaunch, 83, GraphExecCmd, NoBytes, Queues, graph_launch) /* one-way, on header.stream */           \
  X(GraphUpload, 84, GraphExecCmd, NoBytes, Queues, graph_upload) /* one-way, on header.stream */           \
  X(GraphExecDestroy, 85, GraphExecCmd, NoBytes, NoQueue, graph_exec_destroy) /* one-way */                 \
  /* A graph tree (conditional nodes): GraphTreeCmd's op; Handle -> value[0] = handle, CondNode ->  */    \
  /* value[0] = the node's index, value[1] = its first body's part.  Waited. */                            \
  X(GraphTree, 86, GraphTreeCmd, NoBytes, NoQueue, graph_tree)                                              \
  /* IPC memory handles between clients of this server (doc/design/ipc.md).  Waited. */                   \
  /* The allocation holding address -> value[0] = token, value[1] = its base, value[2] = its size */      \
  X(IpcExport, 90, AddressCmd, NoBytes, NoQueue, ipc_export)                                                \
  /* Another client's export -> value[0] = base, value[1] = size, value[2] = device */                    \
  X(IpcOpen, 91, IpcOpenCmd, NoBytes, NoQueue, ipc_open)                                                    \
  X(IpcClose, 92, AddressCmd, NoBytes, NoQueue, ipc_close) /* an opened base; the range is gone at once */  \
  /* An interprocess event of this client -> value[0] = token */                                           \
  X(IpcExportEvent, 93, EventCmd, NoBytes, NoQueue, ipc_export_event)                                       \
  /* Another client's exported event as this client's event_id -> value[0] = its device */                 \
  X(IpcOpenEvent, 94, IpcOpenEventCmd, NoBytes, NoQueue, ipc_open_event)                                    \
  /* A GPU-local message's half (doc/design/mpi-device-buffers.md): one-way, on the legacy stream of   */    \
  /* header.device; the server pairs the halves and the GPU stores each side's MsgWord when done.   */    \
  X(MsgPost, 95, MsgPostCmd, NoBytes, Queues, msg_post)                                                     \
  /* The job's ranks on this server (GPU-local messages' peers; doc/mpi.md): joins as `rank` (>= 0)  */   \
  /* -> value[0] = this rank's MsgMembership, value[1] = `peer`'s (>= 0), value[2] = 1 once settled */   \
  X(MsgWorld, 96, MsgWorldCmd, NoBytes, NoQueue, msg_world)                                                 \
  /* A parked send for `dest` (MPI_Probe) -> value[0] = 1 if one, [1] = its source, [2] = its tag,   */   \
  /* [3] = its seq, [4] = its bytes                                                                     */   \
  X(MsgProbe, 97, MsgProbeCmd, NoBytes, NoQueue, msg_probe)                                                 \
  X(Detach, 100, DetachCmd, NoBytes, NoQueue, detach) /* the client leaves; the server frees what it held */ \
  /* Arrays, textures and surfaces (doc/design/arrays.md); ids are chosen by the client.  Waited. */      \
  X(ArrayCreate, 101, ArrayCreateCmd, NoBytes, NoQueue, array_create) /* an array or mipmapped array */     \
  X(ArrayDestroy, 102, ArrayCmd, NoBytes, NoQueue, array_destroy) /* synchronous, as cudaFreeArray */        \
  X(ArrayLevel, 103, ArrayLevelCmd, NoBytes, NoQueue, array_level) /* a mipmapped array's level */           \
  X(TexCreate, 104, TexCreateCmd, NoBytes, NoQueue, tex_create) /* -> value[0] = the object's handle */      \
  X(TexDestroy, 105, TexCmd, NoBytes, NoQueue, tex_destroy)

enum class Opcode : uint16_t {
#define FUNNEL_IPC_OPCODE(name, number, ...) name = number,
  FUNNEL_IPC_COMMANDS(FUNNEL_IPC_OPCODE)
#undef FUNNEL_IPC_OPCODE
};

// CLOCK_MONOTONIC (one clock for every process of the node) in microseconds, modulo 2^16:
// CommandHeader::posted_us; the delay since `then` is uint16_t(monotonic_us16() - then).
inline uint16_t monotonic_us16() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint16_t>(static_cast<uint64_t>(ts.tv_sec) * 1000000u + static_cast<uint64_t>(ts.tv_nsec) / 1000u);
}

struct CommandHeader {
  uint32_t size;        // bytes of the whole record, a multiple of kRecordAlign
  Opcode opcode;
  // For a waited call (reply_slot given): the client's CLOCK_MONOTONIC in microseconds,
  // modulo 2^16, when it wrote the record, from which the server counts its pick-up delay
  // (ClientCounters::pickup).  Any value is valid (65.5 ms or more reads as its remainder).
  uint16_t posted_us;
  uint64_t seq;         // client-assigned, strictly increasing
  uint32_t reply_slot;  // kNoReply for one-way commands
  int32_t device;       // index into the client's device table
  uint64_t stream;      // 0: the legacy default stream; otherwise a client stream id
};
static_assert(sizeof(CommandHeader) == 32);

// address 0: anywhere.  Otherwise (MemAlloc only) exactly there: a range the client reserved
// in its own address space because the server's first choice lay on its own memory
// (doc/design/channel.md, "Device addresses in the client"); 2 MiB aligned, below 2^47.
struct MemAllocCmd { uint64_t size; uint64_t address = 0; };
inline constexpr uint64_t kPlacedGranule = uint64_t{2} << 20;        // the client's reservations too
inline constexpr uint64_t kPlacedAddressLimit = uint64_t{1} << 47;   // the 47-bit user address space
struct AddressCmd { uint64_t address; };
// AddressReserve: `size` a multiple of kPlacedGranule, `alignment` 0 (the granule) or a power of
// two up to 2^30.  AddressRangeCmd: a reserved range (AddressFree), or granule-aligned part of one
// (MemMap, MemUnmap: a whole earlier mapping).
struct AddressReserveCmd { uint64_t size; uint64_t alignment; };
struct AddressRangeCmd { uint64_t address; uint64_t size; };
struct PinnedAllocCmd { uint64_t size; uint32_t flags; uint32_t reserved; };
struct PinnedFreeCmd { uint64_t id; };

enum class MemSpace : uint32_t {
  Device = 1,   // address = device address
  Staging = 2,  // index = staging slot, address = byte offset in it
  Pinned = 3,   // id = pinned allocation, address = byte offset in it
  // id = array; address = a byte offset in the array as if its rows (width * element bytes) and
  // slices (rows * height) lay one after the other: a region's rows stay in one slice and its
  // pitch is the row's bytes
  Array = 4,
};

struct Location {
  MemSpace space;
  uint32_t index;
  uint64_t id;
  uint64_t address;
};

// A 2-D copy; a 1-D copy has height 1 and pitches equal to width.
// With a staging destination the server marks the slot Ready when the copy completed;
// with a staging source it marks the slot Free.
struct CopyCmd {
  Location dst;
  Location src;
  uint64_t width;
  uint64_t height;
  uint64_t dst_pitch;
  uint64_t src_pitch;
};

// StreamMemOpCmd: what the driver's stream memory operations take.  The wait conditions and
// flags have the driver's values (CU_STREAM_WAIT_VALUE_*, CU_STREAM_WRITE_VALUE_*; the client
// driver checks that they agree).
enum class StreamMemOp : uint32_t { Write32 = 1, Write64 = 2, Wait32 = 3, Wait64 = 4 };
inline constexpr uint32_t kWaitValueGeq = 0x0, kWaitValueEq = 0x1, kWaitValueAnd = 0x2, kWaitValueNor = 0x3;
inline constexpr uint32_t kWaitValueFlush = 1u << 30;
inline constexpr uint32_t kWriteValueNoMemoryBarrier = 0x1;
// Whether some word meets a wait: AND with 0 and NOR with every bit set never are (such a wait
// would hold its stream for ever: refused by the client and the server).
constexpr bool wait_satisfiable(uint32_t flags, uint64_t value, bool wide) noexcept {
  const uint64_t all = wide ? ~uint64_t{0} : uint64_t{0xffffffffu};
  if ((flags & 0x3u) == kWaitValueAnd) return (value & all) != 0;
  if ((flags & 0x3u) == kWaitValueNor) return (value & all) != all;
  return true;
}
struct StreamMemOpCmd {
  uint64_t address;  // device memory of this client, aligned to the operation's size
  uint64_t value;
  uint32_t op;       // StreamMemOp
  uint32_t flags;    // a wait: the condition (GEQ, EQ, AND, NOR), kWaitValueFlush; a write: kWriteValueNoMemoryBarrier
};

struct MemsetCmd {
  uint64_t address;
  uint64_t pitch;
  uint64_t width;
  uint64_t height;
  uint32_t value;    // one element: the low byte, the low 16 bits or all 32 (cuMemsetD8/16/32)
  uint32_t element;  // bytes per element: 1 (0 reads as 1), 2 or 4; width, pitch and address are multiples
};

// An access-policy window (cudaAccessPolicyWindow) for header.stream: `bytes` of the client's
// device memory from `base` (bytes 0: no window), hit_ratio in [0, 1], the hit and miss properties
// cudaAccessPropertyNormal (0), Streaming (1) or Persisting (2).
struct StreamAttributeCmd {
  uint64_t base;
  uint64_t bytes;
  float hit_ratio;
  uint32_t hit_prop;
  uint32_t miss_prop;
  uint32_t reserved;
};

// Stream flags as cudaStreamCreateWithFlags takes them.
inline constexpr uint32_t kStreamNonBlocking = 0x1;
struct StreamCreateCmd { uint64_t stream_id; uint32_t flags; int32_t priority; };

// Event flags as cudaEventCreateWithFlags takes them.
inline constexpr uint32_t kEventBlockingSync = 0x1;
inline constexpr uint32_t kEventDisableTiming = 0x2;
struct EventCreateCmd { uint64_t event_id; uint32_t flags; uint32_t reserved; };
struct EventCmd { uint64_t event_id; uint32_t flags; uint32_t reserved; };
struct EventPairCmd { uint64_t start_id; uint64_t end_id; };
// The stream stores `generation` into event state word `state_slot` once it reaches the
// record (kNoEventSlot: none).  Generations of one slot only grow (wrapping), across
// the events that use it in turn, so a late store from an earlier user never looks newer.
inline constexpr uint32_t kNoEventSlot = 0xffffffffu;
// Whether a state word that holds `seen` has reached `generation` (wrapping compare).
constexpr bool generation_reached(uint32_t seen, uint32_t generation) noexcept {
  return static_cast<int32_t>(seen - generation) >= 0;
}
struct EventRecordCmd { uint64_t event_id; uint32_t flags; uint32_t state_slot; uint32_t generation; uint32_t reserved; };

struct LimitCmd { uint32_t limit; uint32_t reserved; uint64_t value; };
struct ProfilerCmd { uint32_t start; uint32_t reserved; };  // start: 1 start, 0 stop

// The client's own threads' CPU times (funnel/common/cpu_times.hpp), read just before it
// sends its Detach: the server cannot read them itself once the client has exited, which it
// may have by the time its worker takes the record.  kNoCpuTime: the client could not read
// them.  Only reported (job report, funnelctl clients); the server checks the range.
inline constexpr uint64_t kNoCpuTime = ~uint64_t{0};
inline constexpr uint64_t kMaxCpuTimeNs = uint64_t{1} << 62;
struct DetachCmd { uint64_t run_ns; uint64_t wait_ns; };

// ---- kernels ---------------------------------------------------------------------
// A fat binary (the bytes nvcc's __cudaRegisterFatBinary wrapper points at) is known by
// its digest (funnel::ipc::module_digest: 128 bits of the SHA-256 of the bytes) and its
// size.  ModuleQuery asks whether the server already has those bytes (from
// this or any other client); if not, the client sends them through staging slots
// (ModuleData, in order) and ModuleLoad makes the server check the hash and load them.
inline constexpr uint32_t kModuleHasVariables = 0x1;  // registers __device__/__constant__ globals:
                                                      // the server gives this client its own copy
// Has __managed__ variables (ModuleManaged): never shared or cached; the server loads the cubin for
// its GPU with their constant-bank slots set to the client's addresses and their initial values
// written there (doc/design/managed.md).
inline constexpr uint32_t kModuleHasManaged = 0x2;
struct ModuleCmd {
  uint64_t module_id;
  uint8_t digest[16];
  uint32_t flags;  // kModule*
  uint32_t reserved;
  uint64_t size;   // bytes of the fat binary
};
static_assert(sizeof(ModuleCmd) == 40);
// Largest fat binary a client may upload.
inline constexpr uint64_t kMaxModuleBytes = uint64_t{1} << 30;
struct ModuleDataCmd { uint64_t module_id; uint64_t offset; uint64_t bytes; uint32_t staging_slot; uint32_t reserved; };

// Largest kernel or symbol name a client may send.
inline constexpr uint32_t kMaxNameBytes = 4096;
// Largest parameter buffer of a launch (CUDA 12.1+ allows 32764 bytes on Volta and later).
inline constexpr uint32_t kMaxParamBytes = 32764;

// Followed by name_bytes bytes of the (mangled) device name, no terminator.
struct KernelGetCmd { uint64_t kernel_id; uint64_t module_id; uint32_t name_bytes; uint32_t reserved; };
struct KernelParamsCmd { uint64_t kernel_id; uint32_t first; uint32_t reserved; };
struct KernelCmd { uint64_t kernel_id; };
// One parameter of a kernel: where it goes in the parameter buffer.
constexpr uint64_t pack_param(uint32_t offset, uint32_t size) noexcept { return (uint64_t{offset} << 32) | size; }
constexpr uint32_t param_offset(uint64_t packed) noexcept { return static_cast<uint32_t>(packed >> 32); }
constexpr uint32_t param_size(uint64_t packed) noexcept { return static_cast<uint32_t>(packed); }

inline constexpr uint32_t kLaunchCooperative = 0x1;
// Followed by param_bytes bytes: the kernel's parameter buffer, each parameter at the
// offset KernelGet reported.
struct LaunchCmd {
  uint64_t kernel_id;
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared_bytes;  // dynamic shared memory
  uint32_t flags;         // kLaunch*
  uint32_t cluster[3];    // 0,0,0: none (the kernel's compiled cluster shape, if any, applies)
  int32_t priority;       // stream priority for this launch; 0: the stream's own
  uint32_t param_bytes;
  uint32_t reserved;
};
static_assert(sizeof(LaunchCmd) == 64);

struct SymbolGetCmd { uint64_t module_id; uint32_t name_bytes; uint32_t reserved; };
// Largest number of __managed__ variables one module may have.
inline constexpr uint32_t kMaxManagedPerModule = 4096;
struct ModuleManagedCmd { uint64_t module_id; uint64_t address; uint64_t size; uint32_t name_bytes; uint32_t reserved; };

// cudaFuncAttributes as the server reports it.
struct FuncAttributes {
  uint64_t shared_size_bytes = 0;
  uint64_t const_size_bytes = 0;
  uint64_t local_size_bytes = 0;
  uint32_t max_threads_per_block = 0;
  uint32_t num_regs = 0;
  uint32_t ptx_version = 0;
  uint32_t binary_version = 0;
  uint32_t max_dynamic_shared_size_bytes = 0;
  uint32_t preferred_shmem_carveout = 0;
  uint32_t cache_mode_ca = 0;
  uint32_t required_cluster[3] = {0, 0, 0};
  uint32_t cluster_dim_must_be_set = 0;
  uint32_t non_portable_cluster_size_allowed = 0;
  uint32_t cluster_scheduling_policy_preference = 0;
  bool operator==(const FuncAttributes&) const = default;
};
// Packed into the five reply values; unpack_func_attributes(pack_func_attributes(a)) == a
// for every field within its bit width (16 bits for registers, versions, cluster dims).
constexpr void pack_func_attributes(const FuncAttributes& a, uint64_t (&v)[5]) noexcept {
  v[0] = a.shared_size_bytes;
  v[1] = a.const_size_bytes;
  v[2] = a.local_size_bytes;
  v[3] = uint64_t{a.max_threads_per_block} | (uint64_t{a.num_regs & 0xffff} << 32) |
         (uint64_t{a.ptx_version & 0xffff} << 48);
  v[4] = uint64_t{a.max_dynamic_shared_size_bytes & 0xfffff} | (uint64_t{a.preferred_shmem_carveout & 0x7f} << 20) |
         (uint64_t{a.cache_mode_ca & 1} << 27) | (uint64_t{a.binary_version & 0xff} << 28) |
         (uint64_t{a.required_cluster[0] & 0x3f} << 36) | (uint64_t{a.required_cluster[1] & 0x3f} << 42) |
         (uint64_t{a.required_cluster[2] & 0x3f} << 48) | (uint64_t{a.cluster_dim_must_be_set & 1} << 54) |
         (uint64_t{a.non_portable_cluster_size_allowed & 1} << 55) |
         (uint64_t{a.cluster_scheduling_policy_preference & 0xf} << 56);
}
constexpr FuncAttributes unpack_func_attributes(const uint64_t (&v)[5]) noexcept {
  FuncAttributes a;
  a.shared_size_bytes = v[0];
  a.const_size_bytes = v[1];
  a.local_size_bytes = v[2];
  a.max_threads_per_block = static_cast<uint32_t>(v[3]);
  a.num_regs = static_cast<uint32_t>((v[3] >> 32) & 0xffff);
  a.ptx_version = static_cast<uint32_t>((v[3] >> 48) & 0xffff);
  a.max_dynamic_shared_size_bytes = static_cast<uint32_t>(v[4] & 0xfffff);
  a.preferred_shmem_carveout = static_cast<uint32_t>((v[4] >> 20) & 0x7f);
  a.cache_mode_ca = static_cast<uint32_t>((v[4] >> 27) & 1);
  a.binary_version = static_cast<uint32_t>((v[4] >> 28) & 0xff);
  a.required_cluster[0] = static_cast<uint32_t>((v[4] >> 36) & 0x3f);
  a.required_cluster[1] = static_cast<uint32_t>((v[4] >> 42) & 0x3f);
  a.required_cluster[2] = static_cast<uint32_t>((v[4] >> 48) & 0x3f);
  a.cluster_dim_must_be_set = static_cast<uint32_t>((v[4] >> 54) & 1);
  a.non_portable_cluster_size_allowed = static_cast<uint32_t>((v[4] >> 55) & 1);
  a.cluster_scheduling_policy_preference = static_cast<uint32_t>((v[4] >> 56) & 0xf);
  return a;
}

// attribute: a cudaFuncAttribute value (8: MaxDynamicSharedMemorySize, 9:
// PreferredSharedMemoryCarveout, ...), or kFuncCacheConfig for cudaFuncSetCacheConfig
// (value: a cudaFuncCache).
inline constexpr uint32_t kFuncCacheConfig = 0x10000;
struct FuncSetAttributeCmd { uint64_t kernel_id; uint32_t attribute; int32_t value; };
struct OccupancyCmd { uint64_t kernel_id; uint32_t block_size; uint32_t flags; uint64_t dynamic_shared_bytes; };

// cuTensorMapEncodeTiled (a Hopper tensor-memory-accelerator descriptor, CUtensorMap): its
// arguments, `rank` (1..5) entries of each array and zeros after them.  The driver encodes it
// on the host alone, but only NVIDIA's driver knows the format, so the server encodes it and
// answers part `part` (0..3) of its 128 bytes, bytes [40 part, 40 part + 40), in value[0..4]
// (the last part: 8 bytes).  global_address is device memory as the client sees it (the
// server's address too).
inline constexpr uint32_t kTensorMapBytes = 128;
inline constexpr uint32_t kTensorMapPartBytes = 40;  // a reply's five values
inline constexpr uint32_t kTensorMapParts = (kTensorMapBytes + kTensorMapPartBytes - 1) / kTensorMapPartBytes;
inline constexpr uint32_t kTensorMapMaxRank = 5;
// Where part `part` (< kTensorMapParts) lies in the map: its first byte and its length.
struct TensorMapPart { uint32_t first, bytes; };
constexpr TensorMapPart tensor_map_part(uint32_t part) noexcept {
  const uint32_t first = part * kTensorMapPartBytes;
  return {first, first + kTensorMapPartBytes <= kTensorMapBytes ? kTensorMapPartBytes : kTensorMapBytes - first};
}
struct TensorMapCmd {
  uint32_t part;
  uint32_t data_type;     // CUtensorMapDataType
  uint32_t rank;
  uint32_t interleave;    // CUtensorMapInterleave
  uint32_t swizzle;       // CUtensorMapSwizzle
  uint32_t l2_promotion;  // CUtensorMapL2promotion
  uint32_t oob_fill;      // CUtensorMapFloatOOBfill
  uint32_t reserved;
  uint64_t global_address;
  uint64_t global_dim[kTensorMapMaxRank];
  uint64_t global_strides[kTensorMapMaxRank - 1];  // bytes, of dimensions 1..rank-1
  uint32_t box_dim[kTensorMapMaxRank];
  uint32_t element_strides[kTensorMapMaxRank];
};
static_assert(sizeof(TensorMapCmd) == 152);

// cudaLaunchHostFunc: the stream stores `generation` into event state word
// `reached_slot` when it gets there, then waits until the client stores `generation`
// into word `done_slot` (after the function returned).  The server stores it itself
// if the client goes away first, so the stream never stays blocked.
struct HostFuncCmd { uint32_t reached_slot; uint32_t done_slot; uint32_t generation; uint32_t reserved; };

// ---- graphs ----------------------------------------------------------------------
// A node of a graph on its way to the server (GraphNode): its kind, the indices of the nodes
// of the same build it depends on (each below its own index) and, for a kernel, its parameter
// buffer, in that order after the payload.  Copies may use device memory and pinned buffers
// (no staging slot); events are the client's.
// Host: a host function the client runs (doc/design/graphs.md, "Host nodes"): the graph stores 1
// into event state word `reached_slot`, waits until the client stores 1 into `done_slot`, then
// stores 0 into both (generation unused).
enum class GraphNodeKind : uint32_t {
  Empty = 0,
  Kernel = 1,
  Copy = 2,
  Memset = 3,
  EventRecord = 4,
  EventWait = 5,
  Host = 6,
  Conditional = 7,
};
// The most nodes one build holds, and the most dependencies of one node.
inline constexpr uint32_t kMaxGraphNodes = 1u << 16;
inline constexpr uint32_t kMaxGraphDeps = 1024;
// The most builds a client has under way at once.
inline constexpr uint32_t kMaxGraphBuilds = 16;
// Conditional: the tree's conditional node `cond` (made by GraphTree CondNode), after its
// dependencies.
struct GraphCondRef { uint32_t cond; uint32_t reserved; };
struct GraphNodeCmd {
  uint64_t graph;      // the build (a client id)
  uint32_t index;      // 0, 1, ... in the order sent
  uint32_t kind;       // GraphNodeKind
  uint32_t dep_count;  // uint32_t indices follow the payload (nodes of the same part)
  uint32_t part;       // a build of a tree: the tree's graph it goes into (0: the root); else 0
  union {
    LaunchCmd launch;   // Kernel: launch.param_bytes of parameters follow the dependencies
    CopyCmd copy;       // Copy
    MemsetCmd memset;   // Memset
    EventCmd event;     // EventRecord, EventWait
    HostFuncCmd host;   // Host
    GraphCondRef cond;  // Conditional
  };
};
static_assert(sizeof(GraphNodeCmd) == 104);
// Instantiation flags the server takes (cudaGraphInstantiateFlag*): none of them change how it
// runs a graph (a graph has no memory nodes; node priorities are not sent).
inline constexpr uint32_t kGraphInstantiateAutoFree = 0x1, kGraphInstantiateUseNodePriority = 0x8;
// GraphInstantiate: build `graph` (of `nodes` nodes) into executable graph `exec` (a new id);
// GraphUpdate: the same build as exec's new nodes (same kinds and dependencies).  Waited.
// `tree`: the graph tree the build goes into (0: a graph of its own).
struct GraphBuildCmd { uint64_t graph; uint64_t exec; uint32_t nodes; uint32_t flags; uint64_t tree; };
struct GraphExecCmd { uint64_t exec; };
// A graph tree (doc/design/graphs.md, "Conditional nodes"): a graph the server keeps from the
// creation of its first conditional handle on, because the handle is a value of that graph and
// kernels take it as an argument.  Its parts: 0 the graph itself, then the bodies of its
// conditional nodes, numbered by the server as they are made.  A build of the graph goes into it.
//   Create       a new tree `tree` (a client id) on header.device
//   Destroy      the tree (an executable graph made of it lives on)
//   Handle       a conditional handle of part `part`: value = default launch value, flags
//                (cudaGraphCondAssignDefault) -> value[0] = the handle
//   CondNode     a conditional node in part `part`: handle (of this tree), value = type
//                (cudaGraphCondTypeIf, While, Switch), flags = size (its bodies) -> value[0] = its
//                index, value[1] = the part of its first body (the others follow)
//   CondDestroy  conditional node `value`, its bodies and what they hold
enum class GraphTreeOp : uint32_t { Create = 0, Destroy = 1, Handle = 2, CondNode = 3, CondDestroy = 4 };
inline constexpr uint32_t kMaxGraphTrees = 64;        // per client
inline constexpr uint32_t kMaxGraphTreeParts = 4096;  // per tree
inline constexpr uint32_t kMaxGraphTreeHandles = 4096;
struct GraphTreeCmd {
  uint64_t tree;
  uint64_t handle;
  uint32_t op;  // GraphTreeOp
  uint32_t part;
  uint32_t value;
  uint32_t flags;
};

// ---- arrays, textures, surfaces ----------------------------------------------------
// ArrayCreate: an array of `levels` 0 (cuArray3DCreate) or a mipmapped array of `levels` levels,
// `width` x `height` x `depth` elements (0 for an absent dimension, as CUDA_ARRAY3D_DESCRIPTOR),
// elements of `channels` (1, 2, 4) of CUarray_format `format`; flags: CUDA_ARRAY3D_* (layered
// 0x1, surface load/store 0x2, cubemap 0x4, texture gather 0x8).
inline constexpr uint32_t kArrayLayered = 0x1, kArraySurface = 0x2, kArrayCubemap = 0x4, kArrayGather = 0x8;
inline constexpr uint32_t kMaxArrays = 65536;  // per client
struct ArrayCreateCmd {
  uint64_t array_id;
  uint64_t width;
  uint64_t height;
  uint64_t depth;
  uint32_t format;
  uint32_t channels;
  uint32_t flags;
  uint32_t levels;
};
struct ArrayCmd { uint64_t array_id; };
// Level `level` of mipmapped array `mipmap_id`, as array `array_id` (the mipmapped array's: gone
// with it; ArrayDestroy of it is refused).
struct ArrayLevelCmd { uint64_t mipmap_id; uint64_t array_id; uint32_t level; uint32_t reserved; };
// A texture object (surface 0) or surface object (surface 1) of the client's memory, as the
// driver's CUDA_RESOURCE_DESC, CUDA_TEXTURE_DESC and CUDA_RESOURCE_VIEW_DESC describe it.
// res_type: CUresourcetype (0 array, 1 mipmapped array, 2 linear, 3 pitch 2-D); a surface: array.
struct TexCreateCmd {
  uint32_t surface;
  uint32_t res_type;
  uint64_t res_id;            // array, mipmapped array
  uint64_t address;           // linear, pitch 2-D: device memory of the client's
  uint32_t format;            // linear, pitch 2-D: CUarray_format
  uint32_t channels;
  uint64_t size;              // linear: bytes
  uint64_t width, height, pitch;  // pitch 2-D
  uint32_t address_mode[3];   // CUaddress_mode
  uint32_t filter_mode;       // CUfilter_mode
  uint32_t flags;             // CU_TRSF_*
  uint32_t max_anisotropy;
  uint32_t mipmap_filter_mode;
  float mipmap_level_bias;
  float min_mipmap_level_clamp;
  float max_mipmap_level_clamp;
  float border_color[4];
  uint32_t has_view;          // 1: the view below applies
  uint32_t view_format;       // CUresourceViewFormat
  uint64_t view_width, view_height, view_depth;
  uint32_t first_level, last_level, first_layer, last_layer;
};
struct TexCmd { uint64_t handle; uint32_t surface; uint32_t reserved; };

// ---- IPC ---------------------------------------------------------------------------
struct IpcOpenCmd { uint64_t token; };
struct IpcOpenEventCmd { uint64_t token; uint64_t event_id; };

// ---- GPU-local messages (MsgPost) -------------------------------------------------
// A message half: (world, comm, source, dest, tag, seq) is its envelope (world ranks; seq counts
// the sends, or the receives, of one (world, comm, source, dest, tag)); `address`/`bytes` the
// poster's device memory (a send's bytes, a receive's capacity); `word_pinned`/`word_offset` a
// MsgWord in one of the poster's pinned buffers, 16-byte aligned, set to kMsgPending by the
// client before the post.
struct MsgPostCmd {
  uint64_t world;
  uint64_t comm;
  int32_t source;
  int32_t dest;
  int32_t tag;
  uint32_t role;  // kMsgSend or kMsgRecv
  uint64_t seq;
  uint64_t address;
  uint64_t bytes;
  uint64_t word_pinned;
  uint64_t word_offset;
};
static_assert(sizeof(MsgPostCmd) == 72);
inline constexpr uint32_t kMsgSend = 0, kMsgRecv = 1;
// A half's completion, stored by the GPU after the copy (or by the server for a failure):
// `bytes` (the send's size, for a receive's status) is written before `state` leaves kMsgPending.
// `ticket`: the client's, changed each time it arms the word (so the server tells a word's new
// message from the one it last answered there).
enum MsgState : uint32_t {
  kMsgPending = 0,
  kMsgDone = 1,
  kMsgTruncated = 2,  // a receive whose capacity was smaller than the send: its first bytes copied
  kMsgPeerGone = 3,   // the other side's process left the server
  kMsgFailed = 4,     // the copy could not be queued (or the envelope was posted twice)
};
struct MsgWord {
  std::atomic<uint32_t> state;
  std::atomic<uint32_t> ticket;
  std::atomic<uint64_t> bytes;
};
static_assert(sizeof(MsgWord) == 16);
// The ranks of one world (job) attached to this server, learnt without any MPI collective (a rank
// not under funnel takes part in none): each rank joins at MPI_Init, saying how many ranks of the
// world its launcher put on this node (`local_size`, 0: unknown) and whether it takes GPU-local
// messages (kWorldLocal).  The world settles once `local_size` ranks joined, or kWorldWindowMs
// after its first join when someone asks then; a rank that joins after that is an outsider, so
// every rank gets the same answer for a peer from first to last.
struct MsgWorldCmd {
  uint64_t world;
  int32_t rank;        // joins as this world rank (-1: asks only)
  int32_t local_size;  // the world's ranks on this node by the launcher (0: unknown)
  int32_t peer;        // asks about this world rank (-1: nothing)
  uint32_t flags;      // kWorldLocal
};
static_assert(sizeof(MsgWorldCmd) == 24);
inline constexpr uint32_t kWorldLocal = 1;
inline constexpr uint32_t kWorldWindowMs = 5000;
enum MsgMembership : uint32_t {
  kMsgNotYet = 0,    // not joined, and the world has not settled (ask again)
  kMsgMember = 1,    // joined before the world settled, taking GPU-local messages
  kMsgOutsider = 2,  // not a GPU-local peer: joined without kWorldLocal or too late, or never joined
};
// A probe for a GPU-local message to `dest` on (world, comm) from `source` with `tag` (-1: any):
// the parked send of the lowest sequence number among the first matching (source, tag).
struct MsgProbeCmd {
  uint64_t world;
  uint64_t comm;
  int32_t source;
  int32_t dest;
  int32_t tag;
  uint32_t reserved;
};
static_assert(sizeof(MsgProbeCmd) == 32);
// Event flags: an interprocess event (cudaEventInterprocess; with kEventDisableTiming).
inline constexpr uint32_t kEventInterprocess = 0x4;

// ---- what the command table says of an opcode ---------------------------------------
struct NoPayload {};  // a command with nothing after its header
struct NoBytes {};
struct NameBytes {  // KernelGetCmd, SymbolGetCmd, ModuleManagedCmd: the device name follows
  static constexpr uint64_t kLimit = kMaxNameBytes;
  template <class P>
  static constexpr uint64_t count(const P& p) noexcept { return p.name_bytes; }
};
struct ParamBytes {  // LaunchCmd: the parameter buffer follows
  static constexpr uint64_t kLimit = kMaxParamBytes;
  template <class P>
  static constexpr uint64_t count(const P& p) noexcept { return p.param_bytes; }
};
struct GraphBytes {  // GraphNodeCmd: the dependencies, then a kernel's parameters
  static constexpr uint64_t kLimit = uint64_t{kMaxGraphDeps} * 4 + kMaxParamBytes;
  template <class P>
  static constexpr uint64_t count(const P& p) noexcept {
    const uint64_t params = p.kind == static_cast<uint32_t>(GraphNodeKind::Kernel) ? p.launch.param_bytes : 0;
    return uint64_t{p.dep_count} * 4 + params;
  }
};
struct Queues {};
struct NoQueue {};

// Command<Opcode::X>: X's row.
template <Opcode op>
struct Command;
#define FUNNEL_IPC_COMMAND(op, number, payload, trailing, queues, handler)                                \
  template <>                                                                                              \
  struct Command<Opcode::op> {                                                                             \
    using Payload = payload;                                                                               \
    using Trailing = trailing;                                                                             \
    static constexpr uint64_t kPayloadBytes = std::is_same_v<payload, NoPayload> ? 0 : sizeof(payload);         \
    static constexpr bool kTrailing = !std::is_same_v<trailing, NoBytes>;                                  \
    static constexpr bool kQueues = std::is_same_v<queues, Queues>;                                        \
    static constexpr const char* kName = #op;                                                              \
  };
FUNNEL_IPC_COMMANDS(FUNNEL_IPC_COMMAND)
#undef FUNNEL_IPC_COMMAND

// Calls f(Command<op>{}) for h's opcode and returns what it returns; `otherwise` for an
// opcode the table does not have.
template <class F, class R>
constexpr R visit_command(Opcode op, F&& f, R otherwise) {
  switch (op) {
#define FUNNEL_IPC_VISIT(name, ...) \
  case Opcode::name:                \
    return f(Command<Opcode::name>{});
    FUNNEL_IPC_COMMANDS(FUNNEL_IPC_VISIT)
#undef FUNNEL_IPC_VISIT
  }
  return otherwise;
}

// Fixed payload size each opcode requires (KernelGet, Launch and SymbolGet are followed
// by trailing bytes: see has_trailing_bytes); -1 for an unknown opcode.
constexpr int64_t payload_size(Opcode op) noexcept {
  return visit_command(op, []<class C>(C) { return static_cast<int64_t>(C::kPayloadBytes); }, int64_t{-1});
}

constexpr bool has_trailing_bytes(Opcode op) noexcept {
  return visit_command(op, []<class C>(C) { return C::kTrailing; }, false);
}

// Whether a command queues work on header.stream (the table's Queues column).
constexpr bool queues_on_stream(Opcode op) noexcept {
  return visit_command(op, []<class C>(C) { return C::kQueues; }, false);
}

// The opcode's name ("MemAlloc"), for messages; nullptr for an unknown opcode.
constexpr const char* command_name(Opcode op) noexcept {
  return visit_command(op, []<class C>(C) { return C::kName; }, static_cast<const char*>(nullptr));
}

// Largest record a client may write (header + payload + trailing bytes).
inline constexpr uint32_t kMaxRecordSize = 64 * 1024;

constexpr uint32_t record_size_for(uint64_t payload_bytes) noexcept {
  const uint64_t raw = sizeof(CommandHeader) + payload_bytes;
  return static_cast<uint32_t>((raw + kRecordAlign - 1) / kRecordAlign * kRecordAlign);
}

// A payload struct copied out of a record's bytes (which need not be aligned for it).
template <class T>
T payload_as(const std::byte* p) noexcept {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

enum class Framing {
  Ok,
  UnknownOpcode,  // not in the table
  BadSize,        // h.size is not the record size its payload (and trailing bytes) make
};
// Whether a record of h.size bytes, its payload at `payload`, is framed as h.opcode's row
// says.  The caller guarantees h.size bytes are readable from the header on (a record
// copied out of the ring); trailing-byte counts are read only once the payload is there.
inline Framing check_framing(const CommandHeader& h, const std::byte* payload) noexcept {
  return visit_command(
      h.opcode,
      [&]<class C>(C) {
        if (h.size < record_size_for(C::kPayloadBytes)) return Framing::BadSize;
        uint64_t trailing = 0;
        if constexpr (C::kTrailing) {
          trailing = C::Trailing::count(payload_as<typename C::Payload>(payload));
          if (trailing > C::Trailing::kLimit) return Framing::BadSize;
        }
        return h.size == record_size_for(C::kPayloadBytes + trailing) ? Framing::Ok : Framing::BadSize;
      },
      Framing::UnknownOpcode);
}

}  // namespace funnel::ipc
