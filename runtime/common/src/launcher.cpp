#include "funnel/common/launcher.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "funnel/ipc/syscheck.hpp"
#include "funnel/common/run_dir.hpp"

extern char** environ;

namespace funnel {
namespace {

using Clock = std::chrono::steady_clock;

// Set by funnel-run for the program when it started the server in the background.
constexpr const char* kRunStarting = "FUNNEL_RUN_STARTING";

std::string where(const Settings& s) {
  return fmt::format("run directory {} (FUNNEL_RUN_DIR)", s.run_dir.string());
}

// Takes the flock of `fd`, polling (LOCK_NB keeps the wait bounded: a blocking flock has no
// timeout) until `deadline`.  `busy` (if given) is called once when another process holds the
// lock, before the wait for it.  0 once locked, ETIMEDOUT at the deadline, or flock's errno.
int lock_until(int fd, Clock::time_point deadline, void (*busy)(void*) = nullptr, void* busy_arg = nullptr) {
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) return errno;
    if (busy != nullptr && errno == EWOULDBLOCK) std::exchange(busy, nullptr)(busy_arg);
    if (Clock::now() >= deadline) return ETIMEDOUT;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return 0;
}

// Holds the start lock; released (and closed) on scope exit.
class StartLock {
 public:
  // `busy` (if given) is called once when another process holds the lock (it is starting a
  // server), before the wait for it.
  explicit StartLock(const Settings& s, void (*busy)(void*) = nullptr, void* busy_arg = nullptr) {
    const auto path = start_lock_path(s.run_dir);
    fd_ = ipc::UniqueFd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (!fd_) throw LaunchError(fmt::format("cannot open the start lock {}: {}. Check the {}", path.string(),
                                            std::strerror(errno), where(s)));
    const int err = lock_until(fd_.get(), Clock::now() + s.attach_timeout, busy, busy_arg);
    if (err == ETIMEDOUT)
      throw LaunchError(fmt::format("timed out after {} ms waiting for the server start lock {}: another process "
                                    "is starting funnel-server and did not finish. Check the {} and the server log "
                                    "in {}, or raise FUNNEL_ATTACH_TIMEOUT_MS",
                                    s.attach_timeout.count(), path.string(), where(s), s.log_dir.string()));
    if (err != 0) throw LaunchError(fmt::format("cannot lock {}: {}", path.string(), std::strerror(err)));
  }

 private:
  ipc::UniqueFd fd_;  // closing the fd drops the flock
};

// `list` (colon-separated) without the items `drop` says so of.
template <typename Drop>
std::string filtered_list(std::string_view list, std::string_view separators, Drop drop) {
  std::string kept;
  while (!list.empty()) {
    const auto sep = list.find_first_of(separators);
    const std::string_view item = list.substr(0, sep);
    if (!item.empty() && !drop(item)) {
      if (!kept.empty()) kept += ':';
      kept += item;
    }
    list = sep == std::string_view::npos ? std::string_view{} : list.substr(sep + 1);
  }
  return kept;
}

std::string_view base_name(std::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  const auto slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

}  // namespace

std::vector<std::string> server_environment(const std::vector<std::string>& ours) {
  std::vector<std::string> env;
  for (const std::string& kv : ours) {
    if (kv.starts_with("LD_PRELOAD=")) {
      // funnel-run preloads our libcudart and MPI hooks into MPI programs; the server loads neither.
      const std::string kept = filtered_list(std::string_view(kv).substr(11), ": ", [](std::string_view item) {
        const auto base = base_name(item);
        return base.starts_with("libcudart.so") || base.starts_with("libfunnel_mpi.so");
      });
      if (!kept.empty()) env.push_back("LD_PRELOAD=" + kept);
    } else if (kv.starts_with("LD_LIBRARY_PATH=")) {
      // funnel-run puts our client driver's folder first for programs; the server needs NVIDIA's.
      const std::string kept = filtered_list(std::string_view(kv).substr(16), ":", [](std::string_view item) {
        return base_name(item) == "funnel-driver";
      });
      if (!kept.empty()) env.push_back("LD_LIBRARY_PATH=" + kept);
    } else {
      env.push_back(kv);
    }
  }
  return env;
}

namespace {

// What a starting process said through its pipe: its one-byte `word` alone (ready, or a start
// under way), or else an error text read to EOF (at most ~4 KiB); `timed_out` when neither came
// before `deadline`.
struct PipeReport {
  std::string said;
  bool timed_out = false;
  bool is(char word) const noexcept { return said.size() == 1 && said[0] == word; }
};

PipeReport read_report(int fd, Clock::time_point deadline, char word) {
  PipeReport r;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      r.timed_out = true;
      return r;
    }
    pollfd p{fd, POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left));
    if (n <= 0) continue;  // EINTR, or the wait ended: the deadline decides
    char buf[512];
    const ssize_t got = ::read(fd, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return r;  // EOF
    r.said.append(buf, static_cast<size_t>(got));
    if (r.is(word) || r.said.size() > 4096) return r;
    // an error message may come in pieces; read to EOF
  }
}

void start_server(const Settings& s) {
  const auto binary = server_binary(s);
  int fds[2];
  FUNNEL_SYSCHECK(::pipe2(fds, O_CLOEXEC));
  ipc::UniqueFd rd(fds[0]), wr(fds[1]);

  std::vector<std::string> args{binary.string(), "--run-dir", s.run_dir.string(), "--backend", to_string(s.backend),
                                "--idle-exit-ms", std::to_string(s.idle_exit.count()), "--log-dir",
                                s.log_dir.string(), "--log-level", s.log_level, "--ready-fd", "3"};
  if (!s.devices.empty()) {
    args.emplace_back("--devices");
    args.push_back(fmt::format("{}", fmt::join(s.devices, ",")));
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> ours;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) ours.emplace_back(*e);
  auto env_strings = server_environment(ours);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  // dup2 onto 3 clears close-on-exec there (also when the pipe already is fd 3).
  posix_spawn_file_actions_adddup2(&fa, wr.get(), 3);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, binary.c_str(), &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  wr.reset();
  if (rc != 0)
    throw LaunchError(fmt::format("cannot start {}: {}. Set FUNNEL_SERVER to the funnel-server binary ({})",
                                  binary.string(), std::strerror(rc), where(s)));
  // The server daemonizes: the spawned process exits once the daemon is forked.
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }

  const PipeReport report = read_report(rd.get(), Clock::now() + s.attach_timeout, 'R');
  if (report.timed_out)
    throw LaunchError(fmt::format("funnel-server ({}) did not become ready within {} ms; see its log in {} ({}), "
                                  "or raise FUNNEL_ATTACH_TIMEOUT_MS",
                                  binary.string(), s.attach_timeout.count(), s.log_dir.string(), where(s)));
  const std::string& said = report.said;
  if (!said.empty() && said[0] == 'R') return;
  if (said.empty())
    throw LaunchError(fmt::format("funnel-server ({}) exited without becoming ready (exit status {}); see its log in "
                                  "{} ({})",
                                  binary.string(), WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1, s.log_dir.string(),
                                  where(s)));
  throw LaunchError(fmt::format("funnel-server failed to start: {} ({})", said, where(s)));
}

}  // namespace

std::filesystem::path own_file() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&own_file), &info) != 0 && info.dli_fname != nullptr &&
      info.dli_fname[0] != '\0') {
    std::error_code ec;
    auto p = std::filesystem::canonical(info.dli_fname, ec);
    if (!ec) return p;
  }
  std::error_code ec;
  return std::filesystem::read_symlink("/proc/self/exe", ec);
}

std::filesystem::path server_binary(const Settings& s) {
  if (!s.server_binary.empty()) return s.server_binary;
  const auto dir = own_file().parent_path();
  for (const auto& candidate : {dir / ".." / "bin" / "funnel-server", dir / "funnel-server"}) {
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.lexically_normal();
  }
  return (dir / ".." / "bin" / "funnel-server").lexically_normal();
}

ipc::UniqueFd connect_server(const Settings& s) noexcept {
  int err = 0;
  return ipc::connect_seqpacket(socket_path(s.run_dir), err);
}

ipc::UniqueFd connect_or_start_server(const Settings& s, bool* started, void (*locked)(void*), void* locked_arg) {
  if (started != nullptr) *started = false;
  try {
    ensure_run_dir(s.run_dir);
  } catch (const std::exception& e) {
    throw LaunchError(e.what());
  }
  if (auto fd = connect_server(s)) {
    if (locked != nullptr) locked(locked_arg);
    return fd;
  }
  // `locked` runs at most once: when another process holds the lock, or once this one does.
  StartLock lock(s, locked, locked_arg);
  if (locked != nullptr) locked(locked_arg);
  // Someone may have started it while we waited for the lock.
  if (auto fd = connect_server(s)) return fd;
  try {
    try {
      start_server(s);
    } catch (const std::system_error& e) {
      throw LaunchError(fmt::format("cannot start funnel-server: {} ({})", e.what(), where(s)));
    }
  } catch (const LaunchError&) {
    // Another process's server may have won a race for the directory: use it.
    if (auto fd = connect_server(s)) return fd;
    // Nothing of the failed start stays behind (the start lock, a directory made for it);
    // we hold the start lock, so where no server listens nobody else is starting one.
    if (no_server_listens(s.run_dir)) remove_run_dir_files(s.run_dir, true);
    throw;
  }
  if (started != nullptr) *started = true;
  int err = 0;
  auto fd = ipc::connect_seqpacket(socket_path(s.run_dir), err);
  if (!fd)
    throw LaunchError(fmt::format("funnel-server reported ready but {} refuses connections: {} ({})",
                                  socket_path(s.run_dir).string(), std::strerror(err), where(s)));
  return fd;
}

namespace {

// What the background starter tells funnel-run through its pipe: 'L' once a start is under
// way (or a server answers); before that, the text of an error that stopped it.
void tell_locked(void* fd) {
  int& w = *static_cast<int*>(fd);
  if (w < 0) return;
  const char c = 'L';
  while (::write(w, &c, 1) < 0 && errno == EINTR) {
  }
  ::close(std::exchange(w, -1));
}

[[noreturn]] void run_background_starter(const Settings& s, int w) {
  // Its own session: a signal to the program's process group does not stop a start halfway.
  ::setsid();
  if (const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC); null >= 0) {
    ::dup2(null, STDIN_FILENO);
    ::dup2(null, STDOUT_FILENO);  // stderr stays: a later failure is said there
  }
  int code = 0;
  try {
    (void)connect_or_start_server(s, nullptr, &tell_locked, &w);
  } catch (const std::exception& e) {
    code = 4;
    if (w >= 0) {
      const std::string text = e.what();
      (void)!::write(w, text.data(), text.size());
    } else {
      std::fprintf(stderr, "funnel-run: %s\n", e.what());
    }
  }
  ::_exit(code);
}

}  // namespace

void start_server_in_background(const Settings& s) {
  if (connect_server(s)) return;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw LaunchError(fmt::format("cannot start funnel-server: pipe: {} ({})", std::strerror(errno), where(s)));
  ipc::UniqueFd rd(fds[0]), wr(fds[1]);
  const pid_t child = ::fork();
  if (child < 0)
    throw LaunchError(fmt::format("cannot start funnel-server: fork: {} ({})", std::strerror(errno), where(s)));
  if (child == 0) {
    // Forked twice: the starter is not the program's child (a program that waits for all its
    // children, or reaps them, never meets it).
    const pid_t starter = ::fork();
    if (starter != 0) ::_exit(starter < 0 ? 1 : 0);
    ::close(rd.release());
    run_background_starter(s, wr.release());
  }
  wr.reset();
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw LaunchError(fmt::format("cannot start funnel-server: fork failed ({})", where(s)));
  // Timed out: the starter still waits for something (another start's lock): the program goes on.
  const PipeReport report = read_report(rd.get(), Clock::now() + s.attach_timeout, 'L');
  if (!report.said.empty() && !report.is('L')) throw LaunchError(report.said);
  ::setenv(kRunStarting, "1", 1);
}

bool started_in_background() noexcept {
  const char* v = std::getenv(kRunStarting);
  return v != nullptr && std::strcmp(v, "1") == 0;
}

void wait_for_background_start(const Settings& s) noexcept {
  if (!started_in_background()) return;
  try {
    // No O_CREAT: without the lock file no start is under way (and none is made here).
    ipc::UniqueFd fd(::open(start_lock_path(s.run_dir).c_str(), O_RDWR | O_CLOEXEC));
    if (fd) (void)lock_until(fd.get(), Clock::now() + s.attach_timeout);  // over, failed or timed out: go on
  } catch (...) {
  }
}

char process_state(pid_t pid) noexcept {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  std::FILE* f = std::fopen(path, "re");
  if (f == nullptr) return '\0';
  char buf[512];
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // "pid (comm) S ...": the command name may contain anything; the state follows the last ')'.
  const char* paren = std::strrchr(buf, ')');
  return paren != nullptr && paren[1] == ' ' ? paren[2] : '\0';
}

}  // namespace funnel
