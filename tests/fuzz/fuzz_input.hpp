// The byte format the server-command fuzz target reads (tests/fuzz/server_commands_fuzzer.cpp)
// and the seed generator writes (make_corpus.cpp).  An input is a sequence of chunks:
//   uint8_t  ctl           kRaw* and kStage bits below
//   uint16_t payload_len   little endian; clamped to what is left and to kMaxPayload
//   CommandHeader header   32 bytes, raw: opcode, flags, reply_slot, device and stream as
//                          the server will read them (size and seq: see below)
//   payload_len bytes      the record's payload, trailing bytes included
// A chunk with kStage is no record: its payload fills every staging slot, which it marks
// InFlight (handed to the server), as a client does before a staged copy or ModuleData.
// Every other chunk becomes one ring record of record_size_for(payload_len) bytes.  The harness
// sets header.seq (strictly increasing, as a client must) and, unless kRawSize is set,
// header.size; unless kRawReplySlot is set, a reply_slot other than kNoReply becomes a
// fresh slot, so that the harness can match the reply.  A payload word (8-byte aligned)
// whose top 16 bits are kAddressTag is replaced by a device address this client
// allocated earlier in the same input: address_token() names which one and the offset.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "funnel/ipc/commands.hpp"

namespace funnel::fuzz {

inline constexpr uint8_t kRawSize = 0x1;       // keep header.size as the input gives it
inline constexpr uint8_t kStage = 0x2;         // no record: the payload goes into every staging slot
inline constexpr uint8_t kRawReplySlot = 0x4;  // keep header.reply_slot as the input gives it

inline constexpr size_t kChunkHead = 3 + sizeof(ipc::CommandHeader);
inline constexpr size_t kMaxPayload = ipc::kMaxRecordSize - sizeof(ipc::CommandHeader);
inline constexpr uint64_t kAddressTag = 0xadd0;

// The `index`-th allocation of this input (modulo their number), plus `offset`.
constexpr uint64_t address_token(uint32_t index, uint32_t offset) noexcept {
  return (kAddressTag << 48) | (uint64_t{index & 0xffff} << 32) | offset;
}

struct Chunk {
  uint8_t ctl = 0;
  ipc::CommandHeader header{};
  const uint8_t* payload = nullptr;
  size_t payload_len = 0;
};

// Splits an input into chunks; a tail shorter than a chunk's head is ignored.
inline std::vector<Chunk> parse(const uint8_t* data, size_t size) {
  std::vector<Chunk> out;
  size_t at = 0;
  while (size - at >= kChunkHead) {
    Chunk c;
    c.ctl = data[at];
    size_t len = static_cast<size_t>(data[at + 1]) | (static_cast<size_t>(data[at + 2]) << 8);
    std::memcpy(&c.header, data + at + 3, sizeof c.header);
    at += kChunkHead;
    if (len > kMaxPayload) len = kMaxPayload;
    if (len > size - at) len = size - at;
    c.payload = data + at;
    c.payload_len = len;
    at += len;
    out.push_back(c);
  }
  return out;
}

// Appends one chunk (the seed generator's side of parse()).
inline void append(std::vector<uint8_t>& out, uint8_t ctl, const ipc::CommandHeader& h, const void* payload,
                   size_t len) {
  out.push_back(ctl);
  out.push_back(static_cast<uint8_t>(len & 0xff));
  out.push_back(static_cast<uint8_t>(len >> 8));
  const auto* hb = reinterpret_cast<const uint8_t*>(&h);
  out.insert(out.end(), hb, hb + sizeof h);
  const auto* pb = static_cast<const uint8_t*>(payload);
  if (len != 0) out.insert(out.end(), pb, pb + len);
}

}  // namespace funnel::fuzz
