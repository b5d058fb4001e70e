// funnel-server: parse options, daemonize, set up logging, run the Server, and
// re-execute it when it asks to restart after a GPU fault.
#include <dirent.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <sys/personality.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "funnel/common/config.hpp"
#include "funnel/common/run_dir.hpp"
#include "funnel/common/setting_option.hpp"
#include "funnel/ipc/syscheck.hpp"
#include "funnel/server/server.hpp"
#include "funnel/server/sim_backend.hpp"

namespace {

// Tells whoever started us (funnel-run, the client runtime) how the start went.
class ReadyPipe {
 public:
  explicit ReadyPipe(int fd) : fd_(fd) {}
  int fd() const noexcept { return fd_; }
  void reset(int fd) noexcept { fd_ = fd; }
  void ready() { finish("R"); }
  void failed(const std::string& why) { finish(why); }

 private:
  void finish(const std::string& text) {
    if (fd_ < 0) return;
    [[maybe_unused]] const ssize_t n = ::write(fd_, text.data(), text.size());
    ::close(fd_);
    fd_ = -1;
  }
  int fd_;
};

// Detaches into the background.  When nobody passed --ready-fd (a server started by hand
// or by a script), the command returns only once the daemon listens (exit 0) or has
// failed (its reason on stderr, exit 1), so that `funnel-server && funnelctl stats` and a
// client started right after it find it; the daemon reports through `ready`.
void daemonize(ReadyPipe& ready) {
  int pipe_fds[2] = {-1, -1};
  if (ready.fd() < 0 && ::pipe2(pipe_fds, O_CLOEXEC) != 0)
    funnel::ipc::throw_errno("pipe");
  const pid_t pid = ::fork();
  if (pid < 0) funnel::ipc::throw_errno("fork");
  if (pid > 0) {
    if (pipe_fds[0] < 0) ::_exit(0);
    ::close(pipe_fds[1]);
    std::string text;
    char buf[512];
    for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;
      text.append(buf, static_cast<size_t>(n));
    }
    if (text == "R") ::_exit(0);
    std::fprintf(stderr, "funnel-server: %s\n", text.empty() ? "the daemon exited before it was ready" : text.c_str());
    ::_exit(1);
  }
  if (pipe_fds[1] >= 0) {
    ::close(pipe_fds[0]);
    ready.reset(pipe_fds[1]);
  }
  if (::setsid() < 0) funnel::ipc::throw_errno("setsid");
  // The daemon keeps no terminal: its log file is where it speaks.
  const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    ::dup2(null, STDIN_FILENO);
    ::dup2(null, STDOUT_FILENO);
    ::dup2(null, STDERR_FILENO);
    if (null > STDERR_FILENO) ::close(null);
  }
}

// The command line of the restarted image: ours, already daemonized (--foreground keeps
// the pid), with the listening socket it inherits and without the ready pipe (answered
// and closed long ago).
std::vector<std::string> restart_arguments(int argc, char** argv, int listen_fd) {
  std::vector<std::string> out{argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--ready-fd" || a == "--listen-fd") {
      ++i;  // and its value
      continue;
    }
    if (a.starts_with("--ready-fd=") || a.starts_with("--listen-fd=") || a == "--foreground") continue;
    out.emplace_back(a);
  }
  out.insert(out.end(), {"--foreground", "--listen-fd", std::to_string(listen_fd)});
  return out;
}

// Every descriptor but the standard ones and `keep` closes at exec: the driver's (the
// GPU memory of the poisoned context goes with them), the log file's, the epoll set's.
void close_on_exec_all_but(int keep) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir != nullptr) {
    while (const dirent* e = ::readdir(dir)) {
      const int fd = std::atoi(e->d_name);
      if (fd > STDERR_FILENO && fd != keep && fd != ::dirfd(dir)) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
    ::closedir(dir);
  }
  ::fcntl(keep, F_SETFD, 0);
}

// Re-executes this program in this process after a GPU fault that the driver cannot
// recover in a running process (doc/design/faults.md): the same pid, log file and run
// directory, and the listening socket with the clients that wait in its backlog.
// Returns only if the exec failed, with errno set.
void reexecute(int argc, char** argv, int listen_fd) {
  std::vector<std::string> args = restart_arguments(argc, argv, listen_fd);
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  close_on_exec_all_but(listen_fd);
  spdlog::default_logger()->flush();
  ::execv("/proc/self/exe", cargs.data());
}

// funnel-run gives a program the low memory layout (ADDR_COMPAT_LAYOUT, FUNNEL_CLIENT_LAYOUT)
// so that its mappings stay away from the server's device addresses at the top of the address
// space; a server that a rank starts (MPI hooks, client runtime) inherits that personality,
// and then its mappings - the CUDA driver's device memory, the sim backend's - would grow from
// where the ranks' do (CI saw every cudaMalloc of a rank refused that way).  Such a server
// runs itself again with the usual layout, before anything else.
void leave_client_layout(char** argv) {
  const int current = ::personality(0xffffffff);
  if (current == -1 || (current & ADDR_COMPAT_LAYOUT) == 0) return;
  if (::personality(static_cast<unsigned long>(current) & ~static_cast<unsigned long>(ADDR_COMPAT_LAYOUT)) == -1)
    return;
  ::execv("/proc/self/exe", argv);
  std::fprintf(stderr, "funnel-server: warning: cannot run again with the usual memory layout: %s\n",
               std::strerror(errno));
}
// The log file, written through a descriptor opened without following links.
class FileSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit FileSink(int fd) : fd_(fd) {}
  ~FileSink() override { ::close(fd_); }
  FileSink(const FileSink&) = delete;
  FileSink& operator=(const FileSink&) = delete;

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    for (size_t done = 0; done < line.size();) {
      const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // a full disk loses log lines, never the server
      done += static_cast<size_t>(n);
    }
  }
  void flush_() override {}  // every line is written at once

 private:
  int fd_;
};

// Opens the log file in the checked log directory: a new file (0600), or, where this pid's
// file exists already (the image that re-executed itself after a GPU fault), that one when it
// is a regular file of this user, appended to.
int open_log(const std::string& dir, const std::string& name) {
  int fd = funnel::open_private_file(dir, name, true, true);
  if (fd < 0 && errno == EEXIST) {
    fd = funnel::open_private_file(dir, name, false, true);
    struct stat st {};
    if (fd >= 0 && (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid())) {
      ::close(fd);
      fd = -1;
      errno = EPERM;
    }
  }
  if (fd < 0)
    throw std::runtime_error(fmt::format("cannot open the log file {}/{}: {} (FUNNEL_LOG_DIR)", dir, name,
                                         std::strerror(errno)));
  return fd;
}

// A server holds a socket per client and what the driver opens: the soft RLIMIT_NOFILE a
// rank's shell handed down (often 1024) is no limit for it, the hard one is.
void raise_descriptor_limit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == lim.rlim_max) return;
  const rlim_t was = lim.rlim_cur;
  lim.rlim_cur = lim.rlim_max;
  if (lim.rlim_max == RLIM_INFINITY) {
    // The kernel caps descriptors at fs.nr_open even where the hard limit is unlimited.
    unsigned long nr_open = 1u << 20;
    if (std::FILE* f = std::fopen("/proc/sys/fs/nr_open", "re")) {
      if (std::fscanf(f, "%lu", &nr_open) != 1) nr_open = 1u << 20;
      std::fclose(f);
    }
    lim.rlim_cur = nr_open;
  }
  if (::setrlimit(RLIMIT_NOFILE, &lim) == 0)
    spdlog::info("RLIMIT_NOFILE: soft limit raised from {} to the hard limit {}", was, lim.rlim_max);
  else
    spdlog::warn("RLIMIT_NOFILE: cannot raise the soft limit {} to {}: {}", was, lim.rlim_max, std::strerror(errno));
}
}  // namespace

int main(int argc, char** argv) {
  leave_client_layout(argv);
  // Fixed malloc thresholds: glibc raises its mmap threshold each time a large block is freed,
  // after which the clients' large buffers (sim device memory, staging) land in the worker
  // threads' arenas and stay resident after the clients leave (the kill storm measured +68 MB
  // then +41 MB of arena tops on an idle server). Large blocks are mapped and unmapped on
  // their own, and free heap tops go back to the system.
  ::mallopt(M_MMAP_THRESHOLD, 256 << 10);
  ::mallopt(M_TRIM_THRESHOLD, 1 << 20);
  funnel::Settings settings;
  try {
    settings = funnel::Settings::from_environment();
  } catch (const funnel::ConfigError& e) {
    std::fprintf(stderr, "funnel-server: %s\n", e.what());
    return 2;
  }

  CLI::App app{"funnel-server: the node-local server that runs the CUDA work of every funnel client"};
  // The options that set a FUNNEL_* setting come from its table, accept what the variable
  // accepts, and win over it.
  funnel::GivenSettings given;
  funnel::add_setting_options(app, given);
  bool foreground = false;
  int ready_fd = -1;
  int listen_fd = -1;
  int sim_devices = 1;
  uint64_t sim_memory_mb = 16 * 1024;
  app.add_flag("--foreground", foreground, "do not daemonize; log to stderr too");
  app.add_option("--ready-fd", ready_fd, "write 'R' (or the start error) to this fd, then close it");
  // Internal (no help group): how the server passes its socket to itself when it restarts.
  app.add_option("--listen-fd", listen_fd, "the listening socket inherited across a restart after a GPU fault")
      ->group("");
  // Internal (tests): how long an accepted connection may stay silent (ServerOptions::hello_timeout).
  uint32_t hello_timeout_ms = 10000;
  app.add_option("--hello-timeout-ms", hello_timeout_ms, "close a connection that sends no hello this long")
      ->check(CLI::Range(100u, 3600000u))
      ->group("");
  app.add_option("--sim-devices", sim_devices, "devices of the sim backend")->check(CLI::Range(1, 16));
  app.add_option("--sim-memory-mb", sim_memory_mb, "memory per sim device, MiB");
  CLI11_PARSE(app, argc, argv);
  try {
    settings = funnel::Settings::from(funnel::given_first(given));  // checked by the options already
  } catch (const funnel::ConfigError& e) {
    std::fprintf(stderr, "funnel-server: %s\n", e.what());
    return 2;
  }
  std::string log_dir = settings.log_dir.string();
  std::string sim_launch_log = settings.sim_launch_log.string();

  ReadyPipe ready(ready_fd);
  if (ready_fd >= 0) ::fcntl(ready_fd, F_SETFD, FD_CLOEXEC);
  try {
    // The daemon keeps the working directory, but a relative path should not depend on that.
    if (!sim_launch_log.empty()) sim_launch_log = std::filesystem::absolute(sim_launch_log).string();
    if (!foreground) daemonize(ready);

    // Signals go through the server's signalfd; block them before any thread starts.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    ::signal(SIGPIPE, SIG_IGN);

    std::vector<spdlog::sink_ptr> sinks;
    // Checked before anything is written there (no other user's directory, links or files).
    std::string refused_log_dir;
    log_dir = funnel::ensure_log_dir(log_dir, &refused_log_dir).string();
    const std::string log_name =
        fmt::format("funnel-server-{}-{}.log", funnel::sanitize_for_filename(settings.job_id), ::getpid());
    sinks.push_back(std::make_shared<FileSink>(open_log(log_dir, log_name)));
    if (foreground) sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    auto logger = std::make_shared<spdlog::logger>("funnel-server", sinks.begin(), sinks.end());
    logger->set_level(spdlog::level::from_str(settings.log_level));
    logger->flush_on(spdlog::level::info);
    spdlog::set_default_logger(logger);
    if (!refused_log_dir.empty()) spdlog::warn("{}: logging to {} instead", refused_log_dir, log_dir);

    raise_descriptor_limit();
    std::unique_ptr<funnel::server::Backend> backend;
    // What the server was started with matters for support: it must load no funnel library.
    if (const char* pre = std::getenv("LD_PRELOAD"); pre != nullptr && *pre != '\0') spdlog::info("LD_PRELOAD={}", pre);
    if (settings.backend == funnel::Backend::Sim) {
      funnel::server::SimOptions so;
      so.devices = sim_devices;
      so.memory_bytes = sim_memory_mb << 20;
      so.launch_log = sim_launch_log;
      so.fault_kernel = settings.sim_fault_kernel;
      backend = funnel::server::make_sim_backend(so);
    } else {
      // Read by cuInit: the hardware queues of the one context that carries every client's
      // streams (FUNNEL_DEVICE_CONNECTIONS: the trade-off is in config.cpp).  The server's own
      // variable wins over an inherited CUDA_DEVICE_MAX_CONNECTIONS, meant for an application.
      ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", std::to_string(settings.device_connections).c_str(), 1);
      spdlog::info("CUDA_DEVICE_MAX_CONNECTIONS={}", settings.device_connections);
      backend = funnel::server::make_cuda_backend(settings.devices);
    }

    funnel::server::ServerOptions opt;
    opt.run_dir = settings.run_dir;
    // Without --idle-exit-ms the server runs until stopped, whatever FUNNEL_IDLE_EXIT_MS says.
    if (given.contains("FUNNEL_IDLE_EXIT_MS")) opt.idle_exit = settings.idle_exit;
    opt.max_clients = settings.max_clients;
    opt.hello_timeout = std::chrono::milliseconds(hello_timeout_ms);
    opt.pending_spin = std::chrono::microseconds(settings.server_spin_us);
    opt.idle_spin = std::chrono::microseconds(settings.server_idle_spin_us);
    opt.spin_backoff = std::chrono::milliseconds(settings.server_spin_backoff_ms);
    opt.worker_threads = settings.server_workers;
    opt.staging_slots = settings.staging_slots;
    opt.staging_slot_bytes = settings.staging_slot_bytes;
    opt.handle_signals = true;
    opt.inherited_listen_fd = listen_fd;
    opt.thread_affinity = settings.server_affinity;
    opt.worker_follows_rank = settings.worker_follows_rank;
    opt.gpu_replies = settings.gpu_replies;
    opt.submit_order = settings.submit_order;
    opt.launch_batch = settings.launch_batch;
    if (settings.job_report) {
      // The report's paths are logged and handed to the chart's script: absolute.
      std::error_code abs_ec;
      const auto report_dir = std::filesystem::absolute(log_dir, abs_ec);
      opt.job_report_dir = abs_ec ? std::filesystem::path(log_dir) : report_dir;
    }
    funnel::server::Server server(std::move(opt), std::move(backend));
    try {
      server.start();
    } catch (const funnel::server::AlreadyRunning& e) {
      spdlog::error("{}", e.what());
      ready.failed(e.what());
      return 1;
    }
    ready.ready();
    if (server.run() == funnel::server::RunOutcome::Stopped) return 0;
    reexecute(argc, argv, server.listening_socket());
    const int err = errno;
    std::error_code link_ec;
    const auto exe = std::filesystem::read_symlink("/proc/self/exe", link_ec);
    // The Server's destructor removes the run directory's files as a stop does: the next
    // client starts a new funnel-server.
    spdlog::error("cannot restart: execv {}: {}; stopping instead", link_ec ? "/proc/self/exe" : exe.string(),
                  std::strerror(err));
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "funnel-server: %s\n", e.what());
    if (spdlog::default_logger()) spdlog::error("cannot start: {}", e.what());
    ready.failed(e.what());
    return 1;
  }
}
