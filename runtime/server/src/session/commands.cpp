// One function per opcode.  Each validates what it was given (everything came out
// of shared memory) and returns an error status without side effects, or does
// the work and answers (at once or through a Pending).
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <system_error>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "funnel/ipc/futex.hpp"
#include "funnel/ipc/protocol.hpp"
#include "session/session.hpp"
#include "session/validation.hpp"

namespace funnel::server {
namespace {

constexpr uint64_t kPage = 4096;

bool one_way(const ipc::CommandHeader& h) noexcept { return h.reply_slot == ipc::kNoReply; }

}  // namespace

Status Worker::check_device(int device) const {
  if (device < 0 || static_cast<uint32_t>(device) >= view_.header().device_count) return Status::InvalidDevice;
  return blocked_[static_cast<size_t>(device)] ? Status::DevicesUnavailable : Status::Success;
}

StreamEntry* Worker::find_stream(const ipc::CommandHeader& h, Status& st) {
  // A client stream exists only where the client was not blocked; the legacy stream is
  // created on first use, so it is checked here.
  if (h.stream == 0 && h.device >= 0 && static_cast<uint32_t>(h.device) < ipc::kMaxDevices &&
      blocked_[static_cast<size_t>(h.device)]) {
    st = Status::DevicesUnavailable;
    return nullptr;
  }
  return streams_.find(h.stream, h.device, st);
}

bool Worker::device_range_ok(uint64_t address, uint64_t extent) const {
  return containing(allocations_, address, extent) != allocations_.end() ||
         containing(symbols_, address, extent) != symbols_.end();
}

EventEntry* Worker::find_event(uint64_t id) {
  auto it = events_.find(id);
  return it == events_.end() ? nullptr : &it->second;
}

Status Worker::resolve_location(const ipc::Location& l, uint64_t pitch, uint64_t width, uint64_t height,
                                CopyEndpoint& out, bool& is_device) const {
  uint64_t extent = 0;
  if (Status st = region_extent(pitch, width, height, extent); st != Status::Success) return st;
  switch (l.space) {
    case ipc::MemSpace::Device: {
      if (!device_range_ok(l.address, extent)) return Status::InvalidValue;
      out = {true, l.address};
      is_device = true;
      return Status::Success;
    }
    case ipc::MemSpace::Staging: {
      const auto& hd = view_.header();
      if (l.index >= hd.staging_slots || !within(l.address, extent, hd.staging_slot_size)) return Status::InvalidValue;
      out = {false, reinterpret_cast<uint64_t>(view_.staging(l.index)) + l.address};
      is_device = false;
      return Status::Success;
    }
    case ipc::MemSpace::Pinned: {
      auto it = pinned_.find(l.id);
      if (it == pinned_.end() || !within(l.address, extent, it->second.size)) return Status::InvalidValue;
      out = {false, reinterpret_cast<uint64_t>(it->second.file.data()) + l.address};
      is_device = false;
      return Status::Success;
    }
  }
  return Status::InvalidValue;
}

Status Worker::record_event(int device, BackendStream& stream, std::unique_ptr<BackendEvent>& out) {
  Status st = backend_.create_event(device, false, out);
  if (st == Status::Success) st = backend_.record(*out, stream);
  if (st != Status::Success) out.reset();
  return st;
}

void Worker::when_complete(StreamEntry& s, uint32_t slot, uint64_t seq, std::function<Status(Status)> done,
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
  // The stream write waits for every copy then in flight on the GPU (measured on the H100:
  // of 8 copies of 512 KiB made together, each was answered near the end of all eight, 94 us
  // at the median against 59 us by cudaStreamSynchronize, doc/performance.md): so where
  // another such call is on the device already (GpuReplies::Auto), a one-thread kernel
  // stores the word instead (Backend::store_word: it waits for this stream only), and an
  // event recorded before it lets the worker answer if it sees the work done first
  // (Pending::race; without it, a client asleep in a crowd was woken late).
  const bool crowded = gpu_reply && count_in_flight(s, p);
  if (gpu_reply && shared_.gpu_replies != GpuReplies::Off && slot != ipc::kNoReply &&
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
      add_pending(std::move(p));
      return;
    }
    if (first != nullptr) {  // no stream write: the event recorded already answers
      p.events.push_back(std::move(first));
      add_pending(std::move(p));
      return;
    }
  }
  std::unique_ptr<BackendEvent> e;
  if (const Status st = record_event(s.device, *s.stream, e); st != Status::Success) {
    // Without an event, completion cannot be observed: answer with the error now.
    const Status r = p.done ? p.done(st) : st;
    if (slot != ipc::kNoReply) reply(slot, seq, r);
    observe(s.device, st);  // last: a device fault releases the stream
    return;
  }
  p.events.push_back(std::move(e));
  add_pending(std::move(p));
}

bool Worker::count_in_flight(const StreamEntry& s, Pending& p) {
  if (shared_.gpu_replies != GpuReplies::Auto || shared_.calls_in_flight == nullptr || s.device < 0 ||
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

bool Worker::store_answer(StreamEntry& s, std::atomic<uint32_t>& word, uint32_t value, bool crowded) {
  return (crowded && backend_.store_word(*s.stream, word, value) == Status::Success) ||
         backend_.write_value(*s.stream, word, value) == Status::Success;
}

bool Worker::gpu_marks_slot(StreamEntry& s, uint32_t index, ipc::StagingState state) {
  if (shared_.gpu_replies == GpuReplies::Off) return false;
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
    wake_staging_sleepers(word);  // the GPU's store woke nobody
    return st;
  };
  add_pending(std::move(p));
  return true;
}

void Worker::when_drained(int device, uint32_t slot, uint64_t seq, std::function<Status(Status)> done) {
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
    if (slot != ipc::kNoReply) reply(slot, seq, r);
    else if (r != Status::Success) {
      ipc::CommandHeader h{};
      h.reply_slot = ipc::kNoReply;
      fail(h, r);
    }
    if (fault_device >= 0) observe(fault_device, fault);
    return;
  }
  add_pending(std::move(p));
}

void Worker::free_allocation(uint64_t address, const DeviceAllocation& a) {
  const Status st = backend_.mem_free(a.device, address);
  if (st != Status::Success) spdlog::warn("client {}: freeing {:#x} failed: status {}", shared_.id, address, static_cast<int>(st));
  sub(counters_.device_memory_bytes, a.size);
  sub(counters_.allocations, 1);
}

void Worker::free_pinned(PinnedEntry& p) {
  backend_.host_unregister(p.file.data());
  p.file = ipc::MappedFile();
  if (::unlink(p.path.c_str()) != 0 && errno != ENOENT)
    spdlog::warn("client {}: cannot remove {}: {}", shared_.id, p.path.string(), std::strerror(errno));
  sub(counters_.pinned_bytes, p.size);
  sub(counters_.pinned_allocations, 1);
}

void Worker::remember_allocation(uint64_t address, const DeviceAllocation& a) {
  allocations_[address] = a;
  device_used_[static_cast<size_t>(a.device)] += a.size;
}

std::map<uint64_t, DeviceAllocation>::iterator Worker::forget_allocation(
    std::map<uint64_t, DeviceAllocation>::iterator it) {
  device_used_[static_cast<size_t>(it->second.device)] -= it->second.size;
  return allocations_.erase(it);
}

bool Worker::within_mem_limit(int device, uint64_t size) const noexcept {
  const uint64_t limit = shared_.device_mem_limit[static_cast<size_t>(device)];
  const uint64_t used = device_used_[static_cast<size_t>(device)];
  return limit == 0 || (used <= limit && size <= limit - used);
}

// ---- memory ----------------------------------------------------------------

Status Worker::mem_alloc(const ipc::CommandHeader& h, const ipc::MemAllocCmd& c, bool async) {
  if (one_way(h)) return Status::InvalidValue;
  if (Status st = check_device(h.device); st != Status::Success) return st;
  if (c.size == 0) {
    answer(h, {0});
    return Status::Success;
  }
  DeviceAddress addr = 0;
  int device = h.device;
  if (async) {
    if (c.address != 0) return Status::InvalidValue;  // placed allocations are not pooled
    Status st;
    StreamEntry* s = find_stream(h, st);
    if (s == nullptr) return st;
    // FUNNEL_DEVICE_MEM_LIMIT counts on the device of the stream.
    if (!within_mem_limit(s->device, c.size)) return Status::MemoryAllocation;
    if (st = streams_.before_work(*s); st != Status::Success) return st;
    if (st = backend_.mem_alloc_async(*s->stream, c.size, addr); st != Status::Success) return st;
    streams_.after_work(*s);
    device = s->device;
  } else {
    if (!within_mem_limit(h.device, c.size)) return Status::MemoryAllocation;
    Status st;
    if (c.address == 0) {
      st = backend_.mem_alloc(h.device, c.size, addr);
    } else {
      // A range the client reserved because our first address lay on its own memory.
      if (c.address % ipc::kPlacedGranule != 0 || c.address >= ipc::kPlacedAddressLimit ||
          c.size >= ipc::kPlacedAddressLimit)
        return Status::InvalidValue;
      st = backend_.mem_alloc_at(h.device, c.size, c.address);
      addr = c.address;
      spdlog::debug("client {}: {} bytes placed at {:#x} (the first address lay on the client's memory): status {}",
                    shared_.id, c.size, c.address, static_cast<int>(st));
    }
    if (st != Status::Success) return st;
  }
  remember_allocation(addr, {device, c.size});
  add(counters_.device_memory_bytes, c.size);
  raise_peak(counters_.device_memory_peak, counters_.device_memory_bytes.load(std::memory_order_relaxed));
  add(counters_.allocations, 1);
  answer(h, {addr});
  return Status::Success;
}

Status Worker::mem_free(const ipc::CommandHeader& h, const ipc::AddressCmd& c, bool async) {
  if (c.address == 0) {
    answer(h);
    return Status::Success;
  }
  auto it = allocations_.find(c.address);
  if (it == allocations_.end()) return Status::InvalidDevicePointer;
  const DeviceAllocation a = it->second;
  if (async) {
    Status st;
    StreamEntry* s = find_stream(h, st);
    if (s == nullptr) return st;
    if (st = streams_.before_work(*s); st != Status::Success) return st;
    if (st = backend_.mem_free_async(*s->stream, c.address); st != Status::Success) return st;
    streams_.after_work(*s);
    forget_allocation(it);
    sub(counters_.device_memory_bytes, a.size);
    sub(counters_.allocations, 1);
    answer(h);
    return Status::Success;
  }
  // Removed now so that later commands cannot use it; freed once earlier work is done.
  forget_allocation(it);
  const uint64_t address = c.address;
  // Every device's streams, not only a.device's: a copy or memset on another device's stream
  // may use this memory (peer access), and freeing it under that work would hand memory that
  // a DMA still uses to the next allocation (found by tests/fuzz).
  when_drained(-1, h.reply_slot, h.seq, [this, address, a](Status) {
    free_allocation(address, a);
    return Status::Success;
  });
  return Status::Success;
}

Status Worker::mem_get_info(const ipc::CommandHeader& h) {
  if (one_way(h)) return Status::InvalidValue;
  if (Status st = check_device(h.device); st != Status::Success) return st;
  uint64_t free_bytes = 0, total = 0;
  if (Status st = backend_.mem_get_info(h.device, free_bytes, total); st != Status::Success) return st;
  // Under FUNNEL_DEVICE_MEM_LIMIT the client sees a GPU of the limit's size, of which
  // the rest of its limit is free (never more than the GPU has free).
  if (const uint64_t limit = shared_.device_mem_limit[static_cast<size_t>(h.device)]; limit != 0) {
    const uint64_t used = device_used_[static_cast<size_t>(h.device)];
    free_bytes = std::min(free_bytes, used < limit ? limit - used : 0);
    total = std::min(total, limit);
  }
  answer(h, {free_bytes, total});
  return Status::Success;
}

Status Worker::pinned_alloc(const ipc::CommandHeader& h, const ipc::PinnedAllocCmd& c) {
  if (one_way(h)) return Status::InvalidValue;
  if (c.size == 0) {
    answer(h, {0, 0});
    return Status::Success;
  }
  if (c.size > (uint64_t{1} << 46)) return Status::MemoryAllocation;
  const uint64_t size = (c.size + kPage - 1) / kPage * kPage;
  const uint64_t id = next_pinned_id_++;
  PinnedEntry p;
  p.path = shared_.run_dir / fmt::format("{}{}.{}", ipc::kPinnedFilePrefix, shared_.id, id);
  p.size = size;
  try {
    p.file = ipc::MappedFile::create(p.path, size);
  } catch (const std::system_error& e) {
    spdlog::error("client {}: pinned allocation of {} bytes failed: {}", shared_.id, size, e.what());
    return Status::MemoryAllocation;
  }
  if (Status st = backend_.host_register(p.file.data(), size); st != Status::Success) {
    p.file = ipc::MappedFile();
    ::unlink(p.path.c_str());
    return st;
  }
  pinned_.emplace(id, std::move(p));
  add(counters_.pinned_bytes, size);
  add(counters_.pinned_allocations, 1);
  answer(h, {id, size});
  return Status::Success;
}

Status Worker::pinned_free(const ipc::CommandHeader& h, const ipc::PinnedFreeCmd& c) {
  auto it = pinned_.find(c.id);
  if (it == pinned_.end()) return Status::InvalidValue;
  auto entry = std::make_shared<PinnedEntry>(std::move(it->second));
  pinned_.erase(it);
  when_drained(-1, h.reply_slot, h.seq, [this, entry](Status) {
    free_pinned(*entry);
    return Status::Success;
  });
  return Status::Success;
}

// ---- copies -----------------------------------------------------------------

void Worker::release_staging(const ipc::CopyCmd& c) {
  // A staging slot handed to the server must come back even when its copy fails,
  // or the client would wait for it forever.
  const auto& hd = view_.header();
  auto set = [&](const ipc::Location& l, ipc::StagingState s) {
    if (l.space != ipc::MemSpace::Staging || l.index >= hd.staging_slots) return;
    auto& w = view_.staging_state(l.index);
    w.store(static_cast<uint32_t>(s), std::memory_order_seq_cst);
    wake_staging_sleepers(w);
  };
  set(c.src, ipc::StagingState::Free);
  set(c.dst, ipc::StagingState::Ready);
}

Status Worker::copy(const ipc::CommandHeader& h, const ipc::CopyCmd& c) {
  if (!pending_.empty()) {  // a staging slot in use again: its last chunk was seen (gpu_marks_slot)
    const uint32_t slots = view_.header().staging_slots;
    if (c.src.space == ipc::MemSpace::Staging && c.src.index < slots) settle_reused(view_.staging_state(c.src.index));
    if (c.dst.space == ipc::MemSpace::Staging && c.dst.index < slots) settle_reused(view_.staging_state(c.dst.index));
  }
  CopyDesc d{};
  bool dst_dev = false, src_dev = false;
  Status st = resolve_location(c.dst, c.dst_pitch, c.width, c.height, d.dst, dst_dev);
  if (st == Status::Success) st = resolve_location(c.src, c.src_pitch, c.width, c.height, d.src, src_dev);
  StreamEntry* s = nullptr;
  if (st == Status::Success) s = find_stream(h, st);
  if (st == Status::Success && c.width != 0 && c.height != 0) {
    d.width = c.width;
    d.height = c.height;
    d.dst_pitch = c.height > 1 ? c.dst_pitch : c.width;
    d.src_pitch = c.height > 1 ? c.src_pitch : c.width;
    st = streams_.before_work(*s);
    if (st == Status::Success) st = backend_.copy(*s->stream, d);
    if (st == Status::Success) streams_.after_work(*s);
  }
  if (st != Status::Success) {
    release_staging(c);
    return st;
  }
  const uint64_t bytes = c.width * c.height;
  if (dst_dev && !src_dev) bump(counters_.bytes_h2d, bytes);
  if (src_dev && !dst_dev) bump(counters_.bytes_d2h, bytes);
  const bool staging = c.src.space == ipc::MemSpace::Staging || c.dst.space == ipc::MemSpace::Staging;
  if (!staging && one_way(h)) return Status::Success;
  // A staged chunk: the GPU marks the slot itself where it can (Ready to copy out, or Free to
  // fill again), so the client goes on without waiting for this thread.
  if (staging && one_way(h)) {
    if (c.dst.space == ipc::MemSpace::Staging && src_dev && gpu_marks_slot(*s, c.dst.index, ipc::StagingState::Ready))
      return Status::Success;
    if (c.src.space == ipc::MemSpace::Staging && dst_dev && gpu_marks_slot(*s, c.src.index, ipc::StagingState::Free))
      return Status::Success;
  }
  when_complete(
      *s, h.reply_slot, h.seq,
      [this, c](Status done) {
        release_staging(c);
        return done;
      },
      !staging);
  return Status::Success;
}

Status Worker::memset(const ipc::CommandHeader& h, const ipc::MemsetCmd& c) {
  uint64_t extent = 0;
  if (Status st = region_extent(c.pitch, c.width, c.height, extent); st != Status::Success) return st;
  if (extent == 0) {
    answer(h);
    return Status::Success;
  }
  if (!device_range_ok(c.address, extent)) return Status::InvalidValue;
  Status st;
  StreamEntry* s = find_stream(h, st);
  if (s == nullptr) return st;
  if (st = streams_.before_work(*s); st != Status::Success) return st;
  const uint64_t pitch = c.height > 1 ? c.pitch : c.width;
  if (st = backend_.memset(*s->stream, c.address, pitch, c.width, c.height, static_cast<uint8_t>(c.value & 0xff));
      st != Status::Success)
    return st;
  streams_.after_work(*s);
  answer(h);
  return Status::Success;
}

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
  answer(h);
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
  when_complete(tmp, ipc::kNoReply, 0, [gone](Status) mutable {
    gone.reset();
    return Status::Success;
  });
  answer(h);
  return Status::Success;
}

Status Worker::stream_synchronize(const ipc::CommandHeader& h) {
  if (one_way(h)) return Status::InvalidValue;
  Status st;
  StreamEntry* s = find_stream(h, st);
  if (s == nullptr) return st;
  // Work queued on it less than 20 us ago is most likely still running: no need to ask the
  // driver (a cuStreamQuery, ~1 us, before the stream write that answers; without skipping it
  // launch + StreamSynchronize stayed at 1.11x native).
  const bool just_queued = StreamTable::queued_within(*s, std::chrono::microseconds(20));
  if (!just_queued && stream_state(*s) == Status::Success) {
    launches_since_sync_ = 0;
    streams_.close_busy(*s);
    answer(h);
    return Status::Success;
  }
  // Answered by the GPU (a stream write after the work), as a synchronous copy is: measured on
  // the H100 once answered work was polled less often (PollThrottle), memcpyAsync +
  // StreamSynchronize took 1.01-1.05x native time at 64 KiB-1 MiB against 1.08-1.17x answered
  // by the worker, launch + StreamSynchronize 1.00x against 1.11x; at 4 KiB h2d 1.21x against
  // 1.17x (doc/performance.md, "Polling answered work less often").
  when_complete(*s, h.reply_slot, h.seq, [this, h](Status done) {
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
  reply(h.reply_slot, h.seq, st);
  return Status::Success;
}

Status Worker::stream_wait_event(const ipc::CommandHeader& h, const ipc::EventCmd& c) {
  EventEntry* e = find_event(c.event_id);
  if (e == nullptr) return Status::InvalidResourceHandle;
  Status st;
  StreamEntry* s = find_stream(h, st);
  if (s == nullptr) return st;
  if (e->recorded) {
    if (st = streams_.before_work(*s); st != Status::Success) return st;
    if (st = backend_.wait(*s->stream, *e->event); st != Status::Success) return st;
    streams_.after_work(*s);
  }
  answer(h);
  return Status::Success;
}

Status Worker::event_create(const ipc::CommandHeader& h, const ipc::EventCreateCmd& c) {
  if (Status st = check_device(h.device); st != Status::Success) return st;
  if (c.event_id == 0 || events_.count(c.event_id) != 0) return Status::InvalidResourceHandle;
  if ((c.flags & ~(ipc::kEventBlockingSync | ipc::kEventDisableTiming | 0x4u)) != 0) return Status::InvalidValue;
  const bool timing = (c.flags & ipc::kEventDisableTiming) == 0;
  std::unique_ptr<BackendEvent> e;
  if (Status st = backend_.create_event(h.device, timing, e); st != Status::Success) return st;
  events_.emplace(c.event_id, EventEntry{std::move(e), h.device, timing});
  add(counters_.events, 1);
  answer(h);
  return Status::Success;
}

Status Worker::event_destroy(const ipc::CommandHeader& h, const ipc::EventCmd& c) {
  // Pending waits hold their own reference, so the event may go at once.
  if (events_.erase(c.event_id) == 0) return Status::InvalidResourceHandle;
  sub(counters_.events, 1);
  answer(h);
  return Status::Success;
}

Status Worker::event_record(const ipc::CommandHeader& h, const ipc::EventRecordCmd& c) {
  EventEntry* e = find_event(c.event_id);
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
  answer(h);
  return Status::Success;
}

Status Worker::event_synchronize(const ipc::CommandHeader& h, const ipc::EventCmd& c) {
  if (one_way(h)) return Status::InvalidValue;
  EventEntry* e = find_event(c.event_id);
  if (e == nullptr) return Status::InvalidResourceHandle;
  if (!e->recorded || backend_.query(*e->event) == Status::Success) {
    answer(h);
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
  add_pending(std::move(p));
  return Status::Success;
}

Status Worker::event_query(const ipc::CommandHeader& h, const ipc::EventCmd& c) {
  if (one_way(h)) return Status::InvalidValue;
  EventEntry* e = find_event(c.event_id);
  if (e == nullptr) return Status::InvalidResourceHandle;
  const Status st = e->recorded ? backend_.query(*e->event) : Status::Success;
  if (st != Status::Success && st != Status::NotReady) return st;
  reply(h.reply_slot, h.seq, st);
  return Status::Success;
}

Status Worker::event_elapsed(const ipc::CommandHeader& h, const ipc::EventPairCmd& c) {
  if (one_way(h)) return Status::InvalidValue;
  EventEntry* a = find_event(c.start_id);
  EventEntry* b = find_event(c.end_id);
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
    add_pending(std::move(p));
    return Status::Success;
  }
  if (st != Status::Success) return st;
  answer(h, {std::bit_cast<uint32_t>(ms)});
  return Status::Success;
}

// ---- device -----------------------------------------------------------------

Status Worker::device_synchronize(const ipc::CommandHeader& h) {
  if (one_way(h)) return Status::InvalidValue;
  if (Status st = check_device(h.device); st != Status::Success) return st;
  when_drained(h.device, h.reply_slot, h.seq, [this, device = h.device](Status done) {
    if (done == Status::Success) launches_since_sync_ = 0;
    streams_.sweep_busy(device, false);
    return done;
  });
  return Status::Success;
}

Status Worker::device_reset(const ipc::CommandHeader& h) {
  if (Status st = check_device(h.device); st != Status::Success) return st;
  std::vector<std::pair<uint64_t, DeviceAllocation>> gone;
  for (auto it = allocations_.begin(); it != allocations_.end();) {
    if (it->second.device == h.device) {
      gone.emplace_back(*it);
      it = forget_allocation(it);
    } else {
      ++it;
    }
  }
  for (auto it = events_.begin(); it != events_.end();) {
    if (it->second.device == h.device) {
      it = events_.erase(it);
      sub(counters_.events, 1);
    } else {
      ++it;
    }
  }
  // Collected before the streams are dropped, so the drain covers their work too; every
  // device's, as for MemFree: another device's stream may use this device's memory.
  when_drained(-1, h.reply_slot, h.seq, [this, gone](Status) {
    for (const auto& [addr, a] : gone) free_allocation(addr, a);
    return Status::Success;
  });
  auto dropped = streams_.drop_device(h.device);
  sub(counters_.streams, dropped.size());
  if (!dropped.empty()) {
    Pending p;
    for (auto& s : dropped) {
      std::unique_ptr<BackendEvent> e;
      if (record_event(s->device(), *s, e) == Status::Success) p.events.push_back(std::move(e));
    }
    p.done = [dropped](Status st) mutable {
      dropped.clear();
      return st;
    };
    add_pending(std::move(p));
  }
  return Status::Success;
}

Status Worker::limit(const ipc::CommandHeader& h, const ipc::LimitCmd& c, bool set) {
  if (one_way(h) && !set) return Status::InvalidValue;
  if (Status st = check_device(h.device); st != Status::Success) return st;
  const auto l = static_cast<Limit>(c.limit);
  if (set) {
    if (Status st = backend_.set_limit(h.device, l, c.value); st != Status::Success) return st;
    answer(h);
    return Status::Success;
  }
  uint64_t v = 0;
  if (Status st = backend_.get_limit(h.device, l, v); st != Status::Success) return st;
  answer(h, {v});
  return Status::Success;
}

}  // namespace funnel::server
