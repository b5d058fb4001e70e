// The per-client channel segment: one file in the job's run directory, mapped by
// the server (which creates it and alone lays it out) and by one client.
//
//   [ChannelHeader][RingControl][Completion][ReplySlot x N][DeviceRecord x D]
//   [command ring bytes][event state x E][reply word x N][staging state x S]
//   [staging slot 0 .. S-1]
// (the server registers everything from the event states on with the driver: the GPU
// writes event states, reply words and staging states itself).
//
// Everything in here is plain data: fixed-size, trivially copyable, offsets instead
// of pointers, and only atomics that are always lock-free.  No lock lives in the
// segment, so a client that dies at any instruction cannot wedge the server.
// Pinned host allocations (cudaMallocHost) live in files of their own beside the
// channel (see doc/design/channel.md for why).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace funnel::ipc {

inline constexpr uint64_t kChannelMagic = 0x31434e4c4e4e5546ull;  // "FUNNLNC1"
inline constexpr uint32_t kProtocolVersion = 15;  // 15: module digests are SHA-256
inline constexpr uint32_t kRecordAlign = 64;  // ring records are multiples of this
inline constexpr uint32_t kMaxReplySlots = 256;
inline constexpr uint32_t kMaxEventSlots = 65536;
inline constexpr uint32_t kMaxStagingSlots = 16;
inline constexpr uint32_t kMaxDevices = 16;
inline constexpr uint32_t kMaxDeviceAttributes = 256;  // > cudaDevAttrMax, CU_DEVICE_ATTRIBUTE_MAX
inline constexpr uint32_t kAttrMultiprocessorCount = 16;  // cudaDevAttrMultiProcessorCount
inline constexpr uint32_t kAttrComputeCapabilityMajor = 75;  // cudaDevAttrComputeCapabilityMajor
inline constexpr uint32_t kAttrComputeCapabilityMinor = 76;  // cudaDevAttrComputeCapabilityMinor
inline constexpr uint32_t kNoReply = 0xffffffffu;
inline constexpr uint64_t kStagingStateStride = 64;

static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<int32_t>::is_always_lock_free);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

struct ChannelHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t client_id;
  uint64_t segment_size;
  uint64_t control_offset;     // RingControl
  uint64_t completion_offset;  // Completion
  uint64_t replies_offset;     // ReplySlot[reply_slots]
  // std::atomic<uint32_t> per staging slot, kStagingStateStride apart, after the reply words
  // (inside the registration: the GPU marks a staged device-to-host chunk Ready itself;
  // protocol 11).
  uint64_t staging_state_offset;
  uint64_t devices_offset;     // DeviceRecord[device_count]
  uint64_t ring_offset;
  uint64_t ring_capacity;      // bytes, power of two, multiple of kRecordAlign
  uint64_t staging_offset;
  uint64_t staging_slot_size;  // bytes, multiple of 4096
  uint32_t reply_slots;
  uint32_t staging_slots;
  uint32_t device_count;
  int32_t server_pid;
  // Event state words (std::atomic<uint32_t>[event_slots], page-aligned, just before the
  // staging area so that one driver registration covers both): the GPU itself stores an
  // event's record generation there when the stream reaches the record, so the client
  // sees completed events without a round trip.
  uint64_t event_states_offset;
  uint32_t event_slots;
  uint32_t reserved;
  // Reply words (std::atomic<uint32_t>[reply_slots], between the event states and the
  // staging area, inside the same registration): for a synchronous copy or stream
  // synchronisation the GPU itself stores the low 32 bits of the command's seq in its reply
  // slot's word once the stream got there, so that the waiting client needs no server thread
  // to see it done (ReplySlot::status is Success then; protocol 7).
  uint64_t reply_words_offset;
};
static_assert(std::is_trivially_copyable_v<ChannelHeader>);

// Command ring control.  Positions are monotonically increasing byte counts;
// the slot of a position is pos & (capacity - 1).
struct alignas(64) RingControl {
  std::atomic<uint64_t> tail;  // written by the client (producer)
  char pad0[56];
  std::atomic<uint64_t> head;  // written by the server (consumer)
  char pad1[56];
  std::atomic<uint32_t> doorbell;           // client bumps after publishing if the server sleeps; it sleeps on it
  std::atomic<uint32_t> consumer_sleeping;  // server sets before sleeping: kConsumerAsleep or kConsumerNapping
  std::atomic<uint32_t> space;              // server bumps after consuming if a producer waits (ring full)
  std::atomic<uint32_t> producer_waiting;   // a client sets before sleeping on `space`
};

// RingControl::consumer_sleeping.  Asleep: every record the client publishes rings the
// doorbell.  Napping: the server wakes by itself within a fraction of a millisecond, so a
// kernel launch does not ring it; every other record still does (doc/design/channel.md,
// "The ring", Naps).
inline constexpr uint32_t kConsumerAwake = 0;
inline constexpr uint32_t kConsumerAsleep = 1;
inline constexpr uint32_t kConsumerNapping = 2;

// Server -> client state.
struct alignas(64) Completion {
  std::atomic<uint32_t> reply_epoch;    // futex word: bumped after a reply if a client thread sleeps
  std::atomic<uint32_t> client_waiting; // client threads asleep on reply_epoch or a staging state (a hint)
  std::atomic<int32_t> deferred_error;  // first error of one-way work since the client last looked
  std::atomic<int32_t> sticky_error;    // context-poisoning error; never cleared for this client
  uint64_t reserved0;
  std::atomic<uint32_t> server_state;   // ServerState
  // 1 while the thread that serves this client is bound to the client's own CPUs
  // (doc/placement.md, "Workers with their ranks"): a waiting client thread then yields its
  // core at once instead of polling it first, since the worker cannot run while it polls.
  // A hint only; the client reads nothing else from it.
  std::atomic<uint32_t> worker_on_client_cpus;
};

// Terminated: funnelctl terminate stopped this client alone (the server runs on).
enum class ServerState : uint32_t { Running = 0, ShuttingDown = 1, Terminated = 2 };

struct alignas(64) ReplySlot {
  std::atomic<uint64_t> seq;  // the command's seq, stored (release) once status/value are final
  int32_t status;             // Status
  uint32_t reserved;
  uint64_t value[5];
};

// Whether the reply to command `seq` is in: the server stored the slot's seq, or the GPU
// stored seq's low half in the slot's reply word (ChannelHeader::reply_words_offset; the
// client cleared it when it took the slot, and a low half of 0 is never GPU-answered).
// seq_cst: the Dekker pairing with client_waiting (doc/design/channel.md, Replies).
inline bool reply_arrived(const ReplySlot& slot, const std::atomic<uint32_t>& word, uint64_t seq) noexcept {
  const auto low = static_cast<uint32_t>(seq);
  return slot.seq.load(std::memory_order_seq_cst) == seq || (low != 0 && word.load(std::memory_order_seq_cst) == low);
}

enum class StagingState : uint32_t {
  Free = 0,      // the client may fill it (H2D) or hand it to the server (D2H)
  InFlight = 1,  // the server owns it until the copy completes
  Ready = 2,     // D2H data is in it; the client copies it out and frees it
};

struct DeviceRecord {
  char name[256];
  uint8_t uuid[16];
  char pci_bus_id[32];       // "0000:19:00.0"
  uint64_t total_memory;     // bytes (what cudaMemGetInfo/totalGlobalMem report)
  int32_t ordinal;           // the server's device ordinal
  int32_t attributes[kMaxDeviceAttributes];  // indexed by cudaDeviceAttr == CUdevice_attribute
};
static_assert(std::is_trivially_copyable_v<DeviceRecord>);

// Sizes a server chooses for a channel; layout() turns them into offsets.
struct ChannelGeometry {
  uint64_t ring_capacity = 1u << 20;
  uint32_t reply_slots = 64;
  uint32_t staging_slots = 4;
  uint64_t staging_slot_size = 2u << 20;
  uint32_t device_count = 1;
  uint32_t event_slots = 1024;
};

// Fills every offset and size of `h` from `g`; returns false if `g` is out of range.
bool layout(const ChannelGeometry& g, ChannelHeader& h) noexcept;

// Checks a header copied out of a mapped segment of `mapped_size` bytes: magic,
// version, that every region lies inside the segment and none overlap.  On failure
// `why` names the first problem.
bool validate_header(const ChannelHeader& h, uint64_t mapped_size, const char** why) noexcept;

// Typed access to the regions of a mapped segment whose header was validated.
class ChannelView {
 public:
  ChannelView() = default;
  ChannelView(void* base, const ChannelHeader& h) noexcept : base_(static_cast<std::byte*>(base)), h_(h) {}

  const ChannelHeader& header() const noexcept { return h_; }
  std::byte* base() const noexcept { return base_; }
  RingControl& control() const noexcept { return *at<RingControl>(h_.control_offset); }
  Completion& completion() const noexcept { return *at<Completion>(h_.completion_offset); }
  ReplySlot& reply(uint32_t i) const noexcept { return at<ReplySlot>(h_.replies_offset)[i]; }
  std::atomic<uint32_t>& reply_word(uint32_t i) const noexcept {
    return at<std::atomic<uint32_t>>(h_.reply_words_offset)[i];
  }
  // One cache line per staging slot's state word (kStagingStateStride bytes apart).
  std::atomic<uint32_t>& staging_state(uint32_t i) const noexcept {
    return *at<std::atomic<uint32_t>>(h_.staging_state_offset + uint64_t{i} * kStagingStateStride);
  }
  std::byte* staging(uint32_t i) const noexcept { return base_ + h_.staging_offset + uint64_t{i} * h_.staging_slot_size; }
  DeviceRecord* devices() const noexcept { return at<DeviceRecord>(h_.devices_offset); }
  std::atomic<uint32_t>& event_state(uint32_t i) const noexcept {
    return at<std::atomic<uint32_t>>(h_.event_states_offset)[i];
  }
  std::byte* ring() const noexcept { return base_ + h_.ring_offset; }

 private:
  template <class T>
  T* at(uint64_t off) const noexcept { return reinterpret_cast<T*>(base_ + off); }
  std::byte* base_ = nullptr;
  ChannelHeader h_{};
};

}  // namespace funnel::ipc
