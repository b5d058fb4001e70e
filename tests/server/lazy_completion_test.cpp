// Lazy completion (doc/design/channel.md, "Lazy completion"): a wait for the last work
// of a stream is answered by the stream going idle, without an event; once more work
// is enqueued there first, an event recorded before it answers the wait when that work
// finished.  Streams are held with host functions (released by the test), so every
// ordering below is forced, not timed.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "counting_backend.hpp"
#include "fixture.hpp"
#include "test_client.hpp"

namespace funnel::test {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kBytes = 64 * 1024;

// One TestClient used from several threads, as a program's threads share its runtime:
// sends are serialised; each thread waits on reply slots of its own.
class SharedClient {
 public:
  explicit SharedClient(TestClient& c) : c_(c) {}
  template <class T>
  void post(Opcode op, const T& payload, uint64_t stream) {
    std::lock_guard lk(m_);
    c_.post(op, payload, stream);
  }
  // Sends a command (with a reply on `slot` unless kNoReply) and returns its seq.
  uint64_t send(Opcode op, const void* payload, size_t size, uint32_t slot, uint64_t stream) {
    std::lock_guard lk(m_);
    return c_.send(op, payload, size, slot, stream);
  }
  template <class T>
  uint64_t send(Opcode op, const T& payload, uint32_t slot, uint64_t stream) {
    return send(op, &payload, sizeof payload, slot, stream);
  }
  // A command without payload, answered on `slot`.
  Reply call_on(Opcode op, uint64_t stream, uint32_t slot) { return c_.wait(slot, send(op, nullptr, 0, slot, stream)); }

 private:
  TestClient& c_;
  std::mutex m_;
};

// A host function that holds a stream until release() (the client's done word), at the
// latest when the Hold goes out of scope.
class Hold {
 public:
  Hold(TestClient& c, SharedClient& shared, uint32_t first_slot) : c_(c), shared_(shared), slot_(first_slot) {}
  ~Hold() { release(); }
  Hold(const Hold&) = delete;
  Hold& operator=(const Hold&) = delete;
  void on(uint64_t stream) { shared_.post(Opcode::HostFunc, ipc::HostFuncCmd{slot_, slot_ + 1, 1, 0}, stream); }
  bool reached() const {
    return eventually([&] { return c_.view().event_state(slot_).load() == 1; });
  }
  void release() { c_.view().event_state(slot_ + 1).store(1); }

 private:
  TestClient& c_;
  SharedClient& shared_;
  uint32_t slot_;
};

class LazyCompletionTest : public ServerTest {
 protected:
  void SetUp() override {
    ServerTest::SetUp();
    auto counting = std::make_unique<CountingBackend>(sim_backend());
    counting_ = counting.get();
    start_server(options(), std::move(counting));
    client_ = std::make_unique<TestClient>(run_dir_);
    ASSERT_TRUE(client_->ok());
    shared_ = std::make_unique<SharedClient>(*client_);
    TestClient& c = *client_;
    const Reply r = c.call(Opcode::PinnedAlloc, ipc::PinnedAllocCmd{kBytes, 0, 0});
    ASSERT_EQ(r.status, Status::Success);
    pinned_id_ = r.value[0];
    const auto path =
        run_dir_ / ("pinned." + std::to_string(c.attach_reply().client_id) + "." + std::to_string(pinned_id_));
    pinned_ = ipc::MappedFile::open(path, r.value[1]);
    std::filesystem::remove(path);
    dev_ = c.alloc(kBytes);
  }
  void TearDown() override {
    shared_.reset();
    client_.reset();
    ServerTest::TearDown();
  }

  uint8_t* pinned() { return static_cast<uint8_t*>(pinned_.data()); }

  // Pinned -> device (or back) over the whole buffer.
  ipc::CopyCmd pinned_copy(bool to_device) const {
    ipc::CopyCmd cp{};
    const ipc::Location host{ipc::MemSpace::Pinned, 0, pinned_id_, 0};
    const ipc::Location device{ipc::MemSpace::Device, 0, 0, dev_};
    cp.dst = to_device ? device : host;
    cp.src = to_device ? host : device;
    cp.width = cp.dst_pitch = cp.src_pitch = kBytes;
    cp.height = 1;
    return cp;
  }

  // The device buffer as it is now, read back through pinned memory on `stream`.
  std::vector<uint8_t> device_bytes(uint64_t stream) {
    std::memset(pinned(), 0, kBytes);
    EXPECT_EQ(client_->call(Opcode::Copy, pinned_copy(false), stream).status, Status::Success);
    return {pinned(), pinned() + kBytes};
  }

  // A synchronous pinned copy of `value` bytes into the device buffer, sent and waited
  // for by another thread.  Declared before the Holds of a test, so that a failed
  // assertion releases them before it joins.
  class BackgroundCopy {
   public:
    explicit BackgroundCopy(LazyCompletionTest& t) : t_(t) {}
    ~BackgroundCopy() { join(); }
    BackgroundCopy(const BackgroundCopy&) = delete;
    BackgroundCopy& operator=(const BackgroundCopy&) = delete;
    // Returns once the copy is in the ring.
    void start(uint8_t value, uint64_t stream) {
      std::memset(t_.pinned(), value, kBytes);
      std::atomic<bool> sent{false};
      thread_ = std::thread([this, stream, &sent] {
        constexpr uint32_t kSlot = 40;
        const uint64_t seq = t_.shared_->send(Opcode::Copy, t_.pinned_copy(true), kSlot, stream);
        sent = true;
        status_ = static_cast<int>(t_.client_->wait(kSlot, seq, 10s).status);
      });
      while (!sent) std::this_thread::yield();
    }
    bool answered() const { return status_.load() != kPending; }
    Status status() const { return static_cast<Status>(status_.load()); }
    void join() {
      if (thread_.joinable()) thread_.join();
    }

   private:
    static constexpr int kPending = -1;
    LazyCompletionTest& t_;
    std::atomic<int> status_{kPending};
    std::thread thread_;
  };

  // A BackgroundCopy on a stream that a Hold (`first`) keeps it from, and a second Hold
  // for later; the holds go (are released) before the copy is joined.
  struct HeldCopy {
    explicit HeldCopy(LazyCompletionTest& t)
        : copy(t), first(*t.client_, *t.shared_, 100), second(*t.client_, *t.shared_, 102) {}
    // False when the stream never got to the first hold.
    bool start(uint64_t stream, uint8_t value) {
      first.on(stream);
      if (!first.reached()) return false;
      copy.start(value, stream);
      return true;
    }
    BackgroundCopy copy;
    Hold first, second;
  };

  void ordered_by_the_legacy_stream(uint64_t copy_stream, uint64_t other);

  static std::vector<uint8_t> halves(uint8_t first, uint8_t second) {
    std::vector<uint8_t> v(kBytes, second);
    std::fill(v.begin(), v.begin() + kBytes / 2, first);
    return v;
  }

  CountingBackend* counting_ = nullptr;
  std::unique_ptr<TestClient> client_;
  std::unique_ptr<SharedClient> shared_;
  ipc::MappedFile pinned_;
  uint64_t pinned_id_ = 0;
  uint64_t dev_ = 0;
};

TEST_F(LazyCompletionTest, WaitsOnAnOtherwiseIdleStreamRecordNoEvent) {
  TestClient& c = *client_;
  c.create_stream(5, ipc::kStreamNonBlocking);
  const uint64_t before = counting_->records();

  std::memset(pinned(), 0x5a, kBytes);
  EXPECT_EQ(c.call(Opcode::Copy, pinned_copy(true)).status, Status::Success);
  EXPECT_EQ(device_bytes(5), std::vector<uint8_t>(kBytes, 0x5a));
  c.post(Opcode::Memset, ipc::MemsetCmd{dev_, kBytes, kBytes, 1, 0x11, 0}, 5);
  EXPECT_EQ(c.on_stream(Opcode::StreamSynchronize, 5).status, Status::Success);
  c.post(Opcode::Memset, ipc::MemsetCmd{dev_, kBytes, kBytes, 1, 0x22, 0}, 5);
  EXPECT_EQ(c.sync_device(), Status::Success);

  // A waited copy behind a held stream: answered once the stream gets idle.
  BackgroundCopy copy(*this);
  Hold hold(c, *shared_, 100);
  hold.on(5);
  ASSERT_TRUE(hold.reached());
  copy.start(0x33, 5);
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(copy.answered()) << "answered before the stream got to the copy";
  hold.release();
  copy.join();
  EXPECT_EQ(copy.status(), Status::Success);
  EXPECT_EQ(device_bytes(5), std::vector<uint8_t>(kBytes, 0x33));

  EXPECT_EQ(counting_->records(), before) << "a wait on a stream's last work recorded an event";
  EXPECT_EQ(c.take_deferred(), 0);
}

TEST_F(LazyCompletionTest, WorkFromAnotherThreadAfterAWaitedCopyDoesNotDelayItsAnswer) {
  TestClient& c = *client_;
  c.create_stream(5, ipc::kStreamNonBlocking);
  HeldCopy held(*this);
  ASSERT_TRUE(held.start(5, 0x11));
  auto& [copy, first, second] = held;
  const uint64_t before = counting_->records();

  // More work on the copy's stream while the copy waits: a memset over the first half,
  // then a hold that keeps the stream busy.
  shared_->post(Opcode::Memset, ipc::MemsetCmd{dev_, kBytes / 2, kBytes / 2, 1, 0x22, 0}, 5);
  second.on(5);
  EXPECT_EQ(shared_->call_on(Opcode::Fence, 0, 1).status, Status::Success);
  EXPECT_EQ(counting_->records(), before + 1) << "one event, recorded between the copy and the memset";

  first.release();
  ASSERT_TRUE(second.reached());
  ASSERT_TRUE(eventually([&] { return copy.answered(); }))
      << "the copy was answered only when its stream got idle, not when the copy completed";
  EXPECT_EQ(copy.status(), Status::Success);
  EXPECT_EQ(shared_->call_on(Opcode::StreamQuery, 5, 2).status, Status::NotReady);

  second.release();
  copy.join();
  EXPECT_EQ(shared_->call_on(Opcode::StreamSynchronize, 5, 3).status, Status::Success);
  EXPECT_EQ(device_bytes(5), halves(0x22, 0x11)) << "the memset ran before the copy";
  EXPECT_EQ(c.take_deferred(), 0);
}

TEST_F(LazyCompletionTest, EventRecordedAfterAWaitedCopyOrdersAnotherStream) {
  TestClient& c = *client_;
  c.create_stream(5, ipc::kStreamNonBlocking);
  c.create_stream(6, ipc::kStreamNonBlocking);
  c.create_event(1, ipc::kEventDisableTiming);
  HeldCopy held(*this);
  ASSERT_TRUE(held.start(5, 0x11));
  auto& [copy, first, second] = held;

  // The event after the copy, then stream 5 held again; stream 6 waits for the event and
  // overwrites the first half.
  shared_->post(Opcode::EventRecord, ipc::EventRecordCmd{1, 0, ipc::kNoEventSlot, 0, 0}, 5);
  second.on(5);
  shared_->post(Opcode::StreamWaitEvent, ipc::EventCmd{1, 0, 0}, 6);
  shared_->post(Opcode::Memset, ipc::MemsetCmd{dev_, kBytes / 2, kBytes / 2, 1, 0x33, 0}, 6);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(shared_->call_on(Opcode::StreamQuery, 6, 1).status, Status::NotReady) << "stream 6 did not wait";
  EXPECT_FALSE(copy.answered());

  first.release();
  ASSERT_TRUE(second.reached());
  ASSERT_TRUE(eventually([&] { return copy.answered(); }));
  EXPECT_EQ(copy.status(), Status::Success);
  EXPECT_EQ(shared_->call_on(Opcode::StreamSynchronize, 6, 2).status, Status::Success)
      << "while stream 5 is still held: the event lies between the copy and the hold";
  EXPECT_EQ(device_bytes(6), halves(0x33, 0x11));

  second.release();
  copy.join();
  EXPECT_EQ(c.sync_device(), Status::Success);
  EXPECT_EQ(c.take_deferred(), 0);
}

// A waited copy on `copy_stream` (held), then work on `other` that the legacy-stream
// emulation orders after it (an event on copy_stream before other's wait), then
// copy_stream held again: the copy is answered, and `other` completes, while
// copy_stream is still held.
void LazyCompletionTest::ordered_by_the_legacy_stream(uint64_t copy_stream, uint64_t other) {
  TestClient& c = *client_;
  c.create_stream(7);  // blocking: the legacy stream orders with it
  HeldCopy held(*this);
  ASSERT_TRUE(held.start(copy_stream, 0x11));
  auto& [copy, first, second] = held;

  shared_->post(Opcode::Memset, ipc::MemsetCmd{dev_, kBytes / 2, kBytes / 2, 1, 0x44, 0}, other);
  second.on(copy_stream);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(shared_->call_on(Opcode::StreamQuery, other, 1).status, Status::NotReady) << "it did not wait";

  first.release();
  ASSERT_TRUE(second.reached());
  ASSERT_TRUE(eventually([&] { return copy.answered(); }));
  EXPECT_EQ(copy.status(), Status::Success);
  EXPECT_EQ(shared_->call_on(Opcode::StreamSynchronize, other, 2).status, Status::Success);
  EXPECT_EQ(shared_->call_on(Opcode::StreamQuery, copy_stream, 3).status, Status::NotReady);

  second.release();
  copy.join();
  EXPECT_EQ(c.sync_device(), Status::Success);
  EXPECT_EQ(device_bytes(other), halves(0x44, 0x11)) << "the memset ran before the copy";
  EXPECT_EQ(c.take_deferred(), 0);
}

TEST_F(LazyCompletionTest, LegacyStreamWorkAfterAWaitedCopyOnABlockingStream) { ordered_by_the_legacy_stream(7, 0); }

TEST_F(LazyCompletionTest, BlockingStreamWorkAfterAWaitedCopyOnTheLegacyStream) { ordered_by_the_legacy_stream(0, 7); }

TEST_F(LazyCompletionTest, SynchronizeWaitsOnIdleStreamsAndEventsTogether) {
  TestClient& c = *client_;
  c.create_stream(5, ipc::kStreamNonBlocking);
  c.create_stream(6, ipc::kStreamNonBlocking);
  Hold on5(c, *shared_, 100), on6(c, *shared_, 102), again(c, *shared_, 104);
  on5.on(5);
  on6.on(6);
  ASSERT_TRUE(on5.reached() && on6.reached());
  // A device synchronize waits for both streams going idle; more work on stream 5 then
  // turns its part into an event, and a stream synchronize of 6 shares 6's part.
  constexpr uint32_t kDeviceSlot = 50, kStreamSlot = 51;
  const uint64_t device_seq = shared_->send(Opcode::DeviceSynchronize, nullptr, 0, kDeviceSlot, 0);
  const uint64_t stream_seq = shared_->send(Opcode::StreamSynchronize, nullptr, 0, kStreamSlot, 6);
  again.on(5);
  on5.release();
  ASSERT_TRUE(again.reached());
  EXPECT_EQ(c.wait(kDeviceSlot, device_seq, 100ms).status, Status::Timeout) << "stream 6 is still held";
  on6.release();
  EXPECT_EQ(c.wait(kStreamSlot, stream_seq).status, Status::Success);
  EXPECT_EQ(c.wait(kDeviceSlot, device_seq).status, Status::Success)
      << "the device synchronize waited for work enqueued after it";
  again.release();
  EXPECT_EQ(c.sync_device(), Status::Success);
  EXPECT_EQ(c.take_deferred(), 0);
}

TEST_F(LazyCompletionTest, DestroyingAStreamWithAWaitedCopyStillAnswersIt) {
  TestClient& c = *client_;
  c.create_stream(5, ipc::kStreamNonBlocking);
  BackgroundCopy copy(*this);
  Hold hold(c, *shared_, 100);
  hold.on(5);
  ASSERT_TRUE(hold.reached());
  copy.start(0x66, 5);
  shared_->send(Opcode::StreamDestroy, nullptr, 0, ipc::kNoReply, 5);
  EXPECT_EQ(shared_->call_on(Opcode::Fence, 0, 1).status, Status::Success);
  hold.release();
  copy.join();
  EXPECT_EQ(copy.status(), Status::Success);
  EXPECT_EQ(device_bytes(0), std::vector<uint8_t>(kBytes, 0x66));
  EXPECT_EQ(c.take_deferred(), 0);
}

TEST_F(LazyCompletionTest, ClientLeavingWithAWaitedCopyIsTornDown) {
  TestClient& c = *client_;
  c.post(Opcode::HostFunc, ipc::HostFuncCmd{100, 101, 1, 0});  // never released
  ASSERT_TRUE(eventually([&] { return c.view().event_state(100).load() == 1; }));
  std::memset(pinned(), 0x77, kBytes);
  const ipc::CopyCmd cp = pinned_copy(true);
  c.send(Opcode::Copy, &cp, sizeof cp, 40, 0);
  EXPECT_EQ(c.call(Opcode::Fence).status, Status::Success);
  shared_.reset();
  client_->detach();  // without releasing the stream or waiting for the copy
  ASSERT_TRUE(eventually([&] { return stats(run_dir_)["server"]["clients"] == 0; }, 3s))
      << "the session was not torn down";
  TestClient next(run_dir_);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next.sync_device(), Status::Success);
}

}  // namespace
}  // namespace funnel::test
