// The hang-up watcher: one thread that, the moment a client's socket hangs up, lets the
// streams held by that client's host functions and stream memory waits go on (Worker::release_holds).  It
// never calls the driver, so it cannot be held up by it: the main loop can be (a driver
// call there may wait on a lock that a worker waiting for the GPU holds, and the GPU may be
// waiting on a dead client's host function; the GPU kill storm deadlocked that way).
#pragma once
#include <mutex>
#include <thread>
#include <unordered_map>

#include "funnel/ipc/socket.hpp"

namespace funnel::server {

class Worker;

class HangupWatcher {
 public:
  HangupWatcher();
  ~HangupWatcher();
  HangupWatcher(const HangupWatcher&) = delete;
  HangupWatcher& operator=(const HangupWatcher&) = delete;

  // Watches fd (a client's socket) for its worker; remove() before the worker goes or the
  // fd closes.  After remove() returns, the watcher no longer touches the worker.
  void add(int fd, Worker* worker);
  void remove(int fd) noexcept;

 private:
  void run() noexcept;

  ipc::UniqueFd epoll_, wake_;
  std::mutex m_;
  std::unordered_map<int, Worker*> workers_;
  std::thread thread_;
};

}  // namespace funnel::server
