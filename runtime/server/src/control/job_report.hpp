// The job report (doc/accounting.md): what a stopping server writes about every client that
// attached during its life, as a table, as JSON and as a chart drawn by a Python script.
// The per-client record is also what `funnelctl clients` shows of a client (control.cpp), so
// that the two never name a field differently.
#pragma once
#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "session/counter_ops.hpp"
#include "session/cpu_times.hpp"

namespace funnel::server {

class ClientSession;

// How a client's session ended.
enum class ClientEnd { Detached, Died, Terminated, AttachedAtStop };
const char* to_string(ClientEnd e) noexcept;

// One client as the report and `funnelctl clients` show it.
struct ClientRecord {
  uint32_t id = 0;
  pid_t pid = 0;
  int mpi_rank = -1;  // -1: not an MPI rank (or its launcher is not known)
  std::string command;
  int home_device = -1;  // -1: it never got past attaching
  double gpu_fraction = 1.0;
  std::chrono::system_clock::time_point attached, left;  // left: when it ended, or now
  uint64_t launches = 0, commands = 0, bytes_h2d = 0, bytes_d2h = 0, device_memory_peak = 0, errors = 0,
           gpu_busy_ns = 0;
  uint64_t local_messages = 0, local_bytes = 0;  // GPU-local messages copied on its stream (ClientCounters)
  std::array<uint64_t, kPickupBuckets> pickup{};  // waited calls by pick-up delay (counter_ops.hpp)
  std::array<uint64_t, kPickupBuckets> submit{};  // and by the worker's time on them
  std::array<uint64_t, kOpcodeSlots> waited{};     // and by opcode
  std::optional<CpuTimes> worker_cpu, client_cpu;  // ClientSession::worker_cpu, client_cpu
  uint64_t spin_backoffs = 0;                      // ClientCounters::spin_backoffs
};

// The session's record as of now (left = now).
ClientRecord record_of(const ClientSession& s);
// Its fields under funnelctl's names: id, pid, command, mpi_rank, home_device, gpu_fraction,
// attached_s, device_memory_peak_bytes, gpu_busy_s, commands, bytes_h2d, bytes_d2h, local_messages,
// local_bytes, launches, errors,
// call_pickup_us and call_submit_us (see pickup_json), waited_calls ({"FuncGetAttributes": n, ...}:
// the waited calls by command, those made), cpu_s (see cpu_json), spin_backoffs.
nlohmann::json to_json(const ClientRecord& r);
// The pick-up delays (or the worker's times) of the waited calls:
// {"calls": n, "p50": .., "p90": .., "p99": .., "max": ..},
// each the upper bound in microseconds of the log2 bucket that holds that quantile (null
// without calls).
nlohmann::json pickup_json(const std::array<uint64_t, kPickupBuckets>& buckets);
// The waited calls by command name, those with a count (an object; empty without any).
nlohmann::json waited_json(const std::array<uint64_t, kOpcodeSlots>& waited);
// That bound for quantile q in [0, 1] (1: the largest delay); nullopt without calls.
std::optional<uint64_t> pickup_quantile_us(const std::array<uint64_t, kPickupBuckets>& buckets, double q);
// CPU time in seconds: {"worker": .., "worker_runqueue": .., "client": .., "client_runqueue": ..},
// each null where not measured.
nlohmann::json cpu_json(const std::optional<CpuTimes>& worker, const std::optional<CpuTimes>& client);

// The clients that left, as the report needs them.  Bounded: past `capacity` records a
// departed client is only counted (dropped()), so a server of a long job with many short
// clients does not grow without end.
class ClientLedger {
 public:
  static constexpr size_t kDefaultCapacity = 100000;
  struct Entry {
    ClientRecord record;
    ClientEnd ended = ClientEnd::Detached;
  };

  explicit ClientLedger(size_t capacity = kDefaultCapacity) : capacity_(capacity) {}
  void add(ClientRecord record, ClientEnd ended);
  const std::vector<Entry>& entries() const noexcept { return entries_; }
  uint64_t dropped() const noexcept { return dropped_; }

 private:
  size_t capacity_;
  std::vector<Entry> entries_;
  uint64_t dropped_ = 0;
};

// The server's part of the report.
struct ServerSummary {
  pid_t pid = 0;
  std::string host;  // empty: write_job_report fills in gethostname()
  std::string backend;
  int devices = 0;
  std::chrono::system_clock::time_point started, stopped;
  uint64_t attached = 0, detached = 0, died = 0, terminated = 0;  // ServerTotals' client counts
};

struct JobReport {
  ServerSummary server;
  std::vector<ClientLedger::Entry> clients;  // ordered by MPI rank, then id
  uint64_t dropped = 0;
};

// The report's files in `dir`: funnel-report-<host>-<server pid>.{txt,json,png}, so that the
// servers of a job (one per node) and successive runs write to different names.
struct ReportPaths {
  std::filesystem::path text, json, chart;
};
ReportPaths report_paths(const std::filesystem::path& dir, const std::string& host, pid_t pid);

nlohmann::json report_json(const JobReport& r);
// chart_line: what the text says of the chart (where it is drawn, or why not and how to draw it).
std::string report_text(const JobReport& r, const ReportPaths& paths, const std::string& chart_line);

// Writes the text and JSON into `dir`, then starts the chart's script detached (never waited
// for), and logs one line naming the files.  Never throws: a file it cannot write is a warning
// naming the path and the cause, and the server stops as it would without a report.
void write_job_report(const std::filesystem::path& dir, JobReport report) noexcept;

}  // namespace funnel::server
