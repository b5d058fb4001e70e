#include "loop/worker_group.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "funnel/ipc/futex.hpp"
#include "session/worker.hpp"

namespace funnel::server {

using Clock = std::chrono::steady_clock;

WorkerGroup::WorkerGroup(int device, unsigned index) : device_(device) {
  thread_ = std::thread([this] { loop(); });
  // Named for ps -L, top -H and the placement log: funnel-g<device>.<index>.
  const std::string name = fmt::format("funnel-g{}.{}", device, index);
  ::pthread_setname_np(thread_.native_handle(), name.substr(0, 15).c_str());
}

WorkerGroup::~WorkerGroup() {
  stop_.store(true, std::memory_order_release);
  ring();
  if (thread_.joinable()) thread_.join();
}

void WorkerGroup::ring() noexcept {
  bell_.fetch_add(1, std::memory_order_seq_cst);
  ipc::futex_wake_all(bell_);
}

void WorkerGroup::serve(Worker& w) {
  auto e = std::make_shared<Entry>();
  e->worker = &w;
  auto done = e->done.get_future();
  {
    std::lock_guard lk(mu_);
    incoming_.push_back(std::move(e));
  }
  ring();
  done.get();  // the group's promise: set (or its exception) once w has stopped
}

void WorkerGroup::loop() noexcept {
  tid_.store(::gettid(), std::memory_order_release);
  std::vector<std::shared_ptr<Entry>> members;
  std::vector<ipc::FutexWaitItem> bells;
  auto finish = [&](size_t i, std::exception_ptr error) {
    const std::shared_ptr<Entry> e = std::move(members[i]);
    members.erase(members.begin() + static_cast<std::ptrdiff_t>(i));
    load_.fetch_sub(1, std::memory_order_relaxed);
    if (error)
      e->done.set_exception(error);
    else
      e->done.set_value();  // serve() returns now; its worker is not touched after this
  };
  for (;;) {
    {
      std::lock_guard lk(mu_);
      members.insert(members.end(), incoming_.begin(), incoming_.end());
      incoming_.clear();
    }
    if (members.empty()) {
      if (stop_.load(std::memory_order_acquire)) return;
      const uint32_t seen = bell_.load(std::memory_order_seq_cst);
      std::unique_lock lk(mu_);
      const bool none = incoming_.empty();
      lk.unlock();
      if (none && !stop_.load(std::memory_order_acquire)) ipc::futex_wait(bell_, seen, std::chrono::seconds(1));
      continue;
    }
    bool busy = false;
    for (size_t i = 0; i < members.size();) {
      Worker::Turn t;
      try {
        t = members[i]->worker->turn(kTurnRecords);
      } catch (...) {
        finish(i, std::current_exception());
        continue;
      }
      if (t == Worker::Turn::Stopped) {
        finish(i, nullptr);
        continue;
      }
      busy = busy || t == Worker::Turn::Busy;
      ++i;
    }
    if (busy || members.empty()) continue;
    // Every member is idle.  Poll while any is inside its spin window (the most recently
    // busy one sets the pace), else sleep on every doorbell and the group's own bell.
    const auto now = Clock::now();
    std::chrono::nanoseconds least_idle = std::chrono::nanoseconds::max();
    bool spin = false;
    for (const auto& e : members) {
      const auto idle = std::chrono::duration_cast<std::chrono::nanoseconds>(now - e->worker->idle_since());
      if (idle < e->worker->spin_window()) spin = true;
      least_idle = std::min(least_idle, idle);
    }
    if (spin) {
      if (Worker::poll_pause(least_idle))
        for (const auto& e : members) e->worker->back_off();  // the group's one core is wanted
      continue;
    }
    std::chrono::nanoseconds nap = std::chrono::seconds(1);
    for (const auto& e : members) nap = std::min(nap, e->worker->before_sleep());
    bells.clear();
    bells.push_back({&bell_, bell_.load(std::memory_order_seq_cst)});
    bool sleep = true;
    size_t armed = 0;
    for (; armed < members.size(); ++armed) {
      ipc::FutexWaitItem b;
      const bool empty = members[armed]->worker->arm_sleep(b);
      bells.push_back(b);
      if (!empty) {
        sleep = false;  // a record came in: no sleep (this one is disarmed below too)
        ++armed;
        break;
      }
    }
    if (sleep) {
      std::unique_lock lk(mu_);
      sleep = incoming_.empty();
    }
    if (sleep) ipc::futex_wait_any(bells.data(), bells.size(), nap);
    for (size_t i = 0; i < armed; ++i) members[i]->worker->end_sleep();
  }
}

WorkerGroup* WorkerPool::assign(int device) {
  auto& groups = groups_[device];
  WorkerGroup* least = nullptr;
  for (auto& g : groups)
    if (least == nullptr || g->load() < least->load()) least = g.get();
  if ((least == nullptr || least->load() != 0) && groups.size() < per_device_) {
    groups.push_back(std::make_unique<WorkerGroup>(device, static_cast<unsigned>(groups.size())));
    least = groups.back().get();
    spdlog::info("worker thread {} of device {} started (FUNNEL_SERVER_WORKERS={} per device)", groups.size() - 1,
                 device, per_device_);
  }
  least->add_load();
  return least;
}

}  // namespace funnel::server
