// A sticky GPU fault seen by a worker (doc/design/faults.md): report it to the server's
// DeviceHealth, poison every client that used the device, release what they held there
// so that the main loop can reset the device, and answer them from then on without the
// backend.  Clients that did not use the device are refused it (DevicesUnavailable) until
// the reset, or, where the backend cannot reset in process, until they leave: the server
// restarts once every client has left.
#include <unistd.h>


#include <spdlog/spdlog.h>

#include "funnel/ipc/futex.hpp"
#include "session/worker.hpp"

namespace funnel::server {
int Worker::command_device(const ipc::CommandHeader& h, const std::byte* payload) {
  switch (h.opcode) {
    case ipc::Opcode::EventSynchronize:
    case ipc::Opcode::EventQuery:
    case ipc::Opcode::EventElapsedTime:
      // EventCmd and EventPairCmd both start with the (first) event's id.
      if (const EventEntry* e = res_.find_event(ipc::payload_as<uint64_t>(payload)); e != nullptr) return e->device;
      break;
    default:
      break;
  }
  if (h.stream != 0) {
    Status st;
    if (StreamEntry* s = streams_.find(h.stream, h.device, st); s != nullptr) return s->device;
  }
  return h.device;
}

void Worker::observe(int device, Status st) {
  if (!ipc::is_sticky(st) || device < 0 || static_cast<uint32_t>(device) >= view_.header().device_count) return;
  if (poisoned_on_[static_cast<size_t>(device)]) return;  // this client's fault of it is handled
  shared_.health->report(device, st, shared_.id);
  on_health_change();
}

bool Worker::uses_device(int device) const {
  return streams_.has_device(device) || res_.uses_device(device) || completions_.uses_device(device);
}

void Worker::on_health_change() {
  const DeviceHealth& health = *shared_.health;
  seen_epoch_ = health.epoch_acquire();
  bool released = false;
  for (uint32_t i = 0; i < view_.header().device_count; ++i) {
    const int d = static_cast<int>(i);
    const DeviceHealth::State s = health.state(d);
    if (s.fault == Status::Success) {
      blocked_[i] = false;
      continue;
    }
    auto& done = shared_.released_fault[i];
    if (done.load(std::memory_order_acquire) >= s.generation) continue;
    if (!poisoned_on_[i] && uses_device(d)) {
      poisoned_on_[i] = true;
      if (poisoned_ == Status::Success) poisoned_ = s.fault;
      view_.completion().sticky_error.store(static_cast<int32_t>(poisoned_), std::memory_order_release);
      // The admin's view of the fault: who was on the device and what each had queued.
      const char* kernel = last_kernel_.empty() ? "(none)" : last_kernel_.c_str();
      if (s.first_observer == shared_.id) {
        spdlog::error("device {}: GPU fault (status {}) observed first by client {} (pid {}, rank {}, command '{}'): "
                      "its last kernel '{}', {} launch(es) queued since its last completed synchronize. The first "
                      "observer is not necessarily the culprit: compare the launches of every client caught",
                      d, static_cast<int>(s.fault), shared_.id, shared_.pid, shared_.mpi_rank, shared_.command, kernel,
                      launches_since_sync_);
      } else {
        spdlog::error("device {}: client {} (pid {}, rank {}, command '{}') is caught by the GPU fault (status {}) "
                      "first observed by client {}: its last kernel '{}', {} launch(es) queued since its last "
                      "completed synchronize",
                      d, shared_.id, shared_.pid, shared_.mpi_rank, shared_.command, static_cast<int>(s.fault),
                      s.first_observer, kernel, launches_since_sync_);
      }
      release_device(d, s.fault);
    } else if (!poisoned_on_[i]) {
      blocked_[i] = true;  // nothing of this client was there: refused until the device is back
    }
    done.store(s.generation, std::memory_order_release);
    released = true;
  }
  if (released) {
    // The main loop resets a device once every session released it.
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(shared_.notify_fd, &one, sizeof one);
  }
}

void Worker::release_device(int device, Status st) {
  // Streams held by host functions are let go (the client sees the sticky error while it
  // waits for one to be reached, runtime/client/src/host_func.cpp), and by stream memory waits.
  release_holds();
  // Waits on the device are answered now with the fault; a wait that also involves other
  // devices keeps their events and completes with the fault once they are done.
  completions_.release_device(device, st);
  sub(counters_.streams, streams_.release_device(device));
  waits_.drain();  // the words written by the release landed before the memory goes
  graphs_.clear();  // before the events and memory they use
  res_.release_device(device);
  stop_profiling(device);
  // Modules are device-independent, but this client will never launch again, and its
  // symbols' addresses die with the context.
  kernels_.clear();
  res_.symbols.clear();
  kernels_.modules.clear();
  kernels_.uploads.clear();
}

Status Worker::refuse_poisoned(const ipc::CommandHeader& h, const std::byte* payload) {
  // A staging slot handed to the server must come back, or the client waits forever.
  if (h.opcode == ipc::Opcode::Copy) {
    answers_.release_staging(ipc::payload_as<ipc::CopyCmd>(payload));
  } else if (h.opcode == ipc::Opcode::ModuleData) {
    const auto c = ipc::payload_as<ipc::ModuleDataCmd>(payload);
    if (c.staging_slot < view_.header().staging_slots) {
      auto& w = view_.staging_state(c.staging_slot);
      auto in_flight = static_cast<uint32_t>(ipc::StagingState::InFlight);
      if (w.compare_exchange_strong(in_flight, static_cast<uint32_t>(ipc::StagingState::Free),
                                    std::memory_order_acq_rel))
        ipc::futex_wake_all(w);
    }
  }
  return poisoned_;
}

}  // namespace funnel::server
