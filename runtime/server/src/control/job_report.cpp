#include "control/job_report.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "session/client_session.hpp"
#include "funnel/common/run_dir.hpp"

namespace funnel::server {
namespace {

namespace fs = std::filesystem;
using SystemClock = std::chrono::system_clock;

uint64_t load(const std::atomic<uint64_t>& a) noexcept { return a.load(std::memory_order_relaxed); }

double seconds(SystemClock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string iso_utc(SystemClock::time_point t) {
  return fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", fmt::gmtime(SystemClock::to_time_t(t)));
}

// Where the chart's script lies: ../share/funnel beside the server's binary (the build tree
// and an install have the same shape).
fs::path plot_script() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "share/funnel/funnel-report-plot.py";
  return exe.parent_path().parent_path() / "share" / "funnel" / "funnel-report-plot.py";
}

constexpr const char* kPython = "/usr/bin/python3";

// Whether /usr/bin/python3 can draw the chart; the reason when not.  matplotlib is looked
// for where Debian's python3-matplotlib and pip put it: importing it here would cost the
// stop a second.
std::string chart_unavailable(const fs::path& script) {
  std::error_code ec;
  if (!fs::exists(script, ec)) return fmt::format("the chart's script {} is missing", script.string());
  if (::access(kPython, X_OK) != 0) return fmt::format("{} is not installed", kPython);
  if (fs::exists("/usr/lib/python3/dist-packages/matplotlib/__init__.py", ec)) return "";
  for (const char* root : {"/usr/local/lib", "/usr/lib"}) {
    for (const auto& e : fs::directory_iterator(root, ec)) {
      const std::string name = e.path().filename().string();
      if (!name.starts_with("python3")) continue;
      for (const char* sub : {"dist-packages", "site-packages"})
        if (fs::exists(e.path() / sub / "matplotlib" / "__init__.py", ec)) return "";
    }
  }
  return fmt::format("{} has no matplotlib (Debian: apt-get install python3-matplotlib)", kPython);
}

// Starts argv detached: a session of its own, reparented to init at once (double fork), its
// standard streams on /dev/null, every signal unblocked and at its default (the server blocks
// SIGTERM and ignores SIGPIPE), and killed by SIGALRM after 60 s.  Only the child's exit is
// waited for, which follows its fork at once.  Returns "" or why it could not start.
std::string spawn_detached(const std::vector<std::string>& args) noexcept {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t child = ::fork();
  if (child < 0) return fmt::format("fork: {}", std::strerror(errno));
  if (child == 0) {
    // Async-signal-safe calls only from here: the server has threads.
    ::setsid();
    const pid_t grandchild = ::fork();
    if (grandchild != 0) ::_exit(grandchild < 0 ? 1 : 0);
    const int null = ::open("/dev/null", O_RDWR);
    if (null >= 0) {
      ::dup2(null, STDIN_FILENO);
      ::dup2(null, STDOUT_FILENO);
      ::dup2(null, STDERR_FILENO);
    }
    ::syscall(SYS_close_range, 3U, ~0U, 0U);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::alarm(60);  // survives the exec: a hung plotter ends
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "its fork failed";
  return "";
}

// Writes through a temporary file and a rename, so that a reader never sees half a report.
// Returns "" or the cause.
std::string write_file(const fs::path& path, std::string_view text) noexcept {
  const std::string tmp = path.string() + ".tmp";
  // Created afresh, never through a link (the log directory is checked as well: ensure_log_dir).
  const auto create = [&] { return ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644); };
  int fd = create();
  if (fd < 0 && errno == EEXIST && ::unlink(tmp.c_str()) == 0) fd = create();  // left by a server killed mid-write
  if (fd < 0) return std::strerror(errno);
  std::string why;
  for (size_t done = 0; done < text.size() && why.empty();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      why = std::strerror(errno);
    else
      done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0 && why.empty()) why = std::strerror(errno);
  if (why.empty() && ::rename(tmp.c_str(), path.c_str()) != 0) why = std::strerror(errno);
  if (!why.empty()) ::unlink(tmp.c_str());
  return why;
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown-host";
  return buf;
}

// One row of the text's table: right-aligned numbers, left-aligned words, the command last.
struct Column {
  const char* title;
  bool left;
};
constexpr Column kColumns[] = {{"RANK", false},         {"PID", false},          {"GPU", false},
                               {"FRACTION", false},     {"LAUNCHES", false},     {"MB H2D", false},
                               {"MB D2H", false},       {"PEAK MiB", false},     {"GPU BUSY S", false},
                               {"PICKUP US", false},    {"WORKER CPU S", false}, {"WORKER RUNQ S", false},
                               {"ERRORS", false},       {"ENDED", true},         {"COMMAND", true}};
constexpr size_t kColumnCount = std::size(kColumns);

// "p50/p99" of the pick-up delays in microseconds ("-": no waited call).
std::string pickup_text(const std::array<uint64_t, kPickupBuckets>& buckets) {
  const auto p50 = pickup_quantile_us(buckets, 0.5);
  const auto p99 = pickup_quantile_us(buckets, 0.99);
  return p50 && p99 ? fmt::format("{}/{}", *p50, *p99) : std::string("-");
}

// Run (or run-queue) seconds with 3 decimals, "-" where not measured (a pooled worker).
std::string seconds_or_dash(const std::optional<CpuTimes>& t, bool wait) {
  if (!t) return "-";
  return fmt::format("{:.3f}", static_cast<double>(wait ? t->wait_ns : t->run_ns) * 1e-9);
}

std::vector<std::string> row_of(const ClientLedger::Entry& e) {
  const ClientRecord& r = e.record;
  auto dash_or = [](int v) { return v < 0 ? std::string("-") : std::to_string(v); };
  return {dash_or(r.mpi_rank),
          std::to_string(r.pid),
          dash_or(r.home_device),
          fmt::format("{:.2f}", r.gpu_fraction),
          std::to_string(r.launches),
          fmt::format("{:.2f}", static_cast<double>(r.bytes_h2d) / 1e6),
          fmt::format("{:.2f}", static_cast<double>(r.bytes_d2h) / 1e6),
          fmt::format("{:.1f}", static_cast<double>(r.device_memory_peak) / (1 << 20)),
          fmt::format("{:.3f}", static_cast<double>(r.gpu_busy_ns) * 1e-9),
          pickup_text(r.pickup),
          seconds_or_dash(r.worker_cpu, false),
          seconds_or_dash(r.worker_cpu, true),
          std::to_string(r.errors),
          to_string(e.ended),
          r.command};
}

std::string table(const std::vector<ClientLedger::Entry>& clients) {
  std::vector<std::vector<std::string>> rows;
  rows.emplace_back();
  for (const Column& c : kColumns) rows.back().emplace_back(c.title);
  for (const auto& e : clients) rows.push_back(row_of(e));
  size_t width[kColumnCount] = {};
  for (const auto& row : rows)
    for (size_t i = 0; i < kColumnCount; ++i) width[i] = std::max(width[i], row[i].size());
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < kColumnCount; ++i) {
      if (i > 0) line += "  ";
      if (i + 1 == kColumnCount)
        line += row[i];
      else if (kColumns[i].left)
        line += fmt::format("{:<{}}", row[i], width[i]);
      else
        line += fmt::format("{:>{}}", row[i], width[i]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

}  // namespace

const char* to_string(ClientEnd e) noexcept {
  switch (e) {
    case ClientEnd::Detached:
      return "detached";
    case ClientEnd::Died:
      return "died";
    case ClientEnd::Terminated:
      return "terminated";
    case ClientEnd::AttachedAtStop:
      return "attached at stop";
  }
  return "?";
}

ClientRecord record_of(const ClientSession& s) {
  const auto& c = s.counters();
  const bool running = s.phase() == ClientSession::Phase::Running;
  const auto share_bp = s.stream_placement().share_bp;
  ClientRecord r;
  r.id = s.id();
  r.pid = s.pid();
  r.mpi_rank = s.mpi_rank();
  r.command = s.command();
  r.home_device = running ? s.home_device() : -1;
  r.gpu_fraction = share_bp == 0 ? 1.0 : share_bp / 10000.0;
  r.left = SystemClock::now();
  r.attached =
      r.left - std::chrono::duration_cast<SystemClock::duration>(std::chrono::steady_clock::now() - s.attached_at());
  r.launches = load(c.launches);
  r.commands = load(c.commands);
  r.bytes_h2d = load(c.bytes_h2d);
  r.bytes_d2h = load(c.bytes_d2h);
  r.local_messages = load(c.local_messages);
  r.local_bytes = load(c.local_bytes);
  r.device_memory_peak = load(c.device_memory_peak);
  r.errors = load(c.errors);
  r.gpu_busy_ns = load(c.gpu_busy_ns);
  for (size_t b = 0; b < kPickupBuckets; ++b) {
    r.pickup[b] = load(c.pickup[b]);
    r.submit[b] = load(c.submit[b]);
  }
  for (size_t op = 0; op < kOpcodeSlots; ++op) r.waited[op] = load(c.waited[op]);
  r.spin_backoffs = load(c.spin_backoffs);
  r.worker_cpu = s.worker_cpu();
  r.client_cpu = s.client_cpu();
  return r;
}

std::optional<uint64_t> pickup_quantile_us(const std::array<uint64_t, kPickupBuckets>& buckets, double q) {
  uint64_t calls = 0;
  for (uint64_t n : buckets) calls += n;
  if (calls == 0) return std::nullopt;
  auto upper_us = [](size_t b) { return uint64_t{1} << b; };  // bucket b: below 2^b us
  const auto want = static_cast<uint64_t>(q * static_cast<double>(calls - 1)) + 1;  // the want-th call
  uint64_t seen = 0;
  for (size_t b = 0; b < kPickupBuckets; ++b)
    if ((seen += buckets[b]) >= want) return upper_us(b);
  return upper_us(kPickupBuckets - 1);
}

nlohmann::json pickup_json(const std::array<uint64_t, kPickupBuckets>& buckets) {
  uint64_t calls = 0;
  for (uint64_t n : buckets) calls += n;
  auto quantile = [&](double q) -> nlohmann::json {
    const auto us = pickup_quantile_us(buckets, q);
    return us ? nlohmann::json(*us) : nlohmann::json(nullptr);
  };
  return {{"calls", calls}, {"p50", quantile(0.5)}, {"p90", quantile(0.9)}, {"p99", quantile(0.99)},
          {"max", quantile(1.0)}};
}

nlohmann::json cpu_json(const std::optional<CpuTimes>& worker, const std::optional<CpuTimes>& client) {
  auto s = [](const std::optional<CpuTimes>& t, bool wait) -> nlohmann::json {
    if (!t) return nullptr;
    return static_cast<double>(wait ? t->wait_ns : t->run_ns) * 1e-9;
  };
  return {{"worker", s(worker, false)},
          {"worker_runqueue", s(worker, true)},
          {"client", s(client, false)},
          {"client_runqueue", s(client, true)}};
}

nlohmann::json waited_json(const std::array<uint64_t, kOpcodeSlots>& waited) {
  nlohmann::json j = nlohmann::json::object();
  for (size_t op = 0; op < kOpcodeSlots; ++op) {
    if (waited[op] == 0) continue;
    const char* name = ipc::command_name(static_cast<ipc::Opcode>(op));
    j[name != nullptr ? std::string(name) : fmt::format("opcode {}", op)] = waited[op];
  }
  return j;
}

nlohmann::json to_json(const ClientRecord& r) {
  using nlohmann::json;
  return {{"id", r.id},
          {"pid", r.pid},
          {"command", r.command},
          {"mpi_rank", r.mpi_rank},
          {"home_device", r.home_device >= 0 ? json(r.home_device) : json(nullptr)},
          {"gpu_fraction", r.gpu_fraction},
          {"attached_s", seconds(r.left - r.attached)},
          {"device_memory_peak_bytes", r.device_memory_peak},
          {"gpu_busy_s", static_cast<double>(r.gpu_busy_ns) * 1e-9},
          {"commands", r.commands},
          {"bytes_h2d", r.bytes_h2d},
          {"bytes_d2h", r.bytes_d2h},
          {"local_messages", r.local_messages},
          {"local_bytes", r.local_bytes},
          {"launches", r.launches},
          {"errors", r.errors},
          {"call_pickup_us", pickup_json(r.pickup)},
          {"call_submit_us", pickup_json(r.submit)},
          {"waited_calls", waited_json(r.waited)},
          {"cpu_s", cpu_json(r.worker_cpu, r.client_cpu)},
          {"spin_backoffs", r.spin_backoffs}};
}

void ClientLedger::add(ClientRecord record, ClientEnd ended) {
  if (entries_.size() >= capacity_) {
    ++dropped_;
    return;
  }
  entries_.push_back({std::move(record), ended});
}

ReportPaths report_paths(const fs::path& dir, const std::string& host, pid_t pid) {
  const fs::path base = dir / fmt::format("funnel-report-{}-{}", sanitize_for_filename(host), pid);
  return {base.string() + ".txt", base.string() + ".json", base.string() + ".png"};
}

nlohmann::json report_json(const JobReport& r) {
  using nlohmann::json;
  const ServerSummary& s = r.server;
  json clients = json::array();
  for (const auto& e : r.clients) {
    json c = to_json(e.record);
    c["attached"] = iso_utc(e.record.attached);
    c["left"] = iso_utc(e.record.left);
    c["ended"] = to_string(e.ended);
    clients.push_back(std::move(c));
  }
  json devices = json::array();
  for (int d = 0; d < s.devices; ++d) devices.push_back(d);
  return {{"server",
           {{"pid", s.pid},
            {"host", s.host},
            {"backend", s.backend},
            {"devices", devices},
            {"started", iso_utc(s.started)},
            {"stopped", iso_utc(s.stopped)},
            {"uptime_s", seconds(s.stopped - s.started)},
            {"clients_attached", s.attached},
            {"detached", s.detached},
            {"died", s.died},
            {"terminated", s.terminated}}},
          {"clients", clients},
          {"dropped_records", r.dropped}};
}

std::string report_text(const JobReport& r, const ReportPaths& paths, const std::string& chart_line) {
  const ServerSummary& s = r.server;
  size_t at_stop = 0;
  for (const auto& e : r.clients) at_stop += e.ended == ClientEnd::AttachedAtStop ? 1 : 0;
  std::string out = fmt::format(
      "funnel-server job report\n"
      "host      {}\n"
      "server    pid {}, {} backend, {} device(s)\n"
      "started   {}\n"
      "stopped   {} (up {:.1f} s)\n"
      "clients   {} attached: {} detached, {} died, {} terminated, {} attached at stop\n",
      s.host, s.pid, s.backend, s.devices, iso_utc(s.started), iso_utc(s.stopped), seconds(s.stopped - s.started),
      s.attached, s.detached, s.died, s.terminated, at_stop);
  if (r.dropped > 0)
    out += fmt::format("dropped   {} client record(s) past the first {} are not listed (only counted above)\n",
                       r.dropped, r.clients.size());
  out += fmt::format("json      {}\nchart     {}\n\n", paths.json.string(), chart_line);
  out += table(r.clients);
  return out;
}

void write_job_report(const fs::path& dir, JobReport report) noexcept {
  try {
    if (report.server.host.empty()) report.server.host = host_name();
    std::sort(report.clients.begin(), report.clients.end(), [](const auto& a, const auto& b) {
      return std::pair(a.record.mpi_rank, a.record.id) < std::pair(b.record.mpi_rank, b.record.id);
    });
    const ReportPaths paths = report_paths(dir, report.server.host, report.server.pid);
    const fs::path script = plot_script();
    const std::string unavailable = chart_unavailable(script);
    const std::string later =
        fmt::format("python3 {} {} {}", script.string(), paths.json.string(), paths.chart.string());
    const std::string chart_line = unavailable.empty()
                                       ? fmt::format("{} (drawn in the background; if it is missing, draw it with: {})",
                                                     paths.chart.string(), later)
                                       : fmt::format("not drawn: {}; draw it later with: {}", unavailable, later);
    std::string written;
    const auto put = [&](const fs::path& path, const std::string& text) {
      if (const std::string why = write_file(path, text); !why.empty()) {
        spdlog::warn("cannot write the job report {}: {}", path.string(), why);
        return false;
      }
      written += (written.empty() ? "" : ", ") + path.string();
      return true;
    };
    put(paths.text, report_text(report, paths, chart_line));
    const bool json_written = put(paths.json, report_json(report).dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    std::string chart = json_written ? "no chart: " + unavailable : "no chart without the JSON";
    if (json_written && unavailable.empty()) {
      const std::string why = spawn_detached({kPython, script.string(), paths.json.string(), paths.chart.string()});
      chart = why.empty() ? fmt::format("chart {} being drawn", paths.chart.string())
                          : fmt::format("cannot start the chart's script: {}", why);
    }
    if (!written.empty())
      spdlog::info("job report of {} client(s): {}; {}", report.clients.size() + report.dropped, written, chart);
  } catch (const std::exception& e) {
    spdlog::warn("cannot write the job report in {}: {}", dir.string(), e.what());
  } catch (...) {
    spdlog::warn("cannot write the job report in {}: an unknown exception", dir.string());
  }
}

}  // namespace funnel::server
