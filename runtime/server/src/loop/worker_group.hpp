// Worker threads that serve several clients each (FUNNEL_SERVER_WORKERS; doc/design/server.md,
// "Worker threads").  By default every client has a worker thread of its own; at 16 ranks
// that are busy in MPI on 16 cores, their 16 polling workers compete with them for the cores.
// A WorkerGroup is one thread that takes turns over the Workers given to it, and sleeps on
// all of their doorbells at once when every one of them is idle.  A WorkerPool makes up to
// N groups per GPU and gives each new client the group of its home GPU with the fewest
// clients.
//
// A Worker's state is only ever touched by one thread at a time: its session's thread hands
// it to the group (serve), the group's thread runs its turns until it stops, and hands it
// back; the session's thread then tears it down (a teardown may wait for the GPU, which must
// not hold up the group's other clients).
#pragma once
#include <pthread.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace funnel::server {

class Worker;

class WorkerGroup {
 public:
  // Records a Worker takes per turn before the group moves to the next one.
  static constexpr unsigned kTurnRecords = 16;

  WorkerGroup(int device, unsigned index);
  ~WorkerGroup();  // stops the thread; every serve() has returned by then
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Serves `w` on this group's thread until it stops; rethrows what serving it threw.
  // Called on the session's own thread, which waits meanwhile.
  void serve(Worker& w);

  int device() const noexcept { return device_; }
  // The clients given to this group (WorkerPool::assign) and not yet stopped.
  unsigned load() const noexcept { return load_.load(std::memory_order_relaxed); }
  void add_load() noexcept { load_.fetch_add(1, std::memory_order_relaxed); }
  std::thread::native_handle_type thread() noexcept { return thread_.native_handle(); }
  pid_t tid() const noexcept { return tid_.load(std::memory_order_acquire); }

 private:
  struct Entry {
    Worker* worker;
    std::promise<void> done;
  };
  void loop() noexcept;
  void ring() noexcept;  // wakes the thread (a new worker, the stop)

  int device_;
  std::atomic<unsigned> load_{0};
  std::atomic<pid_t> tid_{0};
  std::atomic<uint32_t> bell_{0};  // a futex word: bumped by ring()
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  // Under mu_: handed over by serve(), taken by loop().  Shared: the promise must outlive
  // its set_value, which serve()'s return may otherwise overtake.
  std::vector<std::shared_ptr<Entry>> incoming_;
  std::thread thread_;
};

// The groups of every GPU; only the server's main thread calls assign.
class WorkerPool {
 public:
  explicit WorkerPool(unsigned per_device) : per_device_(per_device) {}
  // The group for a new client of `device`: a new one while the device has fewer than
  // per_device, else the one with the fewest clients.
  WorkerGroup* assign(int device);
  unsigned per_device() const noexcept { return per_device_; }

 private:
  unsigned per_device_;
  std::map<int, std::vector<std::unique_ptr<WorkerGroup>>> groups_;
};

}  // namespace funnel::server
