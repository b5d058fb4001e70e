// The main loop: epoll over the listening socket, every connection, a signalfd,
// an eventfd for request_stop() and one for finished workers.  Idle exit is the
// epoll timeout.  Recovery from a GPU fault (doc/design/faults.md): a device reset in
// process where the backend can, else a restart once every client has left.
#include "funnel/server/server.hpp"

#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "funnel/common/run_dir.hpp"
#include "funnel/ipc/syscheck.hpp"
#include "loop/server_impl.hpp"

namespace funnel::server {

namespace {
// "3 errors, the first: opcode 5 status 1" (opcode 0: work that failed after it was queued,
// reported at the next call; the numbers are ipc::Opcode's and cudaError_t's).
std::string errors_of(const ClientCounters& c) {
  const uint64_t n = c.errors.load(), first = c.first_error.load();
  if (n == 0 || first == 0) return fmt::format("{} errors", n);
  return fmt::format("{} error{}, the first: opcode {} status {}", n, n == 1 ? "" : "s", first >> 32,
                     static_cast<uint32_t>(first));
}
}  // namespace

Server::Server(ServerOptions options, std::unique_ptr<Backend> backend) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->backend = std::move(backend);
  impl_->modules = std::make_unique<ModuleCache>(*impl_->backend);
  impl_->ipc = std::make_unique<IpcRegistry>(*impl_->backend);
  impl_->mailbox = std::make_unique<Mailbox>(*impl_->backend);
  impl_->partitions = std::make_unique<SmPartitions>(*impl_->backend);
  if (impl_->options.worker_threads != 0) impl_->worker_pool = std::make_unique<WorkerPool>(impl_->options.worker_threads);
  impl_->device_records.resize(static_cast<size_t>(impl_->backend->device_count()));
  for (size_t d = 0; d < impl_->device_records.size(); ++d)
    impl_->backend->describe(static_cast<int>(d), impl_->device_records[d]);
}

Server::~Server() {
  if (impl_->listening) impl_->shutdown_all();
}

const std::filesystem::path& Server::run_dir() const noexcept { return impl_->options.run_dir; }

int Server::listening_socket() const noexcept { return impl_->listening ? impl_->listen_fd.get() : -1; }

void Server::request_stop() noexcept {
  const uint64_t one = 1;
  if (impl_->wake_fd) [[maybe_unused]] const ssize_t n = ::write(impl_->wake_fd.get(), &one, sizeof one);
}

void Server::start() {
  Impl& m = *impl_;
  m.epoll_fd = ipc::UniqueFd(FUNNEL_SYSCHECK(::epoll_create1(EPOLL_CLOEXEC)));
  m.wake_fd = ipc::UniqueFd(FUNNEL_SYSCHECK(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)));
  m.notify_fd = ipc::UniqueFd(FUNNEL_SYSCHECK(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)));
  if (m.options.handle_signals) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    m.signal_fd = ipc::UniqueFd(FUNNEL_SYSCHECK(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK)));
    m.watch(m.signal_fd.get());
  }
  const bool restarted = m.options.inherited_listen_fd >= 0;
  if (restarted)
    m.adopt_listener();
  else
    m.prepare_run_dir();
  m.watch(m.wake_fd.get());
  m.watch(m.notify_fd.get());
  m.watch(m.listen_fd.get());
  m.spare_fd = ipc::UniqueFd(FUNNEL_SYSCHECK(::open("/dev/null", O_RDONLY | O_CLOEXEC)));
  m.started_at = m.idle_since = Clock::now();
  m.started_wall = std::chrono::system_clock::now();
  std::vector<std::string> bus_ids;
  for (const auto& r : m.device_records) bus_ids.emplace_back(r.pci_bus_id, strnlen(r.pci_bus_id, sizeof r.pci_bus_id));
  m.placement = std::make_unique<ThreadPlacement>(std::move(bus_ids), m.options.thread_affinity,
                                                     m.options.worker_follows_rank);
  m.placement->cap_workers(m.options.worker_threads);
  // At once: a server started by a rank inherited that rank's binding.
  m.place_threads();
  spdlog::info("funnel-server {} serving {} with the {} backend ({} device(s))", ::getpid(), m.options.run_dir.string(),
               m.backend->name(), m.backend->device_count());
  if (restarted)
    spdlog::warn(
        "funnel-server {} restarted after a GPU fault, with the listening socket of its previous image: "
        "accepting the connections that waited",
        ::getpid());
}

void Server::Impl::watch(int fd) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = fd;
  FUNNEL_SYSCHECK(::epoll_ctl(epoll_fd.get(), EPOLL_CTL_ADD, fd, &ev));
}

void Server::Impl::unwatch(int fd) { ::epoll_ctl(epoll_fd.get(), EPOLL_CTL_DEL, fd, nullptr); }

RunOutcome Server::run() {
  Impl& m = *impl_;
  epoll_event events[64];
  while (!m.stopping && !m.restart_due()) {
    int timeout = -1;
    if (m.drain_deadline) {
      if (m.clients.empty()) {
        spdlog::info("graceful shutdown: every client has left");
        break;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*m.drain_deadline - Clock::now());
      if (left.count() <= 0) {
        spdlog::warn("graceful shutdown: {} client(s) still attached at the deadline; stopping them", m.clients.size());
        break;
      }
      timeout = static_cast<int>(left.count()) + 1;
    } else if (m.options.idle_exit && m.clients.empty()) {
      const auto left = *m.options.idle_exit - std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - m.idle_since);
      if (left.count() <= 0) {
        spdlog::info("no client for {} ms: exiting", m.options.idle_exit->count());
        break;
      }
      timeout = static_cast<int>(left.count()) + 1;
    }
    if (const auto next = m.next_connection_deadline()) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(*next - Clock::now()).count();
      const int until_next = static_cast<int>(std::clamp<int64_t>(left, 0, std::numeric_limits<int>::max()));
      timeout = timeout < 0 ? until_next : std::min(timeout, until_next);
    }
    const int n = ::epoll_wait(m.epoll_fd.get(), events, 64, timeout);
    if (n < 0) {
      if (errno == EINTR) continue;
      ipc::throw_errno("epoll_wait");
    }
    for (int i = 0; i < n && !m.stopping; ++i) {
      const int fd = events[i].data.fd;
      uint64_t count = 0;
      if (fd == m.wake_fd.get()) {
        [[maybe_unused]] const ssize_t r = ::read(fd, &count, sizeof count);
        spdlog::info("stop requested");
        m.stopping = true;
      } else if (m.signal_fd && fd == m.signal_fd.get()) {
        signalfd_siginfo si{};
        [[maybe_unused]] const ssize_t r = ::read(fd, &si, sizeof si);
        spdlog::info("signal {} from pid {}: shutting down", strsignal(static_cast<int>(si.ssi_signo)), si.ssi_pid);
        m.stopping = true;
      } else if (fd == m.notify_fd.get()) {
        [[maybe_unused]] const ssize_t r = ::read(fd, &count, sizeof count);
      } else {
        m.serve(fd);
      }
    }
    m.expire_connections();
    m.resume_accepting();
    m.guarded("reaping finished clients", [&] { m.reap_finished(); });
    m.guarded("recovering devices", [&] { m.recover_devices(); });
  }
  if (m.restart_due()) {
    // Connections accepted before the fault that never attached (or control ones) would
    // be closed by the restart anyway; those still in the backlog wait for the new image.
    if (!m.connections.empty())
      spdlog::warn("closing {} connection(s) that had not attached before the restart", m.connections.size());
    for (auto& [fd, c] : m.connections) m.unwatch(fd);
    m.connections.clear();
    spdlog::warn(
        "every client has left: restarting to recover device {} (funnel-server {} re-executes itself; "
        "connecting clients wait in the socket's backlog)",
        m.restart_device, ::getpid());
    return RunOutcome::RestartToRecover;
  }
  m.shutdown_all();
  return RunOutcome::Stopped;
}

void Server::Impl::serve(int fd) {
  const auto client = client_by_fd.find(fd);
  const uint32_t id = client == client_by_fd.end() ? 0 : client->second;
  const bool ok = guarded(fd == listen_fd.get() ? "accepting a connection" : "serving a connection", [&] {
    if (fd == listen_fd.get()) accept_connections();
    else if (id != 0) on_client_message(*clients.at(id));
    else on_connection(fd);
  });
  if (ok || fd == listen_fd.get()) return;
  // What failed is this peer's: it goes, the server and everyone else stay.
  spdlog::warn("dropping the connection (descriptor {}{}) whose request failed", fd,
               id == 0 ? "" : fmt::format(", client {}", id));
  unwatch(fd);
  if (id == 0) {
    connections.erase(fd);
  } else if (auto it = clients.find(id); it != clients.end()) {
    if (it->second->phase() == ClientSession::Phase::AwaitMapped) drop_client(id);
    else it->second->request_stop(false);
  }
}

bool Server::Impl::guarded(const char* what, const std::function<void()>& fn) noexcept {
  try {
    fn();
    return true;
  } catch (const std::exception& e) {
    spdlog::error("{}: {}", what, e.what());
  } catch (...) {
    spdlog::error("{}: an unknown exception", what);
  }
  return false;
}

void Server::Impl::drop_client(uint32_t id) {
  auto it = clients.find(id);
  if (it == clients.end()) return;
  client_by_fd.erase(it->second->fd());
  clients.erase(it);
  if (placement) {
    placement->remove_client(id);
    if (!stopping) place_threads();
  }
  if (clients.empty()) {
    idle_since = Clock::now();
    // The last client left: give the freed heap back to the system (the workers' malloc
    // arenas keep it otherwise), so that an idle server's resident memory is its own.
    ::malloc_trim(0);
  }
  if (restart_device >= 0 && !clients.empty())
    spdlog::info("the restart to recover device {} waits for {} more client(s) to leave", restart_device,
                 clients.size());
}

void Server::Impl::remember(const ClientSession& s, ClientEnd how) {
  if (!options.job_report_dir.empty()) departed.add(record_of(s), how);
}

void Server::Impl::write_report() {
  if (options.job_report_dir.empty()) return;
  JobReport r;
  r.server = {.pid = ::getpid(),
              .host = {},  // write_job_report: gethostname()
              .backend = backend->name(),
              .devices = backend->device_count(),
              .started = started_wall,
              .stopped = std::chrono::system_clock::now(),
              .attached = totals.clients_attached.load(),
              .detached = totals.clients_detached.load(),
              .died = totals.clients_died.load(),
              .terminated = totals.clients_terminated.load()};
  r.clients = departed.entries();
  r.dropped = departed.dropped();
  // The clients still here at the stop (joined: their counters are final); one that never
  // mapped its channel never attached.
  for (const auto& [id, s] : clients)
    if (s->phase() == ClientSession::Phase::Running) r.clients.push_back({record_of(*s), ClientEnd::AttachedAtStop});
  write_job_report(options.job_report_dir, std::move(r));
}

void Server::Impl::place_threads() {
  placement->replan();
  if (!placement->binds()) return;
  std::vector<ThreadPlacement::Worker> workers;
  for (auto& [id, s] : clients)
    if (s->phase() == ClientSession::Phase::Running && s->has_worker() && !s->finished())
      workers.push_back({s->worker_thread(), s->worker_tid(), s->home_device(), s->pooled() ? 0 : id});
  placement->apply(workers);
  // Tell each client whether its worker now shares its CPUs (its waits yield at once), and
  // each worker whether it has a core to itself (it polls longer when idle).
  for (const auto& w : workers) {
    if (w.client == 0) continue;
    ClientSession& c = *clients.at(w.client);
    c.set_worker_on_client_cpus(placement->follows_rank(w.device, w.client));
    c.set_worker_owns_core(!placement->own_core(w.device, w.client).empty());
  }
}

void Server::Impl::reap_finished() {
  std::vector<uint32_t> done;
  for (auto& [id, s] : clients)
    if (s->finished()) done.push_back(id);
  for (uint32_t id : done) {
    auto& s = *clients.at(id);
    unwatch(s.fd());
    s.join();
    const auto& c = s.counters();
    remember(s, s.terminated() ? ClientEnd::Terminated : s.detached() ? ClientEnd::Detached : ClientEnd::Died);
    if (s.terminated()) {
      add(totals.clients_terminated, 1);
      spdlog::info("client {} (pid {}) terminated: its resources are freed ({} commands, {})", id, s.pid(),
                   c.commands.load(), errors_of(c));
    } else if (s.detached()) {
      add(totals.clients_detached, 1);
      spdlog::info("client {} detached: pid {} rank {} command '{}' ({} commands, {})", id, s.pid(), s.mpi_rank(),
                   s.command(), c.commands.load(), errors_of(c));
    } else {
      add(totals.clients_died, 1);
      spdlog::warn("client {} died: pid {} rank {} command '{}' ({} commands, {}); its resources are freed", id,
                   s.pid(), s.mpi_rank(), s.command(), c.commands.load(), errors_of(c));
    }
    drop_client(id);
  }
}

void Server::Impl::recover_devices() {
  for (int d = 0; d < backend->device_count(); ++d) {
    const DeviceHealth::State s = health.state(d);
    if (s.fault == Status::Success || reset_failed[static_cast<size_t>(d)] == s.generation ||
        awaiting_restart[static_cast<size_t>(d)] == s.generation)
      continue;
    if (!backend->resets_in_process()) {
      await_restart(d, s);
      continue;
    }
    // Workers notify the eventfd when they release a device, and a finished session
    // counts as released, so this runs again whenever the answer may change.
    bool held = false;
    for (const auto& [id, c] : clients) held = held || c->released_fault(d) < s.generation;
    if (held) continue;
    spdlog::info("device {}: every client released it after the fault (status {}); resetting its context", d,
                 static_cast<int>(s.fault));
    mailbox->forget_device(d);
    const Status st = backend->reset_device(d);
    if (st != Status::Success) {
      reset_failed[static_cast<size_t>(d)] = s.generation;
      spdlog::error("device {}: the reset failed (status {}); it stays unusable: restart funnel-server", d,
                    static_cast<int>(st));
      continue;
    }
    health.recovered(d);
    spdlog::info("device {} recovered: new clients (and clients the fault did not catch) can use it", d);
  }
}

void Server::Impl::await_restart(int device, const DeviceHealth::State& s) {
  awaiting_restart[static_cast<size_t>(device)] = s.generation;
  if (restart_device >= 0) {
    spdlog::error("device {}: GPU fault (status {}) too; the restart that is due recovers it as well", device,
                  static_cast<int>(s.fault));
    return;
  }
  restart_device = device;
  // Unwatched, not closed: a client that connects now waits in the backlog (bounded by
  // its FUNNEL_ATTACH_TIMEOUT_MS) and the re-executed server accepts it.
  if (listening) unwatch(listen_fd.get());
  std::string waiting;
  for (const auto& [id, c] : clients)
    waiting +=
        fmt::format("{}client {} (pid {}, command '{}')", waiting.empty() ? "" : ", ", id, c->pid(), c->command());
  spdlog::error(
      "device {}: GPU fault (status {}). The driver cannot recreate a context in a running process, so "
      "funnel-server re-executes itself (same pid) once every client has left. Until then clients of other "
      "devices keep working, calls for device {} fail, and new connections wait. Waiting for: {}",
      device, static_cast<int>(s.fault), device, waiting.empty() ? "nobody" : waiting);
}

void Server::Impl::shutdown_all() {
  if (!listening) return;
  listening = false;
  unwatch(listen_fd.get());
  listen_fd.reset();
  ::unlink(socket_path(options.run_dir).c_str());
  for (auto& [id, s] : clients)
    if (!s->terminated()) s->request_stop(true);
  for (auto& [id, s] : clients) s->join();
  write_report();
  const size_t n = clients.size();
  for (auto& [id, s] : clients) unwatch(s->fd());
  clients.clear();
  client_by_fd.clear();
  for (auto& [fd, c] : connections) unwatch(fd);
  connections.clear();
  // Only what funnel made: the directory too where funnel created it and nothing else is left.
  remove_run_dir_files(options.run_dir, true);
  spdlog::info("funnel-server {} stopped ({} client(s) were attached; {} attached in all, {} detached, {} died)",
               ::getpid(), n, totals.clients_attached.load(), totals.clients_detached.load(),
               totals.clients_died.load());
}

}  // namespace funnel::server
