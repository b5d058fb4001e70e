#include "loop/hangup_watcher.hpp"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <system_error>

#include "funnel/ipc/syscheck.hpp"

#include "session/worker.hpp"

namespace funnel::server {

HangupWatcher::HangupWatcher()
    : epoll_(::epoll_create1(EPOLL_CLOEXEC)), wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (!epoll_ || !wake_) ipc::throw_errno("the hang-up watcher's epoll");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_.get();
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &ev) != 0)
    ipc::throw_errno("the hang-up watcher's epoll");
  thread_ = std::thread([this] { run(); });
  ::pthread_setname_np(thread_.native_handle(), "funnel-hangup");
}

HangupWatcher::~HangupWatcher() {
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_.get(), &one, sizeof one);
  if (thread_.joinable()) thread_.join();
}

void HangupWatcher::add(int fd, Worker* worker) {
  const std::lock_guard lock(m_);
  workers_[fd] = worker;
  epoll_event ev{};
  // One report per client is enough: the release holds for the rest of its life.
  ev.events = EPOLLRDHUP | EPOLLHUP | EPOLLONESHOT;
  ev.data.fd = fd;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
    ipc::throw_errno("the hang-up watcher's epoll_ctl");
}

void HangupWatcher::remove(int fd) noexcept {
  const std::lock_guard lock(m_);
  if (workers_.erase(fd) != 0) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
}

void HangupWatcher::run() noexcept {
  epoll_event events[32];
  for (;;) {
    const int n = ::epoll_wait(epoll_.get(), events, 32, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;
    for (int i = 0; i < n; ++i) {
      if (events[i].data.fd == wake_.get()) return;
      const std::lock_guard lock(m_);
      if (auto it = workers_.find(events[i].data.fd); it != workers_.end()) it->second->release_holds();
    }
  }
}

}  // namespace funnel::server
