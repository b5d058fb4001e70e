// The stream, event and device commands.  As every handler, each validates what it was
// given (everything came out of shared memory) and returns an error status without side
// effects, or does the work and answers (at once or through Completions).
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <system_error>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "funnel/ipc/futex.hpp"
#include "funnel/ipc/protocol.hpp"
#include "session/ipc_registry.hpp"
#include "session/worker.hpp"
#include "session/validation.hpp"

namespace funnel::server {
namespace {

constexpr uint64_t kPage = 4096;

}  // namespace

// ---- streams and events ----------------------------------------------------

Status Worker::stream_create(const ipc::CommandHeader& h, const ipc::StreamCreateCmd& c) {
  if (Status st = check_device(h.device); st != Status::Success) return st;
  if (const uint32_t most = backend_.max_streams_per_client();
      most != 0 && counters_.streams.load(std::memory_order_relaxed) >= most) {
    if (!stream_limit_logged_)
      spdlog::warn("client {} (pid {}): refused a stream: the {} backend serves at most {} streams per client",
                   shared_.id, shared_.pid, backend_.name(), most);
    stream_limit_logged_ = true;
    return Status::MemoryAllocation;
  }
  if (Status st = streams_.create(c.stream_id, h.device, c.flags, c.priority); st != Status::Success) return st;
  add(counters_.streams, 1);
  answers_.answer(h);
  return Status::Success;
}

Status Worker::stream_destroy(const ipc::CommandHeader& h) {
  std::shared_ptr<BackendStream> gone;
  if (h.stream == 0) return Status::InvalidResourceHandle;
  if (Status st = streams_.destroy(h.stream, gone); st != Status::Success) return st;
  sub(counters_.streams, 1);
  StreamEntry tmp;
  tmp.stream = gone;
  tmp.device = gone->device();
  // The stream object lives until its queued work completed.
  completions_.when_complete(tmp, ipc::kNoReply, 0, [gone](Status) mutable {
    gone.reset();
    return Status::Success;
  });
  answers_.answer(h);
  return Status::Success;
}

Status Worker::stream_synchronize(const ipc::CommandHeader& h) {
  if (one_way(h)) return Status::InvalidValue;
  Status st;
  StreamEntry* s = find_stream(h, st);
  if (s == nullptr) return st;
  // Work queued on it less than 20 us ago is most likely still running: no need to ask the
  // driver (a cuStreamQuery before the stream write that answers; doc/performance.md, "The
  // worker's constants").
  const bool just_queued = StreamTable::queued_within(*s, std::chrono::microseconds(20));
  if (!just_queued && stream_state(*s) == Status::Success) {
    launches_since_sync_ = 0;
    streams_.close_busy(*s);
    answers_.answer(h);
    return Status::Success;
  }
  // Answered by the GPU (a stream write after the work), as a synchronous copy is
  // (doc/performance.md, "Polling answered work less often").
  completions_.when_complete(*s, h.reply_slot, h.seq, [this, h](Status done) {
    if (done == Status::Success) launches_since_sync_ = 0;
    // The stream drained (work another thread queued meanwhile ends its span with it).
    Status found;
    if (StreamEntry* e = find_stream(h, found); e != nullptr) streams_.close_busy(*e);
    return done;
  },
                true);
  return Status::Success;
}

Status Worker::stream_state(StreamEntry& s) {
  const Status st = backend_.query(*s.stream);
  // The client saw the word its last work stores (cudaEventSynchronize on the stream's last
  // event, a GPU-answered copy): that work is done, and so is the stream, whatever the driver
  // says in the microseconds before it marks the stream idle (seen on the H100 under load:
  // cudaStreamQuery NotReady right after cudaEventSynchronize of the stream's last event).
  if (st == Status::NotReady && s.done_word != nullptr &&
      ipc::generation_reached(s.done_word->load(std::memory_order_acquire), s.done_value))
    return Status::Success;
  return st;
}

Status Worker::stream_query(const ipc::CommandHeader& h) {
  if (one_way(h)) return Status::InvalidValue;
  Status st;
  StreamEntry* s = find_stream(h, st);
  if (s == nullptr) return st;
  st = stream_state(*s);
  if (st != Status::Success && st != Status::NotReady) return st;
  answers_.reply(h.reply_slot, h.seq, st);
  return Status::Success;
}

Status Worker::stream_wait_event(const ipc::CommandHeader& h, const ipc::EventCmd& c) {
  EventEntry* e = res_.find_event(c.event_id);
  if (e == nullptr) return Status::InvalidResourceHandle;
  Status st;
  StreamEntry* s = find_stream(h, st);
  if (s == nullptr) return st;
  if (e->recorded) {
    if (st = streams_.before_work(*s); st != Status::Success) return st;
    if (st = backend_.wait(*s->stream, *e->event); st != Status::Success) return st;
    streams_.after_work(*s);
  }
  answers_.answer(h);
  return Status::Success;
}

Status Worker::stream_mem_op(const ipc::CommandHeader& h, const ipc::StreamMemOpCmd& c) {
  using ipc::StreamMemOp;
  const auto op = static_cast<StreamMemOp>(c.op);
  const bool wait = op == StreamMemOp::Wait32 || op == StreamMemOp::Wait64;
  const bool wide = op == StreamMemOp::Write64 || op == StreamMemOp::Wait64;
  if (!wait && op != StreamMemOp::Write32 && op != StreamMemOp::Write64) return Status::InvalidValue;
  const uint32_t allowed = wait ? (0x3u | ipc::kWaitValueFlush) : ipc::kWriteValueNoMemoryBarrier;
  if ((c.flags & ~allowed) != 0) return Status::InvalidValue;
  const uint64_t bytes = wide ? 8 : 4;
  if (c.address % bytes != 0 || !res_.device_range_ok(c.address, bytes)) return Status::InvalidValue;
  if (!wide && c.value > UINT32_MAX) return Status::InvalidValue;
  // A wait that nothing can meet would hold the stream for ever.
  if (wait && !ipc::wait_satisfiable(c.flags, c.value, wide)) return Status::InvalidValue;
  Status st;
  StreamEntry* s = find_stream(h, st);
  if (s == nullptr) return st;
  if (st = streams_.before_work(*s); st != Status::Success) return st;
  auto enqueue = [&] { return backend_.stream_mem_op(*s->stream, c.address, op, c.value, c.flags); };
  // A wait is remembered, so that it is met if the client goes (stream_waits.hpp); its memory
  // stays the client's until its streams drained (free_when_drained), so the work behind it
  // never touches memory another client got meanwhile.
  st = wait ? waits_.add(*s->stream, c.address, wide, c.flags, c.value, enqueue) : enqueue();
  if (st != Status::Success) return st;
  streams_.after_work(*s);
  answers_.answer(h);
  return Status::Success;
}

Status Worker::event_create(const ipc::CommandHeader& h, const ipc::EventCreateCmd& c) {
  if (Status st = check_device(h.device); st != Status::Success) return st;
  if (c.event_id == 0 || res_.events.count(c.event_id) != 0) return Status::InvalidResourceHandle;
  if ((c.flags & ~(ipc::kEventBlockingSync | ipc::kEventDisableTiming | 0x4u)) != 0) return Status::InvalidValue;
  const bool timing = (c.flags & ipc::kEventDisableTiming) == 0;
  std::unique_ptr<BackendEvent> e;
  if (Status st = backend_.create_event(h.device, timing, e); st != Status::Success) return st;
  EventEntry entry{std::move(e), h.device, timing};
  entry.interprocess = (c.flags & ipc::kEventInterprocess) != 0;
  res_.events.emplace(c.event_id, std::move(entry));
  add(counters_.events, 1);
  answers_.answer(h);
  return Status::Success;
}

Status Worker::event_destroy(const ipc::CommandHeader& h, const ipc::EventCmd& c) {
  // Pending waits hold their own reference, so the event may go at once.
  auto it = res_.events.find(c.event_id);
  if (it == res_.events.end()) return Status::InvalidResourceHandle;
  if (it->second.interprocess && !it->second.imported && shared_.ipc != nullptr) shared_.ipc->forget_event(it->second.event);
  res_.events.erase(it);
  sub(counters_.events, 1);
  answers_.answer(h);
  return Status::Success;
}

Status Worker::event_record(const ipc::CommandHeader& h, const ipc::EventRecordCmd& c) {
  EventEntry* e = res_.find_event(c.event_id);
  if (e == nullptr) return Status::InvalidResourceHandle;
  if (c.state_slot != ipc::kNoEventSlot && c.state_slot >= view_.header().event_slots) return Status::InvalidValue;
  Status st;
  StreamEntry* s = find_stream(h, st);
  if (s == nullptr) return st;
  if (s->device != e->device) return Status::InvalidResourceHandle;
  if (st = streams_.before_work(*s); st != Status::Success) return st;
  // The state word is stored first and the event recorded last, so an event that completed
  // (cudaEventSynchronize answered here) leaves nothing behind it in the stream: a
  // StreamQuery right after finds the stream idle, as natively.  Recorded the other way
  // round, the store was still queued behind the completed event (the H100 soak: NotReady
  // about once in 2500 runs).  A client that sees the word first may ask for the elapsed
  // time a few microseconds before the event is recorded: event_elapsed waits for it.
  bool stored = false;
  if (c.state_slot != ipc::kNoEventSlot) {
    // The client then sees the completion in its own memory.  Where the device cannot
    // write, the word stays behind and the client asks the server (EventQuery/Synchronize).
    st = backend_.write_value(*s->stream, view_.event_state(c.state_slot), c.generation);
    if (st != Status::Success && st != Status::NotSupported) return st;
    stored = st == Status::Success;
  }
  if (st = backend_.record(*e->event, *s->stream); st != Status::Success) return st;
  streams_.after_work(*s);
  e->word = stored ? &view_.event_state(c.state_slot) : nullptr;
  e->generation = c.generation;
  if (stored) {
    s->done_word = e->word;
    s->done_value = c.generation;
  }
  e->recorded = true;
  answers_.answer(h);
  return Status::Success;
}

Status Worker::event_synchronize(const ipc::CommandHeader& h, const ipc::EventCmd& c) {
  if (one_way(h)) return Status::InvalidValue;
  EventEntry* e = res_.find_event(c.event_id);
  if (e == nullptr) return Status::InvalidResourceHandle;
  if (!e->recorded || backend_.query(*e->event) == Status::Success) {
    answers_.answer(h);
    return Status::Success;
  }
  Pending p;
  p.done = [this](Status done) {
    if (done == Status::Success) launches_since_sync_ = 0;
    return done;
  };
  p.slot = h.reply_slot;
  p.seq = h.seq;
  p.events.push_back(e->event);
  completions_.add(std::move(p));
  return Status::Success;
}

Status Worker::event_query(const ipc::CommandHeader& h, const ipc::EventCmd& c) {
  if (one_way(h)) return Status::InvalidValue;
  EventEntry* e = res_.find_event(c.event_id);
  if (e == nullptr) return Status::InvalidResourceHandle;
  const Status st = e->recorded ? backend_.query(*e->event) : Status::Success;
  if (st != Status::Success && st != Status::NotReady) return st;
  answers_.reply(h.reply_slot, h.seq, st);
  return Status::Success;
}

Status Worker::event_elapsed(const ipc::CommandHeader& h, const ipc::EventPairCmd& c) {
  if (one_way(h)) return Status::InvalidValue;
  EventEntry* a = res_.find_event(c.start_id);
  EventEntry* b = res_.find_event(c.end_id);
  if (a == nullptr || b == nullptr || !a->timing || !b->timing || !a->recorded || !b->recorded)
    return Status::InvalidResourceHandle;
  float ms = 0;
  const Status st = backend_.elapsed_ms(*a->event, *b->event, ms);
  if (st == Status::NotReady && a->seen_complete() && b->seen_complete()) {
    // The client saw both state words, stored just before the events themselves
    // (event_record): to it they are complete, so it gets the time once they are.
    Pending p;
    p.slot = h.reply_slot;
    p.seq = h.seq;
    p.events = {a->event, b->event};
    p.fill = [this, start = a->event, end = b->event](std::array<uint64_t, 5>& values) {
      float waited = 0;
      const Status done = backend_.elapsed_ms(*start, *end, waited);
      values[0] = std::bit_cast<uint32_t>(waited);
      return done;
    };
    completions_.add(std::move(p));
    return Status::Success;
  }
  if (st != Status::Success) return st;
  answers_.answer(h, {std::bit_cast<uint32_t>(ms)});
  return Status::Success;
}

// ---- device -----------------------------------------------------------------

Status Worker::device_synchronize(const ipc::CommandHeader& h) {
  if (one_way(h)) return Status::InvalidValue;
  if (Status st = check_device(h.device); st != Status::Success) return st;
  completions_.when_drained(h.device, h.reply_slot, h.seq, [this, device = h.device](Status done) {
    if (done == Status::Success) launches_since_sync_ = 0;
    streams_.sweep_busy(device, false);
    return done;
  });
  return Status::Success;
}

Status Worker::device_reset(const ipc::CommandHeader& h) {
  if (Status st = check_device(h.device); st != Status::Success) return st;
  std::vector<std::pair<uint64_t, DeviceAllocation>> gone;
  for (auto it = res_.allocations.begin(); it != res_.allocations.end();) {
    if (it->second.device == h.device) {
      gone.emplace_back(*it);
      it = res_.forget_allocation(it);
    } else {
      ++it;
    }
  }
  for (auto it = res_.events.begin(); it != res_.events.end();) {
    if (it->second.device == h.device) {
      it = res_.events.erase(it);
      sub(counters_.events, 1);
    } else {
      ++it;
    }
  }
  // Collected before the streams are dropped, so the drain covers their work too; every
  // device's, as for MemFree: another device's stream may use this device's memory.
  completions_.when_drained(-1, h.reply_slot, h.seq, [this, gone](Status) {
    waits_.drain();  // a released wait's word may lie in it (stream_waits.hpp)
    for (const auto& [addr, a] : gone) res_.free_allocation(addr, a);
    return Status::Success;
  });
  auto dropped = streams_.drop_device(h.device);
  sub(counters_.streams, dropped.size());
  if (!dropped.empty()) {
    Pending p;
    for (auto& s : dropped) {
      std::unique_ptr<BackendEvent> e;
      if (completions_.record_event(s->device(), *s, e) == Status::Success) p.events.push_back(std::move(e));
    }
    p.done = [dropped](Status st) mutable {
      dropped.clear();
      return st;
    };
    completions_.add(std::move(p));
  }
  return Status::Success;
}

Status Worker::limit(const ipc::CommandHeader& h, const ipc::LimitCmd& c, bool set) {
  if (one_way(h) && !set) return Status::InvalidValue;
  if (Status st = check_device(h.device); st != Status::Success) return st;
  const auto l = static_cast<Limit>(c.limit);
  if (set) {
    if (Status st = backend_.set_limit(h.device, l, c.value); st != Status::Success) return st;
    answers_.answer(h);
    return Status::Success;
  }
  uint64_t v = 0;
  if (Status st = backend_.get_limit(h.device, l, v); st != Status::Success) return st;
  answers_.answer(h, {v});
  return Status::Success;
}

// cudaProfilerStart/Stop: the device context's profiling is on while any client's range is open
// (Backend::profiling counts them); a second start or a stop without a start changes nothing, as
// under CUDA.
Status Worker::reset_persisting_l2(const ipc::CommandHeader& h) {
  if (Status st = check_device(h.device); st != Status::Success) return st;
  if (Status st = backend_.reset_persisting_l2(h.device); st != Status::Success) return st;
  answers_.answer(h);
  return Status::Success;
}

Status Worker::stream_attribute(const ipc::CommandHeader& h, const ipc::StreamAttributeCmd& c) {
  if (c.hit_prop > 2 || c.miss_prop > 2 || c.reserved != 0 || !(c.hit_ratio >= 0.f && c.hit_ratio <= 1.f))
    return Status::InvalidValue;
  if (c.bytes != 0 && !res_.device_range_ok(c.base, c.bytes)) return Status::InvalidValue;
  Status st;
  StreamEntry* s = find_stream(h, st);
  if (s == nullptr) return st;
  if (st = backend_.stream_access_policy(*s->stream, c.bytes != 0 ? c.base : 0, c.bytes, c.hit_ratio, c.hit_prop,
                                         c.miss_prop);
      st != Status::Success)
    return st;
  answers_.answer(h);
  return Status::Success;
}

Status Worker::profiler(const ipc::CommandHeader& h, const ipc::ProfilerCmd& c) {
  if (Status st = check_device(h.device); st != Status::Success) return st;
  if (c.start > 1 || c.reserved != 0) return Status::InvalidValue;
  bool& open = profiling_[static_cast<size_t>(h.device)];
  if (open != (c.start == 1)) {
    if (Status st = backend_.profiling(h.device, c.start == 1); st != Status::Success) return st;
    open = c.start == 1;
  }
  answers_.answer(h);
  return Status::Success;
}

void Worker::stop_profiling(int device) noexcept {
  for (size_t d = 0; d < profiling_.size(); ++d) {
    if (!profiling_[d] || (device >= 0 && static_cast<size_t>(device) != d)) continue;
    (void)backend_.profiling(static_cast<int>(d), false);
    profiling_[d] = false;
  }
}

}  // namespace funnel::server
