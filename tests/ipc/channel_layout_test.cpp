// layout() and validate_header(): a server's header always validates; every kind
// of corrupt header a client might map is rejected with a reason.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "funnel/ipc/channel_layout.hpp"
#include "watchdog.hpp"

namespace funnel::ipc {
namespace {

ChannelHeader good_header(const ChannelGeometry& g = {}) {
  ChannelHeader h{};
  EXPECT_TRUE(layout(g, h));
  return h;
}

bool valid(const ChannelHeader& h, uint64_t size, std::string* reason = nullptr) {
  const char* why = nullptr;
  const bool ok = validate_header(h, size, &why);
  if (!ok) {
    EXPECT_NE(why, nullptr);
    if (reason != nullptr && why != nullptr) *reason = why;
  }
  return ok;
}

WATCHED_TEST(ChannelLayout, DefaultGeometryValidates) {
  const ChannelHeader h = good_header();
  EXPECT_EQ(h.magic, kChannelMagic);
  EXPECT_EQ(h.version, kProtocolVersion);
  EXPECT_TRUE(valid(h, h.segment_size));
  EXPECT_EQ(h.ring_offset % 4096, 0u);
  EXPECT_EQ(h.staging_offset % 4096, 0u);
  EXPECT_GE(h.segment_size, h.staging_offset + uint64_t{h.staging_slots} * h.staging_slot_size);
  for (uint64_t off : {h.control_offset, h.completion_offset, h.replies_offset, h.staging_state_offset,
                       h.devices_offset})
    EXPECT_EQ(off % 64, 0u);
}

WATCHED_TEST(ChannelLayout, EveryGeometryInRangeValidates) {
  for (uint64_t ring : {uint64_t{256}, uint64_t{4096}, uint64_t{1} << 20, uint64_t{1} << 30})
    for (uint32_t replies : {1u, 64u, kMaxReplySlots})
      for (uint32_t slots : {2u, 7u, kMaxStagingSlots})
        for (uint64_t slot_size : {uint64_t{4096}, uint64_t{1} << 20})
          for (uint32_t devices : {0u, 1u, kMaxDevices}) {
            ChannelGeometry g{ring, replies, slots, slot_size, devices};
            ChannelHeader h{};
            ASSERT_TRUE(layout(g, h)) << ring << " " << replies << " " << slots << " " << slot_size;
            std::string why;
            EXPECT_TRUE(valid(h, h.segment_size, &why)) << why;
            EXPECT_EQ(h.ring_capacity, ring);
            EXPECT_EQ(h.reply_slots, replies);
            EXPECT_EQ(h.staging_slots, slots);
            EXPECT_EQ(h.device_count, devices);
          }
}

WATCHED_TEST(ChannelLayout, RejectsGeometryOutOfRange) {
  const std::vector<std::function<void(ChannelGeometry&)>> breakers{
      [](ChannelGeometry& g) { g.ring_capacity = 3000; },
      [](ChannelGeometry& g) { g.ring_capacity = 128; },
      [](ChannelGeometry& g) { g.ring_capacity = uint64_t{1} << 31; },
      [](ChannelGeometry& g) { g.reply_slots = 0; },
      [](ChannelGeometry& g) { g.reply_slots = kMaxReplySlots + 1; },
      [](ChannelGeometry& g) { g.staging_slots = 1; },
      [](ChannelGeometry& g) { g.staging_slots = kMaxStagingSlots + 1; },
      [](ChannelGeometry& g) { g.staging_slot_size = 1000; },
      [](ChannelGeometry& g) { g.staging_slot_size = 4096 + 512; },
      [](ChannelGeometry& g) { g.staging_slot_size = uint64_t{1} << 31; },
      [](ChannelGeometry& g) { g.device_count = kMaxDevices + 1; },
  };
  for (size_t i = 0; i < breakers.size(); ++i) {
    ChannelGeometry g;
    breakers[i](g);
    ChannelHeader h{};
    EXPECT_FALSE(layout(g, h)) << "case " << i;
  }
}

struct Corruption {
  const char* name;
  std::function<void(ChannelHeader&)> corrupt;
  const char* reason_contains;
};

WATCHED_TEST(ChannelLayout, RejectsEveryKindOfCorruptHeader) {
  const std::vector<Corruption> cases{
      {"bad magic", [](ChannelHeader& h) { h.magic ^= 1; }, "magic"},
      {"version", [](ChannelHeader& h) { h.version = kProtocolVersion + 1; }, "version"},
      {"segment size", [](ChannelHeader& h) { h.segment_size += 4096; }, "size"},
      {"no reply slots", [](ChannelHeader& h) { h.reply_slots = 0; }, "reply"},
      {"too many reply slots", [](ChannelHeader& h) { h.reply_slots = kMaxReplySlots + 1; }, "reply"},
      {"one staging slot", [](ChannelHeader& h) { h.staging_slots = 1; }, "staging"},
      {"too many staging slots", [](ChannelHeader& h) { h.staging_slots = kMaxStagingSlots + 1; }, "staging"},
      {"too many devices", [](ChannelHeader& h) { h.device_count = kMaxDevices + 1; }, "device"},
      {"ring not a power of two", [](ChannelHeader& h) { h.ring_capacity -= 64; }, "ring"},
      {"ring too small", [](ChannelHeader& h) { h.ring_capacity = 64; }, "ring"},
      {"staging slot size 0", [](ChannelHeader& h) { h.staging_slot_size = 0; }, "staging"},
      {"huge staging slots", [](ChannelHeader& h) { h.staging_slot_size = uint64_t{1} << 40; }, "staging"},
      {"ring outside", [](ChannelHeader& h) { h.ring_offset = h.segment_size; }, "outside"},
      {"ring wraps the address space", [](ChannelHeader& h) { h.ring_offset = ~uint64_t{0} - 63; }, "outside"},
      {"huge ring", [](ChannelHeader& h) { h.ring_capacity = uint64_t{1} << 62; }, "outside"},
      {"control outside", [](ChannelHeader& h) { h.control_offset = h.segment_size + 64; }, "outside"},
      {"devices outside", [](ChannelHeader& h) { h.devices_offset = h.segment_size - 64; }, "outside"},
      {"misaligned completion", [](ChannelHeader& h) { h.completion_offset += 8; }, "misaligned"},
      {"completion over control", [](ChannelHeader& h) { h.completion_offset = h.control_offset; }, "overlap"},
      {"control over the header", [](ChannelHeader& h) { h.control_offset = 0; }, "overlap"},
      {"replies over the ring", [](ChannelHeader& h) { h.replies_offset = h.ring_offset; }, "overlap"},
      {"staging state over devices", [](ChannelHeader& h) { h.staging_state_offset = h.devices_offset; }, "overlap"},
      {"staging over the ring", [](ChannelHeader& h) { h.staging_offset = h.ring_offset; }, "overlap"},
      {"staging outside", [](ChannelHeader& h) { h.staging_offset = h.segment_size - 4096; }, "outside"},
      {"staging past the end", [](ChannelHeader& h) { h.staging_offset = ~uint64_t{0} - 4095; }, "outside"},
      {"staging not page-aligned", [](ChannelHeader& h) { h.staging_offset += 64; }, "page"},
      {"staging slot size not pages", [](ChannelHeader& h) { h.staging_slot_size -= 64; }, "page"},
      {"no event slots", [](ChannelHeader& h) { h.event_slots = 0; }, "event"},
      {"too many event slots", [](ChannelHeader& h) { h.event_slots = kMaxEventSlots + 1; }, "event"},
      {"event states not page-aligned", [](ChannelHeader& h) { h.event_states_offset += 64; }, "page"},
      {"event states over the ring", [](ChannelHeader& h) { h.event_states_offset = h.ring_offset; }, "overlap"},
      {"event states inside staging", [](ChannelHeader& h) { h.event_states_offset = h.staging_offset + 4096; },
       "overlap"},
      // In the gap between the device records and the page-aligned ring: outside the registration.
      {"staging states before the event states",
       [](ChannelHeader& h) {
         h.staging_state_offset = (h.devices_offset + h.device_count * sizeof(DeviceRecord) + 63) / 64 * 64;
       },
       "after the event states"},
  };
  for (const auto& c : cases) {
    ChannelHeader h = good_header();
    const uint64_t mapped = h.segment_size;
    c.corrupt(h);
    std::string why;
    EXPECT_FALSE(valid(h, mapped, &why)) << c.name;
    EXPECT_NE(why.find(c.reason_contains), std::string::npos) << c.name << ": reason was '" << why << "'";
  }
}

WATCHED_TEST(ChannelLayout, RejectsMappedSizeThatDiffersFromHeader) {
  const ChannelHeader h = good_header();
  EXPECT_FALSE(valid(h, h.segment_size - 1));
  EXPECT_FALSE(valid(h, 0));
}

WATCHED_TEST(ChannelLayout, ViewPointsInsideTheSegment) {
  const ChannelHeader h = good_header({4096, 8, 2, 4096, 2});
  std::vector<std::byte> mem(h.segment_size);
  ChannelView v(mem.data(), h);
  auto inside = [&](const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    return b >= mem.data() && b + n <= mem.data() + mem.size();
  };
  EXPECT_TRUE(inside(&v.control(), sizeof(RingControl)));
  EXPECT_TRUE(inside(&v.completion(), sizeof(Completion)));
  EXPECT_TRUE(inside(&v.reply(7), sizeof(ReplySlot)));
  EXPECT_TRUE(inside(&v.staging_state(1), sizeof(uint32_t)));
  EXPECT_TRUE(inside(v.staging(1), h.staging_slot_size));
  EXPECT_TRUE(inside(v.devices() + 1, sizeof(DeviceRecord)));
  EXPECT_TRUE(inside(v.ring(), h.ring_capacity));
}

}  // namespace
}  // namespace funnel::ipc
