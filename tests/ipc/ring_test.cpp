// RingWriter / RingReader over a plain in-process buffer laid out by layout():
// wrap-around with Pad records, integrity across threads, back-pressure, and the
// reader's defences against a client that scribbles on the ring.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "funnel/ipc/channel_layout.hpp"
#include "funnel/ipc/commands.hpp"
#include "funnel/ipc/ring.hpp"
#include "watchdog.hpp"

namespace funnel::ipc {
namespace {

using namespace std::chrono_literals;

// A channel segment in ordinary process memory.
class Segment {
 public:
  explicit Segment(uint64_t ring_capacity) {
    ChannelGeometry g;
    g.ring_capacity = ring_capacity;
    g.staging_slot_size = 4096;
    g.staging_slots = 2;
    EXPECT_TRUE(layout(g, h_));
    mem_.reset(static_cast<std::byte*>(std::aligned_alloc(4096, h_.segment_size)));
    std::memset(mem_.get(), 0, h_.segment_size);
    std::memcpy(mem_.get(), &h_, sizeof h_);
    new (mem_.get() + h_.control_offset) RingControl();
    new (mem_.get() + h_.completion_offset) Completion();
    view_ = ChannelView(mem_.get(), h_);
  }
  const ChannelView& view() const { return view_; }
  RingControl& control() const { return view_.control(); }
  uint64_t capacity() const { return h_.ring_capacity; }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  ChannelHeader h_{};
  std::unique_ptr<std::byte, Free> mem_;
  ChannelView view_;
};

constexpr auto kNever = [] { return false; };

// Payload bytes are a function of the record's seq and position, so any torn,
// shifted or stale record shows.
uint8_t pattern(uint64_t seq, size_t i) { return static_cast<uint8_t>(seq * 131 + i * 7 + 1); }

// Writes one Fence record with `payload` patterned bytes; false if give_up() fired.
// `quiet`: published as a kernel launch is (RingWriter::publish).
bool write_record(RingWriter& w, uint64_t seq, uint64_t payload,
                  const std::function<bool()>& give_up = kNever, bool quiet = false) {
  const uint32_t size = record_size_for(payload);
  std::byte* p = w.reserve(size, give_up);
  if (p == nullptr) return false;
  CommandHeader h{};
  h.size = size;
  h.opcode = Opcode::Fence;
  h.seq = seq;
  h.reply_slot = kNoReply;
  h.stream = payload;
  std::memcpy(p, &h, sizeof h);
  for (size_t i = 0; i < payload; ++i) p[sizeof h + i] = std::byte{pattern(seq, i)};
  w.publish(quiet);
  return true;
}

// Checks one record read back; returns false (with a failure) if it is wrong.
bool check_record(const std::byte* rec, uint32_t size, uint64_t seq) {
  CommandHeader h;
  std::memcpy(&h, rec, sizeof h);
  EXPECT_EQ(h.seq, seq);
  EXPECT_EQ(h.opcode, Opcode::Fence);
  EXPECT_EQ(h.size, size);
  EXPECT_EQ(size, record_size_for(h.stream));
  if (h.seq != seq || h.size != size) return false;
  for (size_t i = 0; i < h.stream; ++i) {
    if (rec[sizeof h + i] != std::byte{pattern(seq, i)}) {
      ADD_FAILURE() << "record " << seq << " byte " << i << " differs";
      return false;
    }
  }
  return true;
}

WATCHED_TEST(Ring, RecordsOfManySizesWrapAroundWithPad) {
  Segment s(4096);
  RingWriter w(s.view());
  RingReader r(s.view());
  std::vector<std::byte> out(kMaxRecordSize);
  const char* why = nullptr;
  uint64_t seq = 1;
  // Up to three records in flight, sizes 64..1024 bytes: the ring wraps many times
  // and nearly every wrap needs a Pad.
  for (int round = 0; round < 2000; ++round) {
    const int batch = 1 + round % 3;
    for (int k = 0; k < batch; ++k) write_record(w, seq + static_cast<uint64_t>(k), (seq + static_cast<uint64_t>(k)) * 37 % 990);
    for (int k = 0; k < batch; ++k) {
      uint32_t size = 0;
      ASSERT_EQ(r.next(out.data(), size, &why), RingReader::Next::Record) << (why ? why : "");
      ASSERT_TRUE(check_record(out.data(), size, seq));
      ++seq;
    }
    uint32_t none = 0;
    ASSERT_EQ(r.next(out.data(), none, &why), RingReader::Next::Empty);
  }
  EXPECT_GT(s.control().tail.load(), 50 * s.capacity()) << "the ring should have wrapped many times";
  EXPECT_EQ(s.control().head.load(), s.control().tail.load());
}

// The writer keeps the head it last read and loads `head` only when that copy shows too little
// room (the server writes head after every record it reads: a load per record moved its cache
// line between the two cores on every call).  Shown with a head that looks like a full ring:
// the writer goes on while its copy shows room, and waits once it does not.
WATCHED_TEST(Ring, WriterReadsHeadOnlyWhenItsCopyShowsTooLittleRoom) {
  Segment s(4096);
  RingWriter w(s.view());
  const uint64_t record = record_size_for(64);
  const uint64_t fit = s.capacity() / record;
  uint64_t seq = 1;
  // A head that says "no room at all" (the reader is a whole ring behind); the writer's copy
  // still says the ring is empty.
  const uint64_t real_head = s.control().head.load();
  s.control().head.store(real_head - s.capacity());  // wraps: tail - head > capacity
  // (A writer that read `head` here would see no room: it gives up instead of waiting forever.)
  auto soon = [n = 0]() mutable { return ++n > 2; };
  for (uint64_t k = 0; k < fit; ++k) ASSERT_TRUE(write_record(w, seq++, 64, soon)) << "record " << k;
  // Now its copy shows no room: it reads head, which shows none either, and gives up.
  int looks = 0;
  EXPECT_FALSE(write_record(w, seq, 64, [&] { return ++looks > 2; }));
  EXPECT_GT(looks, 0);
  // With the real head back, the records written are there to be read, in order.
  s.control().head.store(real_head);
  RingReader r(s.view());
  std::vector<std::byte> out(kMaxRecordSize);
  const char* why = nullptr;
  for (uint64_t k = 1; k <= fit; ++k) {
    uint32_t size = 0;
    ASSERT_EQ(r.next(out.data(), size, &why), RingReader::Next::Record) << (why ? why : "");
    ASSERT_TRUE(check_record(out.data(), size, k));
  }
  // And the writer, seeing room again, goes on.
  EXPECT_TRUE(write_record(w, seq, 64));
}

WATCHED_TEST(Ring, RecordFillingTheWholeRingFits) {
  Segment s(4096);
  RingWriter w(s.view());
  RingReader r(s.view());
  std::vector<std::byte> out(kMaxRecordSize);
  const char* why = nullptr;
  uint32_t size = 0;
  write_record(w, 1, 4096 - sizeof(CommandHeader));
  ASSERT_EQ(r.next(out.data(), size, &why), RingReader::Next::Record);
  EXPECT_TRUE(check_record(out.data(), size, 1));
  write_record(w, 2, 100);
  write_record(w, 3, 4096 - 192 - sizeof(CommandHeader));  // exactly the rest of the ring
  ASSERT_EQ(r.next(out.data(), size, &why), RingReader::Next::Record);
  EXPECT_TRUE(check_record(out.data(), size, 2));
  ASSERT_EQ(r.next(out.data(), size, &why), RingReader::Next::Record);
  EXPECT_TRUE(check_record(out.data(), size, 3));
}

WATCHED_TEST(Ring, HundredThousandRecordsAcrossTwoThreads) {
  Segment s(16384);
  constexpr uint64_t kRecords = 100000;
  std::atomic<bool> consumer_failed{false};
  std::thread producer([&] {
    RingWriter w(s.view());
    for (uint64_t seq = 1; seq <= kRecords; ++seq) {
      if (!write_record(w, seq, (seq * 7919) % 1500, [&] { return consumer_failed.load(); })) return;
    }
  });
  std::thread consumer([&] {
    RingReader r(s.view());
    std::vector<std::byte> out(kMaxRecordSize);
    const char* why = nullptr;
    uint64_t expect = 1;
    while (expect <= kRecords) {
      uint32_t size = 0;
      switch (r.next(out.data(), size, &why)) {
        case RingReader::Next::Record:
          if (!check_record(out.data(), size, expect)) {
            consumer_failed = true;
            return;
          }
          ++expect;
          break;
        case RingReader::Next::Empty:
          r.sleep(2ms);
          break;
        case RingReader::Next::Corrupt:
          ADD_FAILURE() << "corrupt at record " << expect << ": " << why;
          consumer_failed = true;
          return;
      }
    }
  });
  producer.join();
  consumer.join();
  EXPECT_FALSE(consumer_failed);
}

// Fills the ring with 64-byte records; the next reserve must wait.
void fill(RingWriter& w, const Segment& s, uint64_t& seq) {
  for (uint64_t i = 0; i < s.capacity() / 64; ++i) write_record(w, seq++, 0);
}

WATCHED_TEST(Ring, FullRingBlocksTheWriterUntilTheReaderConsumes) {
  Segment s(4096);
  RingWriter w(s.view());
  RingReader r(s.view());
  uint64_t seq = 1;
  fill(w, s, seq);
  std::atomic<bool> written{false};
  std::thread t([&] {
    write_record(w, seq, 0);
    written = true;
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(written) << "a reserve on a full ring must wait";
  EXPECT_EQ(s.control().producer_waiting.load(), 1u);
  std::vector<std::byte> out(kMaxRecordSize);
  uint32_t size = 0;
  const char* why = nullptr;
  ASSERT_EQ(r.next(out.data(), size, &why), RingReader::Next::Record);
  t.join();
  EXPECT_TRUE(written);
  EXPECT_EQ(s.control().producer_waiting.load(), 0u);
  for (uint64_t expect = 2; expect <= seq; ++expect) {
    ASSERT_EQ(r.next(out.data(), size, &why), RingReader::Next::Record);
    EXPECT_TRUE(check_record(out.data(), size, expect));
  }
  EXPECT_EQ(r.next(out.data(), size, &why), RingReader::Next::Empty);
}

WATCHED_TEST(Ring, GiveUpEndsABlockedReserve) {
  Segment s(4096);
  RingWriter w(s.view());
  uint64_t seq = 1;
  fill(w, s, seq);
  std::atomic<bool> stop{false};
  std::atomic<bool> returned{false};
  std::byte* got = reinterpret_cast<std::byte*>(1);
  std::thread t([&] {
    got = w.reserve(64, [&] { return stop.load(); });
    returned = true;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(returned);
  stop = true;
  t.join();
  EXPECT_EQ(got, nullptr);
}

WATCHED_TEST(Ring, GiveUpEndsAReserveThatWaitsToPad) {
  Segment s(4096);
  RingWriter w(s.view());
  RingReader r(s.view());
  std::vector<std::byte> out(kMaxRecordSize);
  uint32_t size = 0;
  const char* why = nullptr;
  write_record(w, 1, 3000);  // 3072 bytes, 1024 left to the end
  // A 2048-byte record needs a Pad of 1024 first and then 2048 bytes at the start,
  // which the unread record still occupies.
  std::atomic<bool> stop{false};
  std::byte* got = reinterpret_cast<std::byte*>(1);
  std::thread t([&] { got = w.reserve(2048, [&] { return stop.load(); }); });
  std::this_thread::sleep_for(50ms);
  stop = true;
  t.join();
  EXPECT_EQ(got, nullptr);
  ASSERT_EQ(r.next(out.data(), size, &why), RingReader::Next::Record);
  EXPECT_TRUE(check_record(out.data(), size, 1));
}

// --- corruption: the reader copies, validates and reports, never trusts -------

struct CorruptCase {
  const char* name;
  std::function<void(Segment&)> scribble;
  const char* why_contains;
};

void write_raw(Segment& s, uint64_t pos, uint32_t size, Opcode op) {
  CommandHeader h{};
  h.size = size;
  h.opcode = op;
  std::memcpy(s.view().ring() + (pos & (s.capacity() - 1)), &h, sizeof h);
}

WATCHED_TEST(Ring, CorruptRingsAreReportedAsCorrupt) {
  const std::vector<CorruptCase> cases{
      {"tail beyond capacity", [](Segment& s) { s.control().tail = s.capacity() + 64; }, "tail"},
      {"tail not a record multiple", [](Segment& s) { s.control().tail = 100; }, "tail"},
      {"tail behind head",
       [](Segment& s) {
         write_raw(s, 0, 64, Opcode::Fence);
         s.control().tail = 64;
         RingReader pre(s.view());
         std::vector<std::byte> out(kMaxRecordSize);
         uint32_t size = 0;
         const char* why = nullptr;
         EXPECT_EQ(pre.next(out.data(), size, &why), RingReader::Next::Record);
         s.control().tail = 0;  // the reader built below starts at head = 64
       },
       "tail"},
      {"record size 0", [](Segment& s) { write_raw(s, 0, 0, Opcode::Fence); s.control().tail = 64; }, "size"},
      {"record size not aligned", [](Segment& s) { write_raw(s, 0, 96, Opcode::Fence); s.control().tail = 128; }, "size"},
      {"record larger than published", [](Segment& s) { write_raw(s, 0, 128, Opcode::Fence); s.control().tail = 64; }, "size"},
      {"record past the ring's end",
       [](Segment& s) {
         s.control().head = s.capacity() - 64;
         write_raw(s, s.capacity() - 64, 128, Opcode::Fence);
         s.control().tail = s.capacity() + 64;
       },
       "size"},
      {"pad short of the end", [](Segment& s) { write_raw(s, 0, 64, Opcode::Pad); s.control().tail = 128; }, "pad"},
  };
  for (const auto& c : cases) {
    Segment s(4096);
    c.scribble(s);
    RingReader r(s.view());
    std::vector<std::byte> out(kMaxRecordSize);
    uint32_t size = 0;
    const char* why = nullptr;
    EXPECT_EQ(r.next(out.data(), size, &why), RingReader::Next::Corrupt) << c.name;
    ASSERT_NE(why, nullptr) << c.name;
    EXPECT_NE(std::string(why).find(c.why_contains), std::string::npos) << c.name << ": " << why;
  }
}

WATCHED_TEST(Ring, OversizedNonPadRecordIsCorrupt) {
  Segment s(uint64_t{1} << 18);
  write_raw(s, 0, kMaxRecordSize + 64, Opcode::Copy);
  s.control().tail = kMaxRecordSize + 64;
  RingReader r(s.view());
  std::vector<std::byte> out(kMaxRecordSize);
  uint32_t size = 0;
  const char* why = nullptr;
  EXPECT_EQ(r.next(out.data(), size, &why), RingReader::Next::Corrupt);
}

WATCHED_TEST(Ring, ReaderSleepReturnsOnDoorbellAndOnTimeout) {
  Segment s(4096);
  RingReader r(s.view());
  const auto t0 = std::chrono::steady_clock::now();
  r.sleep(30ms);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 25ms);
  EXPECT_EQ(s.control().consumer_sleeping.load(), 0u);

  std::thread t([&] {
    std::this_thread::sleep_for(50ms);
    RingWriter w(s.view());
    write_record(w, 1, 0);
  });
  const auto t1 = std::chrono::steady_clock::now();
  r.sleep(10s);
  EXPECT_LT(std::chrono::steady_clock::now() - t1, 5s) << "publish must wake a sleeping reader";
  t.join();
  EXPECT_FALSE(r.empty());
}

// A napping reader (kConsumerNapping: a worker on its client's own core) is not woken for a
// kernel launch, only for other records; a sleeping one is woken for every record.
WATCHED_TEST(Ring, ANappingReaderIsNotWokenForLaunches) {
  Segment s(4096);
  RingReader r(s.view());
  RingWriter w(s.view());
  auto& bell_count = s.control().doorbell;
  std::array<std::byte, kMaxRecordSize> rec{};
  uint32_t size = 0;
  const char* why = nullptr;
  struct Case {
    bool nap, quiet, rings;
  };
  uint64_t seq = 0;
  for (const Case c : {Case{true, true, false}, Case{true, false, true}, Case{false, true, true},
                       Case{false, false, true}}) {
    SCOPED_TRACE(std::string(c.nap ? "napping" : "asleep") + (c.quiet ? ", a launch" : ", another record"));
    FutexWaitItem bell;
    ASSERT_TRUE(r.arm_sleep(bell, c.nap));
    EXPECT_EQ(s.control().consumer_sleeping.load(), c.nap ? kConsumerNapping : kConsumerAsleep);
    const uint32_t before = bell_count.load();
    ASSERT_TRUE(write_record(w, ++seq, 8, kNever, c.quiet));
    EXPECT_EQ(bell_count.load() != before, c.rings);
    r.end_sleep();
    EXPECT_EQ(s.control().consumer_sleeping.load(), kConsumerAwake);
    ASSERT_EQ(r.next(rec.data(), size, &why), RingReader::Next::Record);
    EXPECT_TRUE(check_record(rec.data(), size, seq));
  }
  // A nap ends by itself and finds what was published meanwhile.
  std::thread t([&] {
    std::this_thread::sleep_for(20ms);
    write_record(w, ++seq, 0, kNever, true);
  });
  const auto t0 = std::chrono::steady_clock::now();
  r.sleep(300ms, true);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 250ms) << "a launch cut the nap short";
  t.join();
  EXPECT_FALSE(r.empty());
}

}  // namespace
}  // namespace funnel::ipc
