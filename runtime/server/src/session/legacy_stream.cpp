#include "session/legacy_stream.hpp"

#include <chrono>

#include <spdlog/spdlog.h>

#include "session/counter_ops.hpp"
#include "funnel/ipc/commands.hpp"
#include "placement/sm_partitions.hpp"

namespace funnel::server {

Status StreamTable::make_stream(int device, int priority, std::unique_ptr<BackendStream>& out) {
  if (device < 0 || static_cast<size_t>(device) >= placement_.partition.size()) return Status::InvalidDevice;
  auto& part = placement_.partition[static_cast<size_t>(device)];
  if (!part && placement_.share_bp != 0 && placement_.partitions != nullptr) {
    try {
      part = placement_.partitions->acquire(device, placement_.share_bp, placement_.placement);
      if (part)
        spdlog::info("client stream on GPU {}: partition of {} SMs ({} placement)", device, part->sm_count(),
                     placement_.placement == ipc::GpuPlacement::Disjoint ? "disjoint" : "shared");
    } catch (const PartitionUnavailable& e) {
      spdlog::error("{}", e.what());
      return Status::DevicesUnavailable;
    } catch (const std::exception& e) {
      spdlog::error("{}", e.what());
      return Status::Unknown;
    }
  }
  return backend_.create_stream(device, placement_.shifted(priority), part, out);
}

Status StreamTable::create(uint64_t id, int device, uint32_t flags, int priority) {
  if (id == 0 || streams_.count(id) != 0) return Status::InvalidResourceHandle;
  if ((flags & ~ipc::kStreamNonBlocking) != 0) return Status::InvalidValue;
  std::unique_ptr<BackendStream> s;
  const Status st = make_stream(device, priority, s);
  if (st != Status::Success) return st;
  StreamEntry e;
  e.stream = std::move(s);
  e.device = device;
  e.blocking = (flags & ipc::kStreamNonBlocking) == 0;
  streams_.emplace(id, std::move(e));
  return Status::Success;
}

Status StreamTable::destroy(uint64_t id, std::shared_ptr<BackendStream>& out) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return Status::InvalidResourceHandle;
  StreamEntry& s = it->second;
  if (s.blocking && s.dirty) {
    // The legacy stream must still order after this stream's last work.
    Status st;
    if (StreamEntry* l = legacy(s.device, st); l != nullptr && ensure_mark(s) == Status::Success &&
                                               backend_.record(*s.mark, *s.stream) == Status::Success)
      l->orphans.push_back(s.mark);
  }
  close_busy(s);  // its queued work still runs, unaccounted
  out = std::move(s.stream);
  streams_.erase(it);
  return Status::Success;
}

StreamEntry* StreamTable::legacy(int device, Status& st) {
  auto it = legacy_.find(device);
  if (it != legacy_.end()) return &it->second;
  std::unique_ptr<BackendStream> s;
  st = make_stream(device, 0, s);
  if (st != Status::Success) return nullptr;
  StreamEntry e;
  e.stream = std::move(s);
  e.device = device;
  e.legacy = true;
  e.blocking = false;
  return &legacy_.emplace(device, std::move(e)).first->second;
}

StreamEntry* StreamTable::find(uint64_t id, int device, Status& st) {
  st = Status::Success;
  if (id == 0) return legacy(device, st);
  auto it = streams_.find(id);
  if (it == streams_.end()) {
    st = Status::InvalidResourceHandle;
    return nullptr;
  }
  return &it->second;
}

Status StreamTable::ensure_mark(StreamEntry& s) {
  if (s.mark) return Status::Success;
  std::unique_ptr<BackendEvent> e;
  const Status st = backend_.create_event(s.device, false, e);
  if (st == Status::Success) s.mark = std::move(e);
  return st;
}

Status StreamTable::before_work(StreamEntry& s) {
  if (s.legacy) {
    for (auto& [id, b] : streams_) {
      if (b.device != s.device || !b.blocking || !b.dirty) continue;
      if (Status st = ensure_mark(b); st != Status::Success) return st;
      if (Status st = backend_.record(*b.mark, *b.stream); st != Status::Success) return st;
      if (Status st = backend_.wait(*s.stream, *b.mark); st != Status::Success) return st;
      b.dirty = false;
      ++s.waits;
    }
    for (auto& e : s.orphans) {
      if (Status st = backend_.wait(*s.stream, *e); st != Status::Success) return st;
      ++s.waits;
    }
    s.orphans.clear();
    return Status::Success;
  }
  if (!s.blocking) return Status::Success;
  auto it = legacy_.find(s.device);
  if (it == legacy_.end()) return Status::Success;
  StreamEntry& l = it->second;
  if (l.generation == s.legacy_seen) return Status::Success;
  if (l.marked_generation != l.generation) {
    if (Status st = ensure_mark(l); st != Status::Success) return st;
    if (Status st = backend_.record(*l.mark, *l.stream); st != Status::Success) return st;
    l.marked_generation = l.generation;
  }
  if (Status st = backend_.wait(*s.stream, *l.mark); st != Status::Success) return st;
  s.legacy_seen = l.generation;
  return Status::Success;
}

namespace {
int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void StreamTable::after_work(StreamEntry& s) noexcept {
  if (s.legacy)
    ++s.generation;
  else if (s.blocking)
    s.dirty = true;
  s.done_word = nullptr;  // the caller sets it again if this work ends in a word store
  s.last_work_ns = now_ns();
  if (s.busy_since_ns == 0) {
    s.busy_since_ns = s.last_work_ns;
    ++open_spans_;
  }
}

bool StreamTable::queued_within(const StreamEntry& s, std::chrono::nanoseconds d) noexcept {
  return s.last_work_ns != 0 && now_ns() - s.last_work_ns < d.count();
}

void StreamTable::close_busy(StreamEntry& s) noexcept {
  if (s.busy_since_ns == 0) return;
  const int64_t span = now_ns() - s.busy_since_ns;
  if (span > 0) bump(busy_ns_, static_cast<uint64_t>(span));  // one writer: this client's worker
  s.busy_since_ns = 0;
  --open_spans_;
}

void StreamTable::sweep_busy(int device, bool drained) noexcept {
  if (open_spans_ == 0) return;
  const auto sweep = [&](StreamEntry& s) {
    if (s.busy_since_ns == 0 || (device >= 0 && s.device != device)) return;
    // Any answer but "not ready" ends the span: done, or a fault (nothing more runs).
    if (drained || s.stream == nullptr || backend_.query(*s.stream) != Status::NotReady) close_busy(s);
  };
  for (auto& [d, l] : legacy_) sweep(l);
  for (auto& [id, s] : streams_) sweep(s);
}

std::vector<StreamEntry*> StreamTable::on_device(int device) {
  std::vector<StreamEntry*> out;
  for (auto& [d, l] : legacy_)
    if (device < 0 || d == device) out.push_back(&l);
  for (auto& [id, s] : streams_)
    if (device < 0 || s.device == device) out.push_back(&s);
  return out;
}

std::vector<std::shared_ptr<BackendStream>> StreamTable::drop_device(int device) {
  std::vector<std::shared_ptr<BackendStream>> out;
  for (auto it = streams_.begin(); it != streams_.end();) {
    if (it->second.device == device) {
      close_busy(it->second);
      out.push_back(std::move(it->second.stream));
      it = streams_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

bool StreamTable::has_device(int device) const noexcept {
  if (legacy_.contains(device)) return true;
  for (const auto& [id, s] : streams_)
    if (s.device == device) return true;
  return false;
}

size_t StreamTable::release_device(int device) {
  sweep_busy(device, true);
  const size_t n = std::erase_if(streams_, [&](const auto& e) { return e.second.device == device; });
  legacy_.erase(device);
  return n;
}

void StreamTable::clear() noexcept {
  sweep_busy(-1, true);
  streams_.clear();
  legacy_.clear();
}

}  // namespace funnel::server
