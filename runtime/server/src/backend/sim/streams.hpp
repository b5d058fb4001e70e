// The sim backend's streams, events and partitions: every stream is a host thread that runs
// the closures queued on it in FIFO order, and events complete when a stream reaches them.
#pragma once
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "funnel/server/backend.hpp"

namespace funnel::server::sim {

using Clock = std::chrono::steady_clock;
// Waits are sliced so that a backend being destroyed is noticed: nothing waits forever.
constexpr auto kSlice = std::chrono::milliseconds(50);

struct EventState {
  std::mutex m;
  std::condition_variable cv;
  uint64_t recorded = 0;   // generation of the last record call
  uint64_t completed = 0;  // generation whose stream position was reached
  Clock::time_point when{};
};

class SimEvent final : public BackendEvent {
 public:
  SimEvent(int device, bool timing) : device_(device), timing_(timing), st_(std::make_shared<EventState>()) {}
  int device() const noexcept override { return device_; }
  int device_;
  bool timing_;
  std::shared_ptr<EventState> st_;
};

// A partition is only a record of its SM groups: the sim has no SMs to confine work to;
// each launch logs the SMs and groups it was allowed (FUNNEL_SIM_LAUNCH_LOG).
class SimPartition final : public BackendPartition {
 public:
  SimPartition(int device, std::vector<uint32_t> groups, uint32_t sms)
      : device_(device), groups_(std::move(groups)), sms_(sms) {}
  int device() const noexcept override { return device_; }
  uint32_t sm_count() const noexcept override { return sms_; }
  const std::vector<uint32_t>& groups() const noexcept { return groups_; }

 private:
  int device_;
  std::vector<uint32_t> groups_;
  uint32_t sms_;
};

class SimStream final : public BackendStream {
 public:
  SimStream(int device, int priority, const std::atomic<bool>& dying, std::shared_ptr<BackendPartition> partition)
      : device_(device), priority_(priority), dying_(dying), partition_(std::move(partition)) {
    thread_ = std::thread([this] { loop(); });
    // Not the name of the worker that made it (a new thread inherits it): `ps -L` and the
    // placement test tell the sim's stand-in for the GPU from the worker.
    ::pthread_setname_np(thread_.native_handle(), "funnel-simgpu");
  }
  // The partition the stream was made in; null: the whole device.
  const SimPartition* partition() const noexcept { return static_cast<const SimPartition*>(partition_.get()); }
  int priority() const noexcept { return priority_; }
  ~SimStream() override {
    if (on_destroy_) on_destroy_(this);
    {
      std::lock_guard lk(m_);
      closing_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  // Called first thing in the destructor (SimBackend's registry of streams).
  void on_destroy(std::function<void(SimStream*)> f) { on_destroy_ = std::move(f); }
  // How much work was queued and done (both changed under the stream's lock), readable
  // after the stream is gone (its queue drains before its thread ends, so done reaches
  // what was queued).
  struct Progress {
    std::atomic<uint64_t> submitted{0};
    std::atomic<uint64_t> done{0};
    bool drained() const noexcept {
      return done.load(std::memory_order_acquire) == submitted.load(std::memory_order_acquire);
    }
  };
  std::shared_ptr<Progress> progress() const { return progress_; }
  int device() const noexcept override { return device_; }
  // Being destroyed: a closure that waits for something outside the stream gives up.
  bool closing() {
    std::lock_guard lk(m_);
    return closing_;
  }

  void enqueue(std::function<void()> f) {
    {
      std::lock_guard lk(m_);
      q_.push_back(std::move(f));
      progress_->submitted.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
  }
  bool idle() {
    std::lock_guard lk(m_);
    return progress_->drained();
  }
  bool wait_idle() {
    std::unique_lock lk(m_);
    while (!progress_->drained()) {
      if (dying_.load()) return false;
      cv_.wait_for(lk, kSlice);
    }
    return true;
  }

 private:
  void loop() {
    std::unique_lock lk(m_);
    for (;;) {
      // The queue is drained before exiting: a destroyed stream's work still completes.
      if (q_.empty()) {
        if (closing_) return;
        cv_.wait_for(lk, kSlice);
        continue;
      }
      auto f = std::move(q_.front());
      q_.pop_front();
      lk.unlock();
      f();
      lk.lock();
      progress_->done.fetch_add(1, std::memory_order_release);
      cv_.notify_all();
    }
  }

  int device_;
  int priority_;
  const std::atomic<bool>& dying_;
  std::shared_ptr<BackendPartition> partition_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  bool closing_ = false;
  std::function<void(SimStream*)> on_destroy_;
  std::shared_ptr<Progress> progress_ = std::make_shared<Progress>();
  std::thread thread_;
};

}  // namespace funnel::server::sim
