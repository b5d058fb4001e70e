// Commands a client writes into its ring.  A record is a CommandHeader followed by
// the opcode's payload struct (and, for variable-sized commands, trailing bytes),
// padded to a multiple of kRecordAlign.  The server copies each record out of the
// ring before it looks at it, then validates it (see decode.hpp).
#pragma once
#include <cstdint>
#include <type_traits>

#include "funnel/ipc/channel_layout.hpp"

namespace funnel::ipc {

enum class Opcode : uint16_t {
  Pad = 0,  // filler to the end of the ring; the server skips it

  // Memory
  MemAlloc = 1,       // MemAllocCmd -> value[0] = device address
  MemFree = 2,        // AddressCmd (synchronous, as cudaFree)
  MemAllocAsync = 3,  // MemAllocCmd, stream-ordered -> value[0] = device address
  MemFreeAsync = 4,   // AddressCmd, stream-ordered, one-way
  MemGetInfo = 5,     // -> value[0] = free, value[1] = total
  PinnedAlloc = 6,    // PinnedAllocCmd -> value[0] = pinned id, value[1] = size; file pinned.<client>.<id>
  PinnedFree = 7,     // PinnedFreeCmd (synchronous)
  Copy = 8,           // CopyCmd, one-way unless a reply slot is given
  Memset = 9,         // MemsetCmd, one-way

  // Streams and events (ids are chosen by the client)
  StreamCreate = 20,       // StreamCreateCmd, one-way
  StreamDestroy = 21,      // header.stream, one-way (pending work still completes)
  StreamSynchronize = 22,  // header.stream -> reply when its work is done
  StreamQuery = 23,        // header.stream -> status Success or NotReady
  StreamWaitEvent = 24,    // EventCmd, one-way
  EventCreate = 30,        // EventCreateCmd, one-way
  EventDestroy = 31,       // EventCmd, one-way
  EventRecord = 32,        // EventRecordCmd on header.stream, one-way
  EventSynchronize = 33,   // EventCmd -> reply when the event completed
  EventQuery = 34,         // EventCmd -> Success or NotReady
  EventElapsedTime = 35,   // EventPairCmd -> value[0] = bit pattern of a float (ms)

  // Device
  DeviceSynchronize = 40,  // reply when all of this client's work on header.device is done
  DeviceReset = 41,        // frees everything this client holds on header.device
  SetLimit = 42,           // LimitCmd
  GetLimit = 43,           // LimitCmd -> value[0]

  Fence = 50,  // reply once every earlier command was consumed (not necessarily completed)

  // 60..79 are reserved for kernels (module registration, launches): funnel core part 2.

  Detach = 100,  // the client leaves; the server frees what it held
};

struct CommandHeader {
  uint32_t size;        // bytes of the whole record, a multiple of kRecordAlign
  Opcode opcode;
  uint16_t flags;
  uint64_t seq;         // client-assigned, strictly increasing
  uint32_t reply_slot;  // kNoReply for one-way commands
  int32_t device;       // index into the client's device table
  uint64_t stream;      // 0: the legacy default stream; otherwise a client stream id
};
static_assert(sizeof(CommandHeader) == 32);

struct MemAllocCmd { uint64_t size; };
struct AddressCmd { uint64_t address; };
struct PinnedAllocCmd { uint64_t size; uint32_t flags; uint32_t reserved; };
struct PinnedFreeCmd { uint64_t id; };

enum class MemSpace : uint32_t {
  Device = 1,   // address = device address
  Staging = 2,  // index = staging slot, address = byte offset in it
  Pinned = 3,   // id = pinned allocation, address = byte offset in it
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

struct MemsetCmd {
  uint64_t address;
  uint64_t pitch;
  uint64_t width;
  uint64_t height;
  uint32_t value;  // the byte is value & 0xff
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
struct EventRecordCmd { uint64_t event_id; uint32_t flags; uint32_t state_slot; uint32_t generation; uint32_t reserved; };

struct LimitCmd { uint32_t limit; uint32_t reserved; uint64_t value; };

// Payload size each opcode requires; -1 for an unknown opcode.
constexpr int64_t payload_size(Opcode op) noexcept {
  switch (op) {
    case Opcode::Pad: return 0;
    case Opcode::MemAlloc: case Opcode::MemAllocAsync: return sizeof(MemAllocCmd);
    case Opcode::MemFree: case Opcode::MemFreeAsync: return sizeof(AddressCmd);
    case Opcode::MemGetInfo: return 0;
    case Opcode::PinnedAlloc: return sizeof(PinnedAllocCmd);
    case Opcode::PinnedFree: return sizeof(PinnedFreeCmd);
    case Opcode::Copy: return sizeof(CopyCmd);
    case Opcode::Memset: return sizeof(MemsetCmd);
    case Opcode::StreamCreate: return sizeof(StreamCreateCmd);
    case Opcode::StreamDestroy: case Opcode::StreamSynchronize: case Opcode::StreamQuery: return 0;
    case Opcode::StreamWaitEvent: return sizeof(EventCmd);
    case Opcode::EventCreate: return sizeof(EventCreateCmd);
    case Opcode::EventRecord: return sizeof(EventRecordCmd);
    case Opcode::EventDestroy: case Opcode::EventSynchronize:
    case Opcode::EventQuery: return sizeof(EventCmd);
    case Opcode::EventElapsedTime: return sizeof(EventPairCmd);
    case Opcode::DeviceSynchronize: case Opcode::DeviceReset: return 0;
    case Opcode::SetLimit: case Opcode::GetLimit: return sizeof(LimitCmd);
    case Opcode::Fence: case Opcode::Detach: return 0;
  }
  return -1;
}

// Largest record a client may write (header + payload + trailing bytes).
inline constexpr uint32_t kMaxRecordSize = 64 * 1024;

constexpr uint32_t record_size_for(uint64_t payload_bytes) noexcept {
  const uint64_t raw = sizeof(CommandHeader) + payload_bytes;
  return static_cast<uint32_t>((raw + kRecordAlign - 1) / kRecordAlign * kRecordAlign);
}

}  // namespace funnel::ipc
