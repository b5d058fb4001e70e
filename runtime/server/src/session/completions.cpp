#include "session/completions.hpp"

#include <thread>
#include <utility>

namespace funnel::server {
namespace {

using Clock = std::chrono::steady_clock;
// A GPU-answered entry (Pending::stream) whose reply word is not there yet asks the driver
// whether its stream faulted (or drained for a client that moved on) only once it is this old:
// a fault of such a wait is seen up to this late, and waits shorter than it cost no driver call.
constexpr auto kWordStreamCheck = std::chrono::milliseconds(1);

}  // namespace

Completions::Completions(SessionShared& shared, const ipc::ChannelView& view, Backend& backend, StreamTable& streams,
                         Answers& answers, std::function<void(int, Status)> observe)
    : shared_(shared), view_(view), backend_(backend), streams_(streams), answers_(answers),
      observe_(std::move(observe)) {}

void Completions::add(Pending&& p) {
  if (p.urgent()) ++urgent_;
  pending_.push_back(std::move(p));
}

Pending Completions::take(size_t i) {
  Pending p = std::move(pending_[i]);
  if (i + 1 != pending_.size()) pending_[i] = std::move(pending_.back());
  pending_.pop_back();
  return p;
}

bool Completions::word_landed(const Pending& p) noexcept {
  return p.word != nullptr && (p.word->load(std::memory_order_acquire) == p.word_value) != p.done_when_changed;
}

bool Completions::due() noexcept {
  return !pending_.empty() && poll_throttle_.due(true, urgent_ != 0, Clock::now());
}

bool Completions::word_entry_done(const Pending& p, Clock::time_point now, Status& status) {
  if (word_landed(p)) return true;
  // Not (yet) there: the work is still running, the client already took the slot again (it
  // cleared the word; its next call on the slot settles the entry), or the stream faulted.
  // Only an entry this old asks the driver, so the waits that end within it cost none.
  if (now - p.since < kWordStreamCheck) return false;
  const Status q = backend_.query(*p.stream);
  if (q == Status::NotReady) return false;
  status = q;
  return true;
}

void Completions::settle_reused(const std::atomic<uint32_t>& word) {
  // A client takes a slot again only after it saw the answer there (or the server gone):
  // the GPU got past the word, so the entry is done; its client needs no wake-up.
  for (size_t i = 0; i < pending_.size(); ++i) {
    if (pending_[i].stream == nullptr || pending_[i].word != &word) continue;
    Pending p = take(i);
    if (p.done) p.done(p.forced);
    return;  // one call per slot at a time
  }
}

bool Completions::poll() {
  // Completions are independent of each other (each names its own reply slot), so
  // any completed entry is answered without waiting for older ones.
  bool progressed = false;
  int fault_device = -1;  // reported after the loop: releasing a device edits pending_
  Status fault = Status::Success;
  urgent_ = 0;
  Clock::time_point now{};
  for (size_t i = 0; i < pending_.size();) {
    Pending& p = pending_[i];
    Status first = p.forced;
    bool ready = true;
    bool word_seen = false;
    if (p.stream != nullptr) {
      if (now == Clock::time_point{}) now = Clock::now();
      Status s = Status::Success;
      ready = word_entry_done(p, now, s);
      word_seen = ready && s == Status::Success;
      if (ipc::is_sticky(s) && fault_device < 0) {
        fault_device = p.stream->device();
        fault = s;
      }
      if (s != Status::Success && first == Status::Success) first = s;
      if (p.race && !ready) ready = true;  // then it is up to the event
    }
    for (auto& e : p.events) {
      if (word_seen) break;  // the GPU answered: its event completed before
      const Status s = backend_.query(*e);
      if (s == Status::NotReady) {
        ready = false;
        break;
      }
      if (ipc::is_sticky(s) && fault_device < 0) {
        fault_device = e->device();
        fault = s;
      }
      if (s != Status::Success && first == Status::Success) first = s;
    }
    if (!ready) {
      if (p.urgent()) ++urgent_;
      ++i;
      continue;
    }
    finish(p, first);
    take(i);
    progressed = true;
  }
  if (fault_device >= 0) observe_(fault_device, fault);
  return progressed;
}

void Completions::finish(Pending& p, Status first) {
  Status st = p.done ? p.done(first) : first;
  if (st == Status::Success && p.fill) st = p.fill(p.values);
  if (p.gpu_reply && st == Status::Success) {
    // A staging state's entry (no reply slot) woke its own sleepers in `done`.  A call the
    // GPU answers (or its raced event did first) is answered through the slot as well: a
    // store to a reply word can become visible late (a raced call's kernel store after its
    // event; a store after its stream reported idle, seen on the H100 a dozen calls later),
    // over a later call's answer in the word, and a client asleep then would never see its
    // own.  The slot's seq stays.
    if (p.slot != ipc::kNoReply) answers_.reply(p.slot, p.seq, st, p.values);
  } else if (p.gpu_reply && word_landed(p)) {
    // The GPU answered before a later fault made the event report it: the client may have
    // reused the slot since, so it gets the fault at its next call instead.
    answers_.fail_later(st);
  } else if (!p.answered && p.slot != ipc::kNoReply) {
    answers_.reply(p.slot, p.seq, st, p.values);
  } else if (st != Status::Success && p.slot == ipc::kNoReply) {
    answers_.fail_later(st);
  }
}

void Completions::reap_landed() {
  for (size_t i = 0; i < pending_.size();) {
    Pending& p = pending_[i];
    if (p.stream == nullptr || p.forced != Status::Success || !word_landed(p)) {
      ++i;
      continue;
    }
    if (p.urgent() && urgent_ > 0) --urgent_;
    finish(p, Status::Success);
    take(i);
  }
}

Status Completions::record_event(int device, BackendStream& stream, std::unique_ptr<BackendEvent>& out) {
  Status st = backend_.create_event(device, false, out);
  if (st == Status::Success) st = backend_.record(*out, stream);
  if (st != Status::Success) out.reset();
  return st;
}

void Completions::when_complete(StreamEntry& s, uint32_t slot, uint64_t seq, std::function<Status(Status)> done,
                           bool gpu_reply) {
  Pending p;
  p.slot = slot;
  p.seq = seq;
  p.done = std::move(done);
  // The stream answers the client: status first (the client reads it once it sees the
  // word), then the word after the work.  The worker watches the word, not an event (one
  // driver call fewer per waited copy, each taken under the context's lock that every
  // client's calls share): a sleeping client is woken once the word is there.  A seq whose
  // low half is 0 would look answered to a client that cleared the word: the worker answers it.
  // The stream write waits for every copy then in flight on the GPU: so where another such
  // call is on the device already (GpuReplies::Auto), a one-thread kernel stores the word
  // instead (Backend::store_word: it waits for this stream only), and an event recorded
  // before it lets the worker answer if it sees the work done first (Pending::race).
  // Measurements: doc/performance.md, "Crowded calls answered by a kernel".
  const bool crowded = gpu_reply && count_in_flight(s, p);
  if (gpu_reply && shared_.tuning.gpu_replies != GpuReplies::Off && slot != ipc::kNoReply &&
      static_cast<uint32_t>(seq) != 0) {
    std::unique_ptr<BackendEvent> first;  // none where it cannot be had: the stream write alone answers
    if (crowded) record_event(s.device, *s.stream, first);
    // Stored only where they differ (they mostly do not: the slot's last answer was this too):
    // the client polls this slot's line while it waits, and a store would take the line from
    // its core before the driver calls below.
    auto& r = view_.reply(slot);
    if (r.status != static_cast<int32_t>(Status::Success)) r.status = static_cast<int32_t>(Status::Success);
    for (uint64_t& v : r.value)
      if (v != 0) v = 0;
    auto& word = view_.reply_word(slot);
    const auto value = static_cast<uint32_t>(seq);
    p.gpu_reply = store_answer(s, word, value, crowded);
    if (p.gpu_reply) {
      p.word = &word;
      p.word_value = value;
      s.done_word = &word;
      s.done_value = value;
      p.stream = s.stream;
      p.since = std::chrono::steady_clock::now();
      if (first != nullptr) {
        p.race = true;
        p.events.push_back(std::move(first));
      }
      add(std::move(p));
      return;
    }
    if (first != nullptr) {  // no stream write: the event recorded already answers
      p.events.push_back(std::move(first));
      add(std::move(p));
      return;
    }
  }
  std::unique_ptr<BackendEvent> e;
  if (const Status st = record_event(s.device, *s.stream, e); st != Status::Success) {
    // Without an event, completion cannot be observed: answer with the error now.
    const Status r = p.done ? p.done(st) : st;
    if (slot != ipc::kNoReply) answers_.reply(slot, seq, r);
    observe_(s.device, st);  // last: a device fault releases the stream
    return;
  }
  p.events.push_back(std::move(e));
  add(std::move(p));
}

bool Completions::count_in_flight(const StreamEntry& s, Pending& p) {
  if (shared_.tuning.gpu_replies != GpuReplies::Auto || shared_.calls_in_flight == nullptr || s.device < 0 ||
      static_cast<size_t>(s.device) >= shared_.calls_in_flight->size())
    return false;
  auto& count = (*shared_.calls_in_flight)[static_cast<size_t>(s.device)];
  // This client's own answered calls may still be counted (their entries wait for the
  // throttled poll): a staged copy's chunks, one after the other, would look crowded.
  if (count.load(std::memory_order_relaxed) != 0 && !pending_.empty()) reap_landed();
  const bool crowded = count.load(std::memory_order_relaxed) != 0;
  p.in_flight = InFlight(count);
  return crowded;
}

bool Completions::store_answer(StreamEntry& s, std::atomic<uint32_t>& word, uint32_t value, bool crowded) {
  return (crowded && backend_.store_word(*s.stream, word, value) == Status::Success) ||
         backend_.write_value(*s.stream, word, value) == Status::Success;
}

bool Completions::gpu_marks_slot(StreamEntry& s, uint32_t index, ipc::StagingState state) {
  if (shared_.tuning.gpu_replies == GpuReplies::Off) return false;
  // No event race here (unlike a reply word, the state must not change behind the client:
  // once it saw Ready it frees the slot, once it saw Free it fills the slot again, and a late
  // store would undo that).
  Pending p;
  // Only a chunk the client waits for counts as a call on the GPU: a host-to-device chunk is
  // posted behind the one before while that one is still on the GPU, and would make it look
  // crowded (the slower kernel store) where nobody waits for either.
  const bool ready = state == ipc::StagingState::Ready;
  const bool crowded = ready && count_in_flight(s, p);
  auto& word = view_.staging_state(index);  // resolve_location checked the index
  const auto value = static_cast<uint32_t>(state);
  if (!store_answer(s, word, value, crowded)) return false;
  p.gpu_reply = true;
  p.word = &word;
  p.word_value = static_cast<uint32_t>(ipc::StagingState::InFlight);
  p.done_when_changed = true;
  p.stream = s.stream;
  p.since = std::chrono::steady_clock::now();
  p.done = [this, &word, value](Status st) {
    if (st != Status::Success) {
      // The store will not land (a fault): the slot comes back all the same, as
      // release_staging gives it back after a failed copy; the error is deferred.
      auto in_flight = static_cast<uint32_t>(ipc::StagingState::InFlight);
      word.compare_exchange_strong(in_flight, value, std::memory_order_acq_rel);
    }
    answers_.wake_staging_sleepers(word);  // the GPU's store woke nobody
    return st;
  };
  add(std::move(p));
  return true;
}

void Completions::when_drained(int device, uint32_t slot, uint64_t seq, std::function<Status(Status)> done) {
  Pending p;
  p.slot = slot;
  p.seq = seq;
  p.done = std::move(done);
  int fault_device = -1;
  Status fault = Status::Success;
  for (StreamEntry* s : streams_.on_device(device)) {
    const Status q = backend_.query(*s->stream);
    if (q == Status::Success) continue;
    if (ipc::is_sticky(q)) {  // the device faulted: nothing there will complete
      fault_device = s->device;
      fault = q;
      break;
    }
    std::unique_ptr<BackendEvent> e;
    Status r = record_event(s->device, *s->stream, e);
    if (r == Status::Success) {
      p.events.push_back(std::move(e));
      continue;
    }
    // No event to watch it by: the device faulted since the query (the stream's fault is the
    // answer; answering Success here let a synchronize behind a faulting kernel succeed), or
    // no event could be made (then the stream is waited for here, in this thread).
    if (!ipc::is_sticky(r)) r = backend_.synchronize(*s->stream);
    if (ipc::is_sticky(r)) {
      fault_device = s->device;
      fault = r;
      break;
    }
  }
  if (fault_device >= 0 || p.events.empty()) {
    const Status r = p.done ? p.done(fault) : fault;
    if (slot != ipc::kNoReply)
      answers_.reply(slot, seq, r);
    else if (r != Status::Success)
      answers_.fail_later(r);
    if (fault_device >= 0) observe_(fault_device, fault);
    return;
  }
  add(std::move(p));
}

bool Completions::uses_device(int device) const {
  for (const Pending& p : pending_) {
    if (p.stream != nullptr && p.stream->device() == device) return true;
    for (const auto& e : p.events)
      if (e->device() == device) return true;
  }
  return false;
}

void Completions::release_device(int device, Status st) {
  for (size_t i = 0; i < pending_.size();) {
    Pending& p = pending_[i];
    const size_t before = p.events.size();
    std::erase_if(p.events, [&](const auto& e) { return e->device() == device; });
    const bool word_here = p.stream != nullptr && p.stream->device() == device;
    if (word_here) p.stream.reset();
    if (p.events.size() == before && !word_here) {
      ++i;
      continue;
    }
    if (p.forced == Status::Success) p.forced = st;
    if (!p.events.empty() || p.stream != nullptr) {
      ++i;
      continue;
    }
    Pending gone = take(i);
    if (gone.done) gone.done(st);
    if (!gone.answered && gone.slot != ipc::kNoReply) answers_.reply(gone.slot, gone.seq, st);
  }
}

void Completions::answer_waiting(Status st) {
  for (auto& p : pending_) {
    if (p.slot != ipc::kNoReply && !p.answered) {
      answers_.reply(p.slot, p.seq, st);
      p.answered = true;
    }
  }
}

void Completions::finish_by(Clock::time_point deadline) {
  while (!pending_.empty() && Clock::now() < deadline) {
    poll();
    if (!pending_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (auto& p : pending_)
    if (p.done) p.done(Status::Unknown);
  pending_.clear();
}

}  // namespace funnel::server
