// The command ring: one producer side (the client, whose threads serialise on a
// process-local mutex) and one consumer side (the server's worker for that client).
// Records never straddle the end of the ring: a Pad record fills the gap.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "funnel/ipc/channel_layout.hpp"
#include "funnel/ipc/commands.hpp"
#include "funnel/ipc/futex.hpp"

namespace funnel::ipc {

// Client view.  Not thread-safe: one thread at a time reserves and publishes.
class RingWriter {
 public:
  RingWriter() = default;
  explicit RingWriter(const ChannelView& v) noexcept
      : ctl_(&v.control()), data_(v.ring()), cap_(v.header().ring_capacity),
        tail_(v.control().tail.load(std::memory_order_relaxed)),
        head_seen_(v.control().head.load(std::memory_order_acquire)) {}

  // Returns where to write a record of `size` bytes (a multiple of kRecordAlign, at
  // most kMaxRecordSize), waiting while the ring is full; nullptr once give_up() fires.
  template <class GiveUp>
  std::byte* reserve(uint32_t size, GiveUp give_up) {
    const uint64_t to_end = cap_ - (tail_ & (cap_ - 1));
    if (to_end < size) {
      if (!wait_space(to_end, give_up)) return nullptr;
      CommandHeader pad{};
      pad.size = static_cast<uint32_t>(to_end);
      pad.opcode = Opcode::Pad;
      std::memcpy(data_ + (tail_ & (cap_ - 1)), &pad, sizeof pad);
      tail_ += to_end;
    }
    if (!wait_space(size, give_up)) return nullptr;
    reserved_ = size;
    return data_ + (tail_ & (cap_ - 1));
  }

  // Makes the reserved record (and any Pad before it) visible to the server.
  // The doorbell is rung only for a sleeping server: a spinning one watches `tail`, and
  // every write to the doorbell's cache line would cost the round trip a line transfer.
  // Dekker pairing (all seq_cst): we store tail, then load consumer_sleeping; the server
  // stores consumer_sleeping, then loads tail before it sleeps.  One of us sees the other.
  // `quiet`: a kernel launch or a GPU-local message's half, which a napping server
  // (kConsumerNapping) finds when its nap ends or at wake(); everything else wakes it (the
  // client may wait for it by a reply, a staging slot, an event word).
  void publish(bool quiet = false) noexcept {
    stage();
    ctl_->tail.store(tail_, std::memory_order_seq_cst);
    const uint32_t sleeping = ctl_->consumer_sleeping.load(std::memory_order_seq_cst);
    if (sleeping == kConsumerAsleep || (sleeping != kConsumerAwake && !quiet)) ring();
  }

  // Wakes a napping server for the quiet records published before (a client that now waits
  // for them); nothing when it is awake.  Safe beside publish() on another thread.
  void wake() noexcept {
    if (ctl_->consumer_sleeping.load(std::memory_order_seq_cst) != kConsumerAwake) ring();
  }

  // Adds the reserved record to what the next publish() makes visible, without showing it
  // to the server yet: several records then reach it at once (tests of launch batches).
  void stage() noexcept {
    tail_ += reserved_;
    reserved_ = 0;
  }

 private:
  void ring() noexcept {
    ctl_->doorbell.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(ctl_->doorbell);
  }
  // A full ring means the server is a whole ring of records behind: spinning for the
  // next free record would only take a core from the server (16 clients spinning beside
  // 16 workers halved launch throughput on the H100) and make the server wake us after
  // every record.  So sleep at once; the server wakes us when half the ring is free
  // (RingReader::advance), and the half still queued keeps it busy meanwhile.
  // The head last read: it only grows, so room it shows is there.  `head` is loaded only when
  // that copy shows too little: the server writes it after every record it reads, and a load
  // per record took its cache line from the server's core and back (two line transfers on the
  // path of every synchronous call: the client's reserve, then the server's next advance).
  template <class GiveUp>
  bool wait_space(uint64_t need, GiveUp& give_up) {
    if (tail_ + need - head_seen_ <= cap_) return true;
    // seq_cst: pairs with advance() (see there).
    auto has_space = [&] {
      head_seen_ = ctl_->head.load(std::memory_order_seq_cst);
      return tail_ + need - head_seen_ <= cap_;
    };
    WaitOptions o;
    o.spin = std::chrono::nanoseconds::zero();
    o.sleepers = &ctl_->producer_waiting;
    return wait_until(ctl_->space, has_space, give_up, o);
  }

  RingControl* ctl_ = nullptr;
  std::byte* data_ = nullptr;
  uint64_t cap_ = 0;
  uint64_t tail_ = 0;
  uint64_t head_seen_ = 0;
  uint32_t reserved_ = 0;
};

// Server view.  Every record is copied out of shared memory before it is examined.
class RingReader {
 public:
  enum class Next { Record, Empty, Corrupt };

  RingReader() = default;
  explicit RingReader(const ChannelView& v) noexcept
      : ctl_(&v.control()), data_(v.ring()), cap_(v.header().ring_capacity),
        head_(v.control().head.load(std::memory_order_relaxed)) {}

  // Copies the next non-Pad record into `out` (kMaxRecordSize bytes) and sets `size`.
  // Corrupt means the client broke the ring protocol; `why` says how.
  Next next(std::byte* out, uint32_t& size, const char** why) noexcept {
    for (;;) {
      const uint64_t tail = ctl_->tail.load(std::memory_order_acquire);
      if (tail == head_) return Next::Empty;
      const uint64_t avail = tail - head_;
      if (tail < head_ || avail > cap_ || avail % kRecordAlign != 0) {
        *why = "ring tail out of range";
        return Next::Corrupt;
      }
      const uint64_t to_end = cap_ - (head_ & (cap_ - 1));
      CommandHeader h;
      std::memcpy(&h, data_ + (head_ & (cap_ - 1)), sizeof h);
      if (h.size < kRecordAlign || h.size % kRecordAlign != 0 || h.size > avail || h.size > to_end ||
          (h.opcode != Opcode::Pad && h.size > kMaxRecordSize)) {
        *why = "record size out of range";
        return Next::Corrupt;
      }
      if (h.opcode == Opcode::Pad) {
        if (h.size != to_end) {
          *why = "pad record does not end at the ring's end";
          return Next::Corrupt;
        }
        advance(h.size);
        continue;
      }
      std::memcpy(out, data_ + (head_ & (cap_ - 1)), h.size);
      size = h.size;
      advance(h.size);
      return Next::Record;
    }
  }

  bool empty() const noexcept { return ctl_->tail.load(std::memory_order_seq_cst) == head_; }

  // Sleeps until the client rings the doorbell or `timeout` passes.  `nap`: a short sleep
  // (kConsumerNapping) that kernel launches do not interrupt.
  void sleep(std::chrono::nanoseconds timeout, bool nap = false) noexcept {
    FutexWaitItem bell;
    if (arm_sleep(bell, nap)) futex_wait(*bell.word, bell.expected, timeout);
    end_sleep();
  }
  // sleep() in two halves, for a thread that sleeps on several rings at once (the server's
  // worker groups): marks the reader asleep, so that the client rings the doorbell, and
  // gives the doorbell to wait on; false when a record is there already (no sleep).
  // end_sleep() after the wait, or after a false.
  bool arm_sleep(FutexWaitItem& bell, bool nap = false) noexcept {
    ctl_->consumer_sleeping.store(nap ? kConsumerNapping : kConsumerAsleep, std::memory_order_seq_cst);
    bell = {&ctl_->doorbell, ctl_->doorbell.load(std::memory_order_seq_cst)};
    return empty();
  }
  void end_sleep() noexcept { ctl_->consumer_sleeping.store(kConsumerAwake, std::memory_order_relaxed); }

 private:
  // Like publish(): `space` is bumped only for a sleeping producer (it stores
  // producer_waiting, then re-checks head before it sleeps), and only once at least half
  // the ring is free, so that a producer that keeps the ring full is woken once per half
  // ring rather than once per record.  A producer whose record would fit earlier is still
  // woken in time: the ring drains to half unless this worker stops reading it, and the
  // producer's sleeps are bounded (WaitOptions::slice) anyway.  `tail` is the client's
  // word; a wrong value only changes when that client is woken.
  void advance(uint32_t n) noexcept {
    head_ += n;
    ctl_->head.store(head_, std::memory_order_seq_cst);
    if (ctl_->producer_waiting.load(std::memory_order_seq_cst) != 0 &&
        ctl_->tail.load(std::memory_order_relaxed) - head_ <= cap_ / 2) {
      ctl_->space.fetch_add(1, std::memory_order_seq_cst);
      futex_wake_all(ctl_->space);
    }
  }

  RingControl* ctl_ = nullptr;
  std::byte* data_ = nullptr;
  uint64_t cap_ = 0;
  uint64_t head_ = 0;
};

}  // namespace funnel::ipc
