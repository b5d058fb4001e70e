// The sim backend's streams (host threads), events, partitions, and the stream memory
// writes and waits on words of host memory.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <utility>

#include "backend/sim/sim_backend.hpp"

namespace funnel::server::sim {

namespace {

constexpr auto kWaitValuePoll = std::chrono::microseconds(100);

}  // namespace

void SimBackend::priority_range(int, int& least, int& greatest) {
  least = kLeastPriority;
  greatest = kGreatestPriority;
}

// As the driver, the priority is clamped into priority_range.
Status SimBackend::create_stream(int device, int priority, const std::shared_ptr<BackendPartition>& partition,
                                 std::unique_ptr<BackendStream>& out) {
  if (Status st = usable(device); st != Status::Success) return st;
  if (partition && partition->device() != device) return Status::InvalidDevice;
  auto s = std::make_unique<SimStream>(device, std::clamp(priority, kGreatestPriority, kLeastPriority), dying_, partition);
  {
    std::lock_guard lk(streams_m_);
    streams_.push_back({s.get(), device, s->progress()});
  }
  s->on_destroy([this](SimStream* gone) {
    std::lock_guard lk(streams_m_);
    std::erase_if(streams_, [gone](const LiveStream& e) { return e.stream == gone; });
  });
  out = std::move(s);
  return Status::Success;
}

Status SimBackend::sm_groups(int device, SmGroups& out) {
  if (!valid(device)) return Status::InvalidDevice;
  out = SmGroups{kMultiprocessors, kSmGroupSize, kSmGroups};
  return Status::Success;
}

Status SimBackend::create_partition(int device, std::span<const uint32_t> groups,
                                    std::shared_ptr<BackendPartition>& out) {
  if (Status st = usable(device); st != Status::Success) return st;
  std::vector<uint32_t> g(groups.begin(), groups.end());
  std::sort(g.begin(), g.end());
  if (g.empty() || g.back() >= kSmGroups || std::adjacent_find(g.begin(), g.end()) != g.end())
    return Status::InvalidValue;
  const auto sms = static_cast<uint32_t>(g.size()) * kSmGroupSize;
  out = std::make_shared<SimPartition>(device, std::move(g), sms);
  return Status::Success;
}

Status SimBackend::create_event(int device, bool timing, std::unique_ptr<BackendEvent>& out) {
  events_created_.fetch_add(1, std::memory_order_relaxed);
  if (options_.before_create_event) options_.before_create_event();
  if (Status st = usable(device); st != Status::Success) return st;
  out = std::make_unique<SimEvent>(device, timing);
  return Status::Success;
}

Status SimBackend::record(BackendEvent& e, BackendStream& s) {
  if (Status st = usable(s.device()); st != Status::Success) return st;
  auto st = event(e).st_;
  uint64_t gen;
  {
    std::lock_guard lk(st->m);
    gen = ++st->recorded;
  }
  stream(s).enqueue([st, gen] {
    {
      std::lock_guard lk(st->m);
      st->completed = std::max(st->completed, gen);
      st->when = Clock::now();
    }
    st->cv.notify_all();
  });
  return Status::Success;
}

Status SimBackend::write_value(BackendStream& s, std::atomic<uint32_t>& word, uint32_t value) {
  stream_writes_.fetch_add(1, std::memory_order_relaxed);
  return store_late(s, word, value);
}

// The sim has no fence to wait behind: the kernel's store lands as the stream write does.
Status SimBackend::store_word(BackendStream& s, std::atomic<uint32_t>& word, uint32_t value) {
  if (!options_.kernel_stores) return Status::NotSupported;
  kernel_stores_.fetch_add(1, std::memory_order_relaxed);
  return store_late(s, word, value);
}

Status SimBackend::wait(BackendStream& s, BackendEvent& e) {
  if (Status st = usable(s.device()); st != Status::Success) return st;
  auto st = event(e).st_;
  uint64_t gen;
  {
    std::lock_guard lk(st->m);
    gen = st->recorded;  // the record this wait refers to, as cuStreamWaitEvent captures it
  }
  if (gen == 0) return Status::Success;
  stream(s).enqueue([st, gen, this] {
    std::unique_lock lk(st->m);
    while (st->completed < gen && !dying_.load()) st->cv.wait_for(lk, kSlice);
  });
  return Status::Success;
}

// Completion is read before the fault flag: work that completed after a fault was set
// (a later closure of the faulting stream) is never reported as a success.
Status SimBackend::query(BackendEvent& e) {
  event_queries_.fetch_add(1, std::memory_order_relaxed);
  auto& st = *event(e).st_;
  bool complete = false;
  {
    std::lock_guard lk(st.m);
    complete = st.completed >= st.recorded;
  }
  if (Status f = usable(event(e).device_); f != Status::Success) return f;
  return complete ? Status::Success : Status::NotReady;
}

Status SimBackend::query(BackendStream& s) {
  stream_queries_.fetch_add(1, std::memory_order_relaxed);
  const bool idle = stream(s).idle();
  if (Status st = usable(s.device()); st != Status::Success) return st;
  return idle ? Status::Success : Status::NotReady;
}

Status SimBackend::elapsed_ms(BackendEvent& start, BackendEvent& end, float& ms) {
  auto& a = event(start);
  auto& b = event(end);
  if (Status st = usable(a.device_); st != Status::Success) return st;
  if (!a.timing_ || !b.timing_) return Status::InvalidResourceHandle;
  Clock::time_point ta, tb;
  for (auto [ev, t] : {std::pair{&a, &ta}, std::pair{&b, &tb}}) {
    std::lock_guard lk(ev->st_->m);
    if (ev->st_->recorded == 0) return Status::InvalidResourceHandle;
    if (ev->st_->completed < ev->st_->recorded) return Status::NotReady;
    *t = ev->st_->when;
  }
  ms = std::chrono::duration<float, std::milli>(tb - ta).count();
  return Status::Success;
}

// A faulted device answers at once, as a poisoned CUDA context does.
Status SimBackend::synchronize(BackendStream& s) {
  if (Status st = usable(s.device()); st != Status::Success) return st;
  if (!stream(s).wait_idle()) return Status::Unknown;
  return usable(s.device());
}

Status SimBackend::wait_value(BackendStream& s, std::atomic<uint32_t>& word, uint32_t value) {
  if (Status f = usable(s.device()); f != Status::Success) return f;
  SimStream* st = &stream(s);
  st->enqueue([this, st, &word, value] {
    // As CU_STREAM_WAIT_VALUE_GEQ (backend/cuda/streams.cpp says why not EQ).
    while (static_cast<int32_t>(word.load(std::memory_order_acquire) - value) < 0 && !dying_.load() && !st->closing())
      std::this_thread::sleep_for(kWaitValuePoll);
  });
  return Status::Success;
}

// As the driver's: a write stores the value when the stream gets there; a wait holds the stream
// until the word meets the condition (GEQ compares as the driver does, wrapping; a 64-bit word
// likewise), or the backend or the stream is going away.
Status SimBackend::stream_mem_op(BackendStream& s, DeviceAddress address, ipc::StreamMemOp op, uint64_t value,
                                 uint32_t flags) {
  if (Status f = usable(s.device()); f != Status::Success) return f;
  if (address == 0) return Status::InvalidValue;
  SimStream* st = &stream(s);
  void* p = to_ptr(address);
  const bool wide = op == ipc::StreamMemOp::Write64 || op == ipc::StreamMemOp::Wait64;
  if (op == ipc::StreamMemOp::Write32 || op == ipc::StreamMemOp::Write64) {
    st->enqueue([p, value, wide] {
      if (wide)
        std::atomic_ref<uint64_t>(*static_cast<uint64_t*>(p)).store(value, std::memory_order_release);
      else
        std::atomic_ref<uint32_t>(*static_cast<uint32_t*>(p)).store(static_cast<uint32_t>(value), std::memory_order_release);
    });
    return Status::Success;
  }
  st->enqueue([this, st, p, value, wide, cond = flags & 0x3u] {
    auto met = [&] {
      const uint64_t w = wide ? std::atomic_ref<uint64_t>(*static_cast<uint64_t*>(p)).load(std::memory_order_acquire)
                              : std::atomic_ref<uint32_t>(*static_cast<uint32_t*>(p)).load(std::memory_order_acquire);
      switch (cond) {
        case ipc::kWaitValueGeq:
          return wide ? static_cast<int64_t>(w - value) >= 0 : static_cast<int32_t>(static_cast<uint32_t>(w - value)) >= 0;
        case ipc::kWaitValueEq: return w == value;
        case ipc::kWaitValueAnd: return (w & value) != 0;
        default: return ~(w | value) != 0 && (wide || static_cast<uint32_t>(~(w | value)) != 0);  // NOR
      }
    };
    while (!met() && !dying_.load() && !st->closing()) std::this_thread::sleep_for(kWaitValuePoll);
  });
  return Status::Success;
}

// write_value and store_word: stores `value` once the stream gets here (after
// stream_write_delay), unless the device faulted first.
Status SimBackend::store_late(BackendStream& s, std::atomic<uint32_t>& word, uint32_t value) {
  if (Status st = usable(s.device()); st != Status::Success) return st;
  // As on a GPU, a stream stops at a fault: what it would have stored after it never lands.
  stream(s).enqueue([this, &word, value, device = static_cast<size_t>(s.device())] {
    if (options_.stream_write_delay.count() > 0) std::this_thread::sleep_for(options_.stream_write_delay);
    auto land = [this, &word, value, device] {
      if (options_.before_store) options_.before_store(value);
      if (faulted_[device].load(std::memory_order_acquire)) return;
      word.store(options_.stream_write_value ? options_.stream_write_value(value) : value, std::memory_order_release);
    };
    if (options_.store_after_idle && options_.store_after_idle(value)) {
      // The stream goes on (and may report idle) before the store is seen.
      std::lock_guard lk(late_m_);
      late_threads_.emplace_back(land);
      return;
    }
    land();
  });
  return Status::Success;
}

}  // namespace funnel::server::sim
