#include "funnel/ipc/channel_layout.hpp"

#include <array>
#include <bit>
#include <utility>

namespace funnel::ipc {
namespace {

constexpr uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
constexpr uint64_t kPage = 4096;

}  // namespace

bool layout(const ChannelGeometry& g, ChannelHeader& h) noexcept {
  if (g.ring_capacity < 4 * kRecordAlign || !std::has_single_bit(g.ring_capacity) ||
      g.ring_capacity > (uint64_t{1} << 30))
    return false;
  if (g.reply_slots == 0 || g.reply_slots > kMaxReplySlots) return false;
  if (g.staging_slots < 2 || g.staging_slots > kMaxStagingSlots) return false;
  if (g.staging_slot_size < kPage || g.staging_slot_size % kPage != 0 || g.staging_slot_size > (uint64_t{1} << 30))
    return false;
  if (g.device_count > kMaxDevices) return false;
  if (g.event_slots == 0 || g.event_slots > kMaxEventSlots) return false;

  h = ChannelHeader{};
  h.magic = kChannelMagic;
  h.version = kProtocolVersion;
  uint64_t off = align_up(sizeof(ChannelHeader), 64);
  h.control_offset = off;
  off = align_up(off + sizeof(RingControl), 64);
  h.completion_offset = off;
  off = align_up(off + sizeof(Completion), 64);
  h.replies_offset = off;
  off = align_up(off + uint64_t{g.reply_slots} * sizeof(ReplySlot), 64);
  h.devices_offset = off;
  off = align_up(off + uint64_t{g.device_count} * sizeof(DeviceRecord), kPage);
  h.ring_offset = off;
  h.ring_capacity = g.ring_capacity;
  off = align_up(off + g.ring_capacity, kPage);
  h.event_states_offset = off;
  h.event_slots = g.event_slots;
  off = align_up(off + uint64_t{g.event_slots} * sizeof(uint32_t), 64);
  h.reply_words_offset = off;
  off = align_up(off + uint64_t{g.reply_slots} * sizeof(uint32_t), 64);
  h.staging_state_offset = off;
  off = align_up(off + uint64_t{g.staging_slots} * kStagingStateStride, kPage);
  h.staging_offset = off;
  h.staging_slot_size = g.staging_slot_size;
  off += uint64_t{g.staging_slots} * g.staging_slot_size;
  h.segment_size = off;
  h.reply_slots = g.reply_slots;
  h.staging_slots = g.staging_slots;
  h.device_count = g.device_count;
  return true;
}

bool validate_header(const ChannelHeader& h, uint64_t mapped_size, const char** why) noexcept {
  auto fail = [&](const char* w) { *why = w; return false; };
  if (h.magic != kChannelMagic) return fail("bad magic: not a funnel channel");
  if (h.version != kProtocolVersion) return fail("protocol version differs between client and server");
  if (h.segment_size != mapped_size) return fail("segment size does not match the file");
  if (h.reply_slots == 0 || h.reply_slots > kMaxReplySlots) return fail("reply slot count out of range");
  if (h.staging_slots < 2 || h.staging_slots > kMaxStagingSlots) return fail("staging slot count out of range");
  if (h.device_count > kMaxDevices) return fail("device count out of range");
  if (h.event_slots == 0 || h.event_slots > kMaxEventSlots) return fail("event slot count out of range");
  if (!std::has_single_bit(h.ring_capacity) || h.ring_capacity < 4 * kRecordAlign)
    return fail("ring capacity is not a power of two");
  if (h.staging_slot_size == 0 || h.staging_slot_size > (uint64_t{1} << 30)) return fail("staging slot size out of range");
  // The server registers [event states, end of staging) with the driver in one piece.
  if (h.staging_offset % kPage != 0 || h.staging_slot_size % kPage != 0 || h.event_states_offset % kPage != 0)
    return fail("the event states and staging area must be page-aligned");

  struct Region { uint64_t off, len; };
  const std::array<Region, 9> regions{{
      {0, sizeof(ChannelHeader)},
      {h.control_offset, sizeof(RingControl)},
      {h.completion_offset, sizeof(Completion)},
      {h.replies_offset, uint64_t{h.reply_slots} * sizeof(ReplySlot)},
      {h.staging_state_offset, uint64_t{h.staging_slots} * kStagingStateStride},
      {h.devices_offset, uint64_t{h.device_count} * sizeof(DeviceRecord)},
      {h.ring_offset, h.ring_capacity},
      {h.event_states_offset, uint64_t{h.event_slots} * sizeof(uint32_t)},
      {h.reply_words_offset, uint64_t{h.reply_slots} * sizeof(uint32_t)},
  }};
  const Region staging{h.staging_offset, uint64_t{h.staging_slots} * h.staging_slot_size};
  auto inside = [&](const Region& r) { return r.off <= mapped_size && r.len <= mapped_size - r.off; };
  for (const auto& r : regions) {
    if (!inside(r)) return fail("a region lies outside the segment");
    if (r.off % 64 != 0) return fail("a region is misaligned");
  }
  if (!inside(staging)) return fail("the staging area lies outside the segment");
  for (size_t i = 0; i < regions.size(); ++i) {
    for (size_t j = i + 1; j < regions.size(); ++j) {
      const auto& a = regions[i];
      const auto& b = regions[j];
      if (a.off < b.off + b.len && b.off < a.off + a.len) return fail("regions overlap");
    }
    if (regions[i].off < staging.off + staging.len && staging.off < regions[i].off + regions[i].len)
      return fail("the staging area overlaps another region");
  }
  if (h.event_states_offset > h.staging_offset) return fail("the event states must lie before the staging area");
  // Also inside the registration, which starts at the event states.
  if (h.reply_words_offset < h.event_states_offset) return fail("the reply words must lie after the event states");
  if (h.staging_state_offset < h.event_states_offset)
    return fail("the staging states must lie after the event states");
  return true;
}

}  // namespace funnel::ipc
