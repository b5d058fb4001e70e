#include "session/stream_waits.hpp"

#include <algorithm>
#include <thread>

#include <spdlog/spdlog.h>

namespace funnel::server {

StreamWaits::~StreamWaits() = default;

uint64_t StreamWaits::meeting_value(uint32_t condition, uint64_t value) noexcept {
  // GEQ and EQ: the value itself; AND: the value (not 0, satisfiable()); NOR: 0, as
  // ~(0 | value) != 0 when value is not every bit.
  return (condition & 0x3u) == ipc::kWaitValueNor ? 0 : value;
}

Status StreamWaits::add(BackendStream& stream, uint64_t address, bool wide, uint32_t condition, uint64_t value,
                        const std::function<Status()>& enqueue) {
  std::unique_ptr<BackendEvent> passed;
  if (Status st = backend_.create_event(stream.device(), false, passed); st != Status::Success) return st;
  {
    const std::lock_guard lock(m_);
    if (!released_ && waits_.size() >= prune_at_) {
      prune();
      prune_at_ = std::max<size_t>(64, 2 * waits_.size());
    }
    if (!released_ && waits_.size() >= kMaxPending) return Status::LaunchOutOfResources;
  }
  if (Status st = enqueue(); st != Status::Success) return st;
  // Queued: from here on it is remembered whatever happens, so that release() meets it (an
  // event that could not be recorded counts as passed).
  const Status recorded = backend_.record(*passed, stream);
  const std::lock_guard lock(m_);
  waits_.push_back({stream.device(), address, wide, meeting_value(condition, value), std::move(passed)});
  if (released_) meet_round();
  return recorded;
}

void StreamWaits::prune() {
  std::erase_if(waits_, [this](const Wait& w) { return backend_.query(*w.passed) != Status::NotReady; });
}

void StreamWaits::release() noexcept {
  try {
    const std::lock_guard lock(m_);
    if (released_) return;
    released_ = true;
    meet_round();
  } catch (const std::exception& e) {
    spdlog::error("releasing a gone client's stream memory waits: {}", e.what());
  }
}

bool StreamWaits::settle(std::chrono::steady_clock::time_point deadline) noexcept {
  try {
    for (;;) {
      {
        const std::lock_guard lock(m_);
        if (meet_round() == 0) return true;
      }
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(kRound);
    }
  } catch (const std::exception& e) {
    spdlog::error("releasing a gone client's stream memory waits: {}", e.what());
    return false;
  }
}

size_t StreamWaits::meet_round() {
  prune();
  // The oldest wait on each word only: a later wait on the same word (for another value) gets
  // its value once this one has passed, in a later round.
  std::vector<uint64_t> words;
  for (Wait& w : waits_) {
    if (std::find(words.begin(), words.end(), w.address) != words.end()) continue;
    words.push_back(w.address);
    meet(w);
  }
  return waits_.size();
}

void StreamWaits::drain() noexcept {
  std::vector<BackendStream*> streams;
  {
    const std::lock_guard lock(m_);
    for (auto& s : release_streams_)
      if (s) streams.push_back(s.get());
  }
  // Not under m_: the hang-up watcher may release another client's waits meanwhile.  The
  // streams stay until this object goes (release_streams_ only grows) and hold writes only, so
  // they never block.
  for (BackendStream* s : streams) (void)backend_.synchronize(*s);
}

void StreamWaits::meet(Wait& w) noexcept {
  try {
    const auto d = static_cast<size_t>(w.device);
    if (release_streams_.size() <= d) release_streams_.resize(d + 1);
    if (!release_streams_[d]) {
      if (Status st = backend_.create_stream(w.device, 0, release_streams_[d]); st != Status::Success) {
        spdlog::error("cannot make the stream that releases a gone client's waits on device {}: status {}",
                      w.device, static_cast<int>(st));
        return;
      }
    }
    const Status st = backend_.stream_mem_op(*release_streams_[d], w.address,
                                             w.wide ? ipc::StreamMemOp::Write64 : ipc::StreamMemOp::Write32, w.meet, 0);
    if (st != Status::Success)
      spdlog::warn("releasing a stream memory wait at {:#x} on device {}: status {}", w.address, w.device,
                   static_cast<int>(st));
  } catch (const std::exception& e) {
    spdlog::error("releasing a stream memory wait: {}", e.what());
  }
}

}  // namespace funnel::server
