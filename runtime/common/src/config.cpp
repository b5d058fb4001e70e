#include "funnel/common/config.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "funnel/common/run_dir.hpp"

namespace funnel {

const char* to_string(Backend b) noexcept { return b == Backend::Cuda ? "cuda" : "sim"; }

const char* to_string(MpiHooks h) noexcept { return h == MpiHooks::Auto ? "auto" : h == MpiHooks::On ? "1" : "0"; }

namespace {

[[noreturn]] void bad(const char* var, const std::string& value, const char* accepted) {
  throw ConfigError(fmt::format("{}='{}' is not valid: expected {}", var, value, accepted));
}

int64_t parse_int(const char* var, const std::string& v, int64_t lo, int64_t hi, const char* accepted) {
  int64_t out = 0;
  const auto* end = v.data() + v.size();
  auto [p, ec] = std::from_chars(v.data(), end, out);
  if (ec != std::errc{} || p != end || out < lo || out > hi) bad(var, v, accepted);
  return out;
}

const char* accepted_of(const char* var) {
  const SettingInfo* row = find_setting(var);
  return row != nullptr ? row->accepted : "a valid value";
}

// FUNNEL_GPU_FRACTION: "0.25" or "25%"; CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: "25" (a
// percentage without the sign).  In 1/10000 of the GPU, at least 1; 10000 (all) is 0.
uint32_t parse_share(const char* var, const std::string& v, bool percent_only) {
  const bool percent = percent_only || (!v.empty() && v.back() == '%');
  const std::string_view num(v.data(), v.size() - (percent && !percent_only ? 1 : 0));
  double x = 0;
  const auto* end = num.data() + num.size();
  auto [p, ec] = std::from_chars(num.data(), end, x);
  const char* accepted = percent_only ? "a percentage of the GPU's SMs above 0 and at most 100, e.g. 25 or 12.5"
                                      : accepted_of(var);
  if (num.empty() || ec != std::errc{} || p != end) bad(var, v, accepted);
  const double share = percent ? x / 100 : x;
  if (!(share > 0 && share <= 1)) bad(var, v, accepted);
  const auto bp = static_cast<uint32_t>(std::max(1.0, share * 10000 + 0.5));
  return bp >= 10000 ? 0 : bp;
}

// "0,3,5" -> GPU ordinals 0..63; an empty item, or a value ending in a comma, is bad.
std::vector<int> parse_ordinals(const char* var, const std::string& value) {
  std::vector<int> out;
  std::string_view rest = value;
  while (true) {
    const auto comma = rest.find(',');
    const std::string item(rest.substr(0, comma));
    // Report the whole value, not just the item that failed ("0,,1" rather than '').
    try {
      out.push_back(static_cast<int>(parse_int(var, item, 0, 63, accepted_of(var))));
    } catch (const ConfigError&) {
      bad(var, value, accepted_of(var));
    }
    if (comma == std::string_view::npos) return out;
    rest = rest.substr(comma + 1);
  }
}

// "512M" -> bytes; false when malformed, zero or past 2^64.
bool parse_size(std::string_view v, uint64_t& out) {
  uint64_t n = 0;
  const auto* end = v.data() + v.size();
  auto [p, ec] = std::from_chars(v.data(), end, n);
  if (ec != std::errc{} || p == v.data()) return false;
  std::string_view unit(p, static_cast<size_t>(end - p));
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b') && unit.size() == 2) unit.remove_suffix(1);
  unsigned shift = 0;
  if (unit.size() == 1) {
    switch (unit[0]) {
      case 'K': case 'k': shift = 10; break;
      case 'M': case 'm': shift = 20; break;
      case 'G': case 'g': shift = 30; break;
      case 'T': case 't': shift = 40; break;
      default: return false;
    }
  } else if (!unit.empty()) {
    return false;
  }
  if (n == 0 || (shift != 0 && n > (UINT64_MAX >> shift))) return false;
  out = n << shift;
  return true;
}

std::string size_text(uint64_t b) {
  for (auto [shift, unit] : {std::pair{40u, 'T'}, {30u, 'G'}, {20u, 'M'}, {10u, 'K'}})
    if (b % (uint64_t{1} << shift) == 0) return fmt::format("{}{}", b >> shift, unit);
  return std::to_string(b);
}

// An integer that setting_accepts() accepted.
int64_t integer_of(const std::string& v) {
  int64_t out = 0;
  std::from_chars(v.data(), v.data() + v.size(), out);
  return out;
}
uint32_t u32(const std::string& v) { return static_cast<uint32_t>(integer_of(v)); }

// The free-form checks: whether the text parses.
template <typename Parse>
bool parses(Parse&& parse) {
  try {
    parse();
    return true;
  } catch (const ConfigError&) {
    return false;
  }
}
bool non_empty(const std::string& v) { return !v.empty(); }
bool accepts_run_dir(const std::string& v) {
  // The socket path, <dir>/server.sock, must fit in a Unix socket address (107 characters).
  return !v.empty() && v[0] == '/' && (std::filesystem::path(v) / "server.sock").string().size() <= 107;
}
bool accepts_job_id(const std::string& v) { return !v.empty() && sanitize_for_filename(v) == v; }
bool accepts_ordinals(const std::string& v) {
  return parses([&] { parse_ordinals("", v); });
}
bool accepts_device_mem_limit(const std::string& v) {
  Settings scratch;
  return parses([&] { parse_device_mem_limit("", v, scratch); });
}
bool accepts_ranks_per_gpu(const std::string& v) {
  return v == "even" || parses([&] { parse_int("", v, 1, 4096, ""); });
}
bool accepts_fraction(const std::string& v) {
  return parses([&] { parse_share("", v, false); });
}

void store_ranks_per_gpu(Settings& s, const std::string& v) {
  s.ranks_per_gpu_set = true;
  s.ranks_per_gpu = v == "even" ? 0 : static_cast<int>(integer_of(v));
}
void store_gpu_fraction(Settings& s, const std::string& v) {
  s.gpu_share_bp = parse_share("FUNNEL_GPU_FRACTION", v, false);
  s.gpu_share_from = "FUNNEL_GPU_FRACTION";
}
std::string device_mem_limit_text(const Settings& s) {
  if (s.device_mem_limit_from.empty()) return "(none)";
  std::vector<std::string> items;
  if (s.device_mem_limit_all != 0) items.push_back(size_text(s.device_mem_limit_all));
  for (const auto& [d, b] : s.device_mem_limit) items.push_back(fmt::format("{}={}", d, size_text(b)));
  return fmt::format("{}", fmt::join(items, ","));
}

// The CUDA MPS variables that stand in for a FUNNEL_* one that is unset.
const char* mps_pinned_device_mem_limit(Settings& s, const Settings::Lookup& env) {
  const char* var = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT";
  auto v = env(var);
  if (!v) return nullptr;
  parse_device_mem_limit(var, *v, s);
  return var;
}
const char* mps_active_thread_percentage(Settings& s, const Settings::Lookup& env) {
  const char* var = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE";
  auto v = env(var);
  if (!v) return nullptr;
  s.gpu_share_bp = parse_share(var, *v, true);
  s.gpu_share_from = var;
  return var;
}
const char* mps_client_priority(Settings& s, const Settings::Lookup& env) {
  const char* var = "CUDA_MPS_CLIENT_PRIORITY";
  auto v = env(var);
  if (!v) return nullptr;
  if (*v != "0" && *v != "1") bad(var, *v, "0 (normal) or 1 (below normal)");
  s.below_normal_priority = *v == "1";
  return var;
}

}  // namespace

// Each row: the four texts of doc/configuration.md (scripts/gen-config-doc.py copies them from
// here), then how the value is checked, stored and shown, funnel-server's option for it, and
// the CUDA MPS variable that stands in for it. The defaults are Settings' initializers
// (setting_defaults.hpp); config_test checks that the default texts say the same.
const std::vector<SettingInfo>& setting_table() {
  static const std::vector<SettingInfo> table{
      {{"FUNNEL_RUN_DIR", "/dev/shm/funnel-<uid>-<job id>",
        "an absolute path, socket path under 108 characters; a new or empty directory, or one funnel made",
        "the job's run directory: the server's socket, start lock, channel and pinned-buffer files (mode 0700). "
        "funnel creates it (or adopts it empty) and marks it (.funnel-run-dir); a directory holding other files "
        "is refused, since the server removes the files it makes there when it stops, and the directory itself "
        "only where funnel created it"},
       FreeForm{accepts_run_dir}, [](auto& s, auto& v) { s.run_dir = v; }, [](auto& s) { return s.run_dir.string(); },
       "--run-dir", "the job's run directory (socket, start lock, channel files)"},
      {{"FUNNEL_JOB_ID", "SLURM_JOB_ID, PBS_JOBID, LSB_JOBID, OMPI_MCA_ess_base_jobid, PMIX_NAMESPACE, else nojob",
        "letters, digits, '.', '_', '-'", "names the default run directory: processes of one job share a server"},
       FreeForm{accepts_job_id}, [](auto& s, auto& v) { s.job_id = v; }, [](auto& s) { return s.job_id; }},
      {{"FUNNEL_BACKEND", "cuda", "cuda | sim",
        "backend of a server that a client starts; sim stands host memory in for a GPU (testing)"},
       OneOfWords{}, [](auto& s, auto& v) { s.backend = v == "sim" ? Backend::Sim : Backend::Cuda; },
       [](auto& s) { return std::string(to_string(s.backend)); }, "--backend",
       "the CUDA backend, or the sim backend (host memory stands in for GPUs)"},
      {{"FUNNEL_SERVER", "funnel-server beside the client runtime (../bin)", "path to an executable",
        "the funnel-server binary a client starts when none runs"},
       FreeForm{non_empty}, [](auto& s, auto& v) { s.server_binary = v; },
       [](auto& s) { return s.server_binary.empty() ? "(beside the client runtime)" : s.server_binary.string(); }},
      {{"FUNNEL_LOG_DIR", "/tmp/funnel-<uid>-logs",
        "a directory path; a directory of this user's that no other user can write (not a symlink)",
        "where funnel-server writes its log and job report; created 0700 where missing. A directory another user "
        "owns or can write is refused with the fix, except the default: where someone else made "
        "/tmp/funnel-<uid>-logs first, the server logs to a new private /tmp/funnel-<uid>-logs.XXXXXX instead "
        "and says so there"},
       FreeForm{non_empty}, [](auto& s, auto& v) { s.log_dir = v; }, [](auto& s) { return s.log_dir.string(); }, "--log-dir",
       "the directory of the log file and the job report"},
      {{"FUNNEL_LOG_LEVEL", "info", "trace | debug | info | warn | error | off", "log detail"},
       OneOfWords{}, [](auto& s, auto& v) { s.log_level = v; }, [](auto& s) { return s.log_level; }, "--log-level", "log detail"},
      {{"FUNNEL_IDLE_EXIT_MS", "3000", "integer 0..3600000",
        "a server started by a client exits this long after its last client left"},
       IntegerRange{0, 3600000}, [](auto& s, auto& v) { s.idle_exit = std::chrono::milliseconds(integer_of(v)); },
       [](auto& s) { return std::to_string(s.idle_exit.count()); }, "--idle-exit-ms",
       "exit this long after the last client left (not given: run until stopped)", "ms"},
      {{"FUNNEL_ATTACH_TIMEOUT_MS", "30000", "integer 100..3600000",
        "how long a client waits for the start lock and for a server to become ready"},
       IntegerRange{100, 3600000}, [](auto& s, auto& v) { s.attach_timeout = std::chrono::milliseconds(integer_of(v)); },
       [](auto& s) { return std::to_string(s.attach_timeout.count()); }, nullptr, nullptr, "ms"},
      {{"FUNNEL_DEVICES", "every visible GPU", "comma-separated GPU ordinals, e.g. 0,1",
        "GPUs of a server that a client starts"},
       FreeForm{accepts_ordinals}, [](auto& s, auto& v) { s.devices = parse_ordinals("FUNNEL_DEVICES", v); },
       [](auto& s) { return s.devices.empty() ? "(all)" : fmt::format("{}", fmt::join(s.devices, ",")); }, "--devices",
       "GPU ordinals to serve, e.g. 0,1 (default: every visible GPU)"},
      {{"FUNNEL_STAGING_SLOTS", "4", "integer 2..16", "staging buffers per client for pageable copies"},
       IntegerRange{2, 16}, [](auto& s, auto& v) { s.staging_slots = u32(v); }, [](auto& s) { return std::to_string(s.staging_slots); }, "--staging-slots",
       "staging buffers per client"},
      {{"FUNNEL_STAGING_SLOT_KB", "2048", "integer 64..262144, a multiple of 4", "size of each staging buffer"},
       IntegerRange{64, 262144, 4}, [](auto& s, auto& v) { s.staging_slot_bytes = static_cast<uint64_t>(integer_of(v)) * 1024; },
       [](auto& s) { return std::to_string(s.staging_slot_bytes / 1024); }, "--staging-slot-kb",
       "size of one staging buffer", "KiB"},
      {{"FUNNEL_MAX_CLIENTS", "256", "integer 1..4096", "clients one server accepts at once"},
       IntegerRange{1, 4096}, [](auto& s, auto& v) { s.max_clients = u32(v); }, [](auto& s) { return std::to_string(s.max_clients); }, "--max-clients",
       "refuse clients beyond this many"},
      {{"FUNNEL_COPY_THREADS", "4", "integer 1..64",
        "host threads (the caller included) that copy a large pageable transfer into or out of the staging "
        "buffers; never more than the CPUs the process may run on"},
       IntegerRange{1, 64}, [](auto& s, auto& v) { s.copy_threads = u32(v); }, [](auto& s) { return std::to_string(s.copy_threads); }},
      {{"FUNNEL_DEVICE_CONNECTIONS", "16", "integer 1..32",
        "hardware work queues of the server's context on each GPU (it sets CUDA_DEVICE_MAX_CONNECTIONS to this "
        "for itself). Every client's streams share them: with more streams than queues, one client's kernels may "
        "queue behind another's (16 clients replaying CUDA graphs on an H100: 0.54-0.80 of MPS with 8 queues, "
        "1.01 with 16 or 32; the synchronising round trip measured the same with 8, 16 and 32). Raise it to 32 "
        "for more than 16 busy clients per GPU"},
       IntegerRange{1, 32}, [](auto& s, auto& v) { s.device_connections = u32(v); }, [](auto& s) { return std::to_string(s.device_connections); }, "--device-connections",
       "hardware work queues of the context on each GPU"},
      {{"FUNNEL_SERVER_SPIN_US", "2000", "integer 0..100000",
        "how long (microseconds) a server worker keeps polling a client's unfinished GPU work, yielding its core "
        "past the first 20 us, before it polls every 50 us instead: longer answers synchronous copies and stream "
        "synchronisations sooner, shorter leaves more CPU to the ranks when they fill the node's cores"},
       IntegerRange{0, 100000}, [](auto& s, auto& v) { s.server_spin_us = u32(v); }, [](auto& s) { return std::to_string(s.server_spin_us); }, "--spin-us",
       "how long a worker polls a client's pending GPU work before polling every 50 us", "us"},
      {{"FUNNEL_SERVER_IDLE_SPIN_US", "50", "integer 0..100000",
        "how long (microseconds) a server worker keeps polling its client's empty command ring, yielding its core "
        "past the first 20 us, before it sleeps; the client's next command then wakes it (a futex wake, 10-30 us "
        "or more on a busy node). Longer catches a command that follows a pause (an MPI exchange) sooner, at the "
        "price of a polling thread per client for that long. A worker that placement put alone on a core no rank "
        "is bound to (every rank bound, free cores left: doc/placement.md) polls for FUNNEL_SERVER_SPIN_US instead"},
       IntegerRange{0, 100000}, [](auto& s, auto& v) { s.server_idle_spin_us = u32(v); }, [](auto& s) { return std::to_string(s.server_idle_spin_us); }, "--idle-spin-us",
       "how long a worker polls its client's empty ring before it sleeps", "us"},
      {{"FUNNEL_SERVER_SPIN_BACKOFF_MS", "100", "integer 0..60000",
        "how long (milliseconds) a server worker stops polling once it found its core wanted: when one of its "
        "sched_yield calls while polling let another thread run for more than 200 us (the node's cores are all "
        "busy, e.g. 16 ranks that busy-wait in MPI on 16 cores), it polls neither its empty ring nor its pending "
        "GPU work for this long: idle, it sleeps until its client's next command (within 20 ms of its last one it "
        "naps, at most 200 us at a time, through kernel launches, which then wake no one and go out together at "
        "the client's next other call); with work pending, it looks every 50 us. 0: always poll for the whole "
        "FUNNEL_SERVER_SPIN_US / FUNNEL_SERVER_IDLE_SPIN_US"},
       IntegerRange{0, 60000}, [](auto& s, auto& v) { s.server_spin_backoff_ms = u32(v); }, [](auto& s) { return std::to_string(s.server_spin_backoff_ms); }, "--spin-backoff-ms",
       "how long a worker stops polling once its core is wanted by another thread; 0: never", "ms"},
      {{"FUNNEL_SERVER_WORKERS", "0", "integer 0..1024",
        "worker threads of the server per GPU, each serving several of that GPU's clients in turn; 0: every "
        "client has a worker thread of its own. Fewer threads than clients leave cores to ranks that fill the "
        "node's cores, at the cost of one client's commands waiting behind another's in the same thread "
        "(doc/design/overview.md, \"Worker threads\")"},
       IntegerRange{0, 1024}, [](auto& s, auto& v) { s.server_workers = u32(v); }, [](auto& s) { return std::to_string(s.server_workers); }, "--workers",
       "worker threads per GPU, each serving several clients; 0: one per client"},
      {{"FUNNEL_LAUNCH_BATCH", "32", "integer 0..64",
        "the most consecutive kernel launches of one client on one stream that a server worker issues as one "
        "CUDA graph launch, when they are already queued together (a client launching faster than the driver "
        "takes launches); a launch alone still goes out at once. One process's launch rate tops out near 750 k "
        "kernels/s on an H100; graphs of 8 lifted it past 1.4 M in a probe. 0 or 1: every launch on its own "
        "(doc/design/overview.md, \"Launch batches\")"},
       IntegerRange{0, setting_default::kLaunchBatchMax}, [](auto& s, auto& v) { s.launch_batch = u32(v); }, [](auto& s) { return std::to_string(s.launch_batch); }, "--launch-batch",
       "the most consecutive launches on one stream issued as one CUDA graph launch when they are queued at once; 0 "
       "or 1: each on its own"},
      {{"FUNNEL_SIM_LAUNCH_LOG", "(none)", "a file path",
        "sim backend only: a server that a client starts appends every kernel launch to this file as one JSON "
        "line (kernel, grid, block, shared, params as hex) for tests of argument packing"},
       FreeForm{non_empty}, [](auto& s, auto& v) { s.sim_launch_log = v; },
       [](auto& s) { return s.sim_launch_log.empty() ? "(none)" : s.sim_launch_log.string(); }, "--sim-launch-log",
       "sim: append every kernel launch to this file as a JSON line"},
      {{"FUNNEL_SIM_FAULT_KERNEL", "(none)", "a mangled kernel name",
        "sim backend only: a launch of this kernel faults its device once the stream reaches it (every later "
        "call there answers cudaErrorIllegalAddress until the server resets the device), for tests of fault "
        "handling"},
       FreeForm{non_empty}, [](auto& s, auto& v) { s.sim_fault_kernel = v; },
       [](auto& s) { return s.sim_fault_kernel.empty() ? "(none)" : s.sim_fault_kernel; }, "--sim-fault-kernel",
       "sim: a launch of this (mangled) kernel faults its device, for fault tests"},
      {{"FUNNEL_DEVICE_MEM_LIMIT", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, else no limit",
        "bytes with an optional K, M, G or T (powers of 1024, a B after it allowed), e.g. 1G, 512M, 1024K, "
        "4096; or per device ordinal, e.g. 0=1G,1=512M (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT's syntax); "
        "both kinds mixed: a device's own entry wins; each at least 1 byte; a device entry must name a device "
        "the process sees (checked when it attaches)",
        "the most device memory this client may hold on a GPU (cudaMalloc, cudaMallocPitch, cudaMalloc3D, "
        "cudaMallocAsync): an allocation past it fails with cudaErrorMemoryAllocation, and cudaMemGetInfo "
        "reports the limit as total and the limit less what the client holds as free (never more than the "
        "GPU has free). The server enforces it. CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, in the same syntax, is "
        "honoured when this is unset"},
       FreeForm{accepts_device_mem_limit}, [](auto& s, auto& v) { parse_device_mem_limit("FUNNEL_DEVICE_MEM_LIMIT", v, s); },
       device_mem_limit_text, nullptr, nullptr, nullptr, mps_pinned_device_mem_limit},
      {{"FUNNEL_RANKS_PER_GPU", "(not set: every GPU visible)", "even | integer 1..4096",
        "when set, each process uses one GPU, shown to it as device 0 (as CUDA_VISIBLE_DEVICES would): even "
        "spreads the node's ranks evenly (GPU = local rank x GPUs / local ranks), N puts N consecutive "
        "node-local ranks on each GPU (GPU = local rank / N, modulo the GPUs). The node-local rank comes from "
        "OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID or PMIX_LOCAL_RANK, the node's rank count "
        "from OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS, this node's entry of srun's SLURM_STEP_TASKS_PER_NODE "
        "(SLURM_NODEID), SLURM_NTASKS_PER_NODE or PMIX_LOCAL_SIZE"},
       FreeForm{accepts_ranks_per_gpu}, store_ranks_per_gpu, [](auto& s) {
         return !s.ranks_per_gpu_set ? "(not set)" : s.ranks_per_gpu == 0 ? "even" : std::to_string(s.ranks_per_gpu);
       }},
      {{"FUNNEL_GPU_MAP", "(not set)", "comma-separated GPU ordinals indexed by node-local rank, e.g. 0,0,1,1",
        "each process uses the GPU of its node-local rank's entry, shown to it as device 0; wins over "
        "FUNNEL_RANKS_PER_GPU. A rank without an entry, or an entry past the server's GPUs, fails the attach "
        "(MPI_Init or the first CUDA call) with a message"},
       FreeForm{accepts_ordinals}, [](auto& s, auto& v) { s.gpu_map = parse_ordinals("FUNNEL_GPU_MAP", v); },
       [](auto& s) { return s.gpu_map.empty() ? "(not set)" : fmt::format("{}", fmt::join(s.gpu_map, ",")); }},
      {{"FUNNEL_GPU_FRACTION", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, else the whole GPU",
        "a fraction above 0 and at most 1 (e.g. 0.25) or a percentage (e.g. 25%)",
        "the share of each GPU's SMs this process's kernels may use: the server gives it an SM partition (a "
        "green context) of that share rounded down to the GPU's granularity (8 SMs on an H100), at least one "
        "group, and cudaDevAttrMultiProcessorCount reports its SMs, as MPS does. "
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (a percentage without the sign) is honoured when this is unset. "
        "NVIDIA's advice for n processes per GPU, 100/(0.5n) percent each, is a good start: 0.125 for 16"},
       FreeForm{accepts_fraction}, store_gpu_fraction, [](auto& s) {
         return s.gpu_share_bp == 0 ? "(the whole GPU)" : fmt::format("{:g}%", s.gpu_share_bp / 100.0);
       }, nullptr, nullptr, nullptr, mps_active_thread_percentage},
      {{"FUNNEL_GPU_PLACEMENT", "shared", "shared | disjoint",
        "where FUNNEL_GPU_FRACTION partitions go. shared: on the SMs the fewest other processes use, overlapping "
        "others once the GPU is covered (a cap, like MPS's percentage). disjoint: on SMs no other disjoint "
        "process holds (reserved, for quality of service); when too few are free the attach fails with a "
        "message. Processes without a fraction run on every SM either way"},
       OneOfWords{}, [](auto& s, auto& v) { s.gpu_disjoint = v == "disjoint"; },
       [](auto& s) { return std::string(s.gpu_disjoint ? "disjoint" : "shared"); }},
      {{"FUNNEL_CLIENT_PRIORITY", "CUDA_MPS_CLIENT_PRIORITY, else normal", "normal | below-normal | 0 | 1",
        "the priority of this process's work against other processes' on the same GPU (CUDA_MPS_CLIENT_PRIORITY's "
        "0 and 1 mean normal and below-normal and are honoured when this is unset): every stream of a normal "
        "process runs one stream-priority level above what it asked for, so a below-normal process's work "
        "yields to it (the top two levels of a normal process then coincide)"},
       OneOfWords{}, [](auto& s, auto& v) { s.below_normal_priority = v == "below-normal" || v == "1"; },
       [](auto& s) { return std::string(s.below_normal_priority ? "below-normal" : "normal"); }, nullptr, nullptr, nullptr,
       mps_client_priority},
      {{"FUNNEL_MPI_HOOKS", "auto", "auto | 1 | 0",
        "funnel-run only: whether it also preloads the MPI hooks (libfunnel_mpi.so, beside the client runtime) "
        "into the program, so that an unmodified MPI program's MPI_Init starts the node's funnel-server and its "
        "MPI_Finalize stops it, as for a program linked with funnel::mpi. auto: when funnel-run runs under an MPI "
        "launcher (OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_RANK set); 1: always; 0: never (funnel-run starts the "
        "server itself and it exits FUNNEL_IDLE_EXIT_MS after the last process left)"},
       OneOfWords{}, [](auto& s, auto& v) { s.mpi_hooks = v == "1" ? MpiHooks::On : v == "0" ? MpiHooks::Off : MpiHooks::Auto; },
       [](auto& s) { return std::string(to_string(s.mpi_hooks)); }},
      {{"FUNNEL_CLIENT_LAYOUT", "low", "low | default",
        "funnel-run only: where the program's memory mappings go. low: bottom-up from a third of the address "
        "space (the kernel's legacy layout, ADDR_COMPAT_LAYOUT), far from the top of the address space where "
        "funnel-server's CUDA driver places device memory, so that no host mapping of the program lies at the "
        "numeric address of one of its device allocations (doc/reliability.md); default: the usual top-down "
        "layout (the client runtime then moves clashing allocations, which can run out of tries); programs built "
        "with ThreadSanitizer need it, as their sanitizer keeps its shadow memory where the low layout maps"},
       OneOfWords{}, [](auto& s, auto& v) { s.client_layout_low = v == "low"; },
       [](auto& s) { return std::string(s.client_layout_low ? "low" : "default"); }},
      {{"FUNNEL_CLIENT_DRIVER", "1", "1 | 0",
        "funnel-run only: 1: the program finds funnel's client driver (lib/funnel-driver/libcuda.so.1) before "
        "NVIDIA's, so that what it does through the CUDA driver API, itself or through a library, runs on the "
        "server's context too, and a driver call funnel does not serve yet fails with a message naming it; 0: "
        "it finds NVIDIA's driver, and anything that calls it directly opens a CUDA context of its own in the "
        "program (the GPU time-slices it against the server's), as before funnel had a driver "
        "(doc/design/driver-client.md)"},
       OneOfWords{}, [](auto& s, auto& v) { s.client_driver = v == "1"; },
       [](auto& s) { return std::string(s.client_driver ? "1" : "0"); }},
      {{"FUNNEL_SERVER_AFFINITY", "auto", "auto | gpu | off",
        "auto: the server pins its worker threads to cores near the GPU each serves and away from the cores the "
        "ranks are bound to, and its other threads to a core of their own where one is free, re-planning as "
        "ranks attach and leave; where ranks are bound to every core, each worker shares the CPUs of the rank it "
        "serves (doc/placement.md); gpu: as auto, but such workers share every core near their GPU; off: its "
        "threads keep the CPU affinity they started with (for sites that bind the server themselves, e.g. with "
        "taskset or a Slurm task prolog)"},
       OneOfWords{}, [](auto& s, auto& v) {
         s.server_affinity = v != "off";
         s.worker_follows_rank = v != "gpu";
       },
       [](auto& s) { return std::string(server_affinity_name(s.server_affinity, s.worker_follows_rank)); }, "--affinity",
       "auto: pin the server's threads near their GPUs and away from the ranks' cores (a worker shares its rank's "
       "CPUs when ranks fill every core); gpu: such workers share the GPU's cores instead; off: leave them"},
      {{"FUNNEL_PRINT_PLAN", "0", "0 | 1",
        "1: print the server's placement plan (GPUs and their cores, where the server and each GPU's workers "
        "run, which rank uses which GPU with what fraction and binding) to stderr once this process attached; "
        "under the MPI hooks the node's first rank (by the launcher's local rank) prints it once the node's "
        "ranks of the job attached. The server logs every plan it applies either way"},
       OneOfWords{}, [](auto& s, auto& v) { s.print_plan = v == "1"; }, [](auto& s) { return std::string(s.print_plan ? "1" : "0"); }},
      {{"FUNNEL_MPI_LOCAL", "0", "0 | 1",
        "under the MPI hooks, in every rank: 1 sends device-buffer messages between ranks of one node as one "
        "device-to-device copy inside the server's context (GPU-local messages), under a contract the program "
        "keeps (device buffers on both sides, named sources and tags, contiguous data, no reliance on eager "
        "buffering; breaks that can be seen are refused by name): doc/mpi.md, \"GPU-local messages\". Messages "
        "with a rank without it, or not under funnel, are staged. 0: device buffers are staged through pinned "
        "host memory"},
       OneOfWords{}, [](auto& s, auto& v) { s.mpi_local = v == "1"; }, [](auto& s) { return std::string(s.mpi_local ? "1" : "0"); }},
      {{"FUNNEL_GPU_REPLIES", "auto", "auto | 1 | 0",
        "for a server that a client starts: 1 makes the GPU answer a synchronous copy between pinned and "
        "device memory, and a synchronize of a busy stream, itself (a stream memory write into the client's "
        "reply word once the work is done), so the waiting process sees it done without the server's worker "
        "thread having to run; 0 leaves every answer to the worker (as before protocol 7); auto is 1, but "
        "where another such call is already on the GPU a one-thread kernel after the work stores the word "
        "instead of the stream write, and the worker also watches an event recorded before it and answers "
        "when it completes, if that comes first: the stream write waits for every copy then in flight on the "
        "GPU, so of copies made together each would otherwise be answered only when the last is done "
        "(doc/performance.md)"},
       OneOfWords{}, [](auto& s, auto& v) { s.gpu_replies = *gpu_replies_from(v); },
       [](auto& s) { return std::string(gpu_replies_name(s.gpu_replies)); }, "--gpu-replies",
       "1: the GPU answers synchronous copies and stream synchronisations itself; 0: the server's worker does; "
       "auto: the GPU does, and while another such call is on the GPU the worker too when it sees the work done first"},
      {{"FUNNEL_SUBMIT_ORDER", "0", "1 | 0",
        "for a server that a client starts: 1 makes the workers that have a core of their own (every rank "
        "bound, free cores left) take their clients' waited copies to the driver one at a time, first come "
        "first served, instead of all at once. Experimental, off by default: on an H100 in a KVM guest it "
        "shortened the stencil's steps by 11-13 % at 4 and 8 bound ranks on calm machines and lengthened them "
        "by up to 30 % where the workers lost their cores to the host (doc/performance.md). Workers that share "
        "their ranks' cores never queue"},
       OneOfWords{}, [](auto& s, auto& v) { s.submit_order = v == "1"; },
       [](auto& s) { return std::string(s.submit_order ? "1" : "0"); }, "--submit-order",
       "1: workers on cores of their own take waited copies to the driver one at a time, first come first served; "
       "0: all at once (experimental)"},
      {{"FUNNEL_JOB_REPORT", "1", "1 | 0",
        "1: when funnel-server stops it writes a job report to FUNNEL_LOG_DIR, one row per client that "
        "attached during its life (MPI rank, pid, GPU, launches, bytes copied, peak memory, GPU busy time, how "
        "it ended): funnel-report-<host>-<server pid>.txt and .json, and a chart of GPU time and memory per "
        "rank (.png, drawn by python3-matplotlib where installed) (doc/accounting.md); 0: no report"},
       OneOfWords{}, [](auto& s, auto& v) { s.job_report = v == "1"; },
       [](auto& s) { return std::string(s.job_report ? "1" : "0"); }, "--job-report",
       "1: at its stop write a job report of every client to the log directory (text, JSON and a chart); 0: none"},
  };
  return table;
}

std::string setting_option_help(const SettingInfo& row) {
  std::string help = row.option_help;
  if (row.unit != nullptr) help += fmt::format(", {}", row.unit);
  if (!std::holds_alternative<FreeForm>(row.check)) help += fmt::format(": {}", row.accepted);
  return fmt::format("{} ({})", help, row.variable);
}

std::string setting_option_error(const SettingInfo& row, const std::string& value) {
  if (setting_accepts(row, value)) return "";
  return fmt::format("'{}' is not valid: expected {} (as {})", value, row.accepted, row.variable);
}

const SettingInfo* find_setting(std::string_view variable) noexcept {
  for (const auto& row : setting_table())
    if (variable == row.variable) return &row;
  return nullptr;
}

std::vector<std::string_view> setting_words(const SettingInfo& row) {
  std::vector<std::string_view> out;
  std::string_view rest = row.accepted;
  while (true) {
    const auto bar = rest.find(" | ");
    out.push_back(rest.substr(0, bar));
    if (bar == std::string_view::npos) return out;
    rest = rest.substr(bar + 3);
  }
}

bool setting_accepts(const SettingInfo& row, const std::string& value) {
  if (const auto* range = std::get_if<IntegerRange>(&row.check)) {
    return parses([&] { parse_int("", value, range->min, range->max, ""); }) &&
           integer_of(value) % range->multiple_of == 0;
  }
  if (std::holds_alternative<OneOfWords>(row.check)) {
    const auto words = setting_words(row);
    return std::find(words.begin(), words.end(), value) != words.end();
  }
  return std::get<FreeForm>(row.check).accepts(value);
}

std::string launcher_job_id(const Settings::Lookup& env) {
  for (const char* v : {"SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"}) {
    if (auto s = env(v); s && !s->empty()) return sanitize_for_filename(*s);
  }
  return "nojob";
}

std::string mpi_launcher_variable(const Settings::Lookup& env) {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"}) {
    if (auto s = env(v); s && !s->empty()) return v;
  }
  return "";
}

uint64_t Settings::device_mem_limit_for(int device) const noexcept {
  auto it = device_mem_limit.find(device);
  return it != device_mem_limit.end() ? it->second : device_mem_limit_all;
}

void parse_device_mem_limit(const char* var, const std::string& value, Settings& out) {
  const char* accepted = accepted_of("FUNNEL_DEVICE_MEM_LIMIT");
  uint64_t all = 0;
  std::map<int, uint64_t> per_device;
  std::string_view rest = value;
  if (rest.empty()) bad(var, value, accepted);
  while (true) {
    const auto comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    const auto eq = item.find('=');
    uint64_t bytes = 0;
    if (eq == std::string_view::npos) {
      if (all != 0 || !parse_size(item, bytes)) bad(var, value, accepted);
      all = bytes;
    } else {
      const std::string_view ord = item.substr(0, eq);
      int device = -1;
      auto [p, ec] = std::from_chars(ord.data(), ord.data() + ord.size(), device);
      if (ec != std::errc{} || p != ord.data() + ord.size() || ord.empty() || device < 0 || device > 63 ||
          per_device.contains(device) || !parse_size(item.substr(eq + 1), bytes))
        bad(var, value, accepted);
      per_device[device] = bytes;
    }
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  out.device_mem_limit_all = all;
  out.device_mem_limit = std::move(per_device);
  out.device_mem_limit_from = var;
}

LocalRank launcher_local_rank(const Settings::Lookup& env) {
  auto first = [&](std::initializer_list<const char*> vars) -> std::optional<int> {
    for (const char* v : vars) {
      auto s = env(v);
      if (!s) continue;
      int out = 0;
      auto [p, ec] = std::from_chars(s->data(), s->data() + s->size(), out);
      if (ec == std::errc{} && p == s->data() + s->size() && out >= 0) return out;
    }
    return std::nullopt;
  };
  // srun sets SLURM_NTASKS_PER_NODE only when asked for --ntasks-per-node, but always the
  // step's tasks per node: "2(x3),1" (3 nodes of 2 tasks, then 1), of which this node is the
  // SLURM_NODEID-th.
  auto slurm_step_tasks = [&]() -> std::optional<int> {
    auto list = env("SLURM_STEP_TASKS_PER_NODE");
    if (!list) return std::nullopt;
    int node = first({"SLURM_NODEID"}).value_or(0);
    std::string_view rest = *list;
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      std::string_view item = rest.substr(0, comma);
      rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
      int tasks = 0, repeat = 1;
      auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), tasks);
      if (ec != std::errc{} || tasks < 1) return std::nullopt;
      const std::string_view tail(p, static_cast<size_t>(item.data() + item.size() - p));
      if (!tail.empty()) {
        if (tail.size() < 4 || !tail.starts_with("(x") || !tail.ends_with(")")) return std::nullopt;
        auto [q, ec2] = std::from_chars(tail.data() + 2, tail.data() + tail.size() - 1, repeat);
        if (ec2 != std::errc{} || q != tail.data() + tail.size() - 1 || repeat < 1) return std::nullopt;
      }
      if (node < repeat) return tasks;
      node -= repeat;
    }
    return std::nullopt;
  };
  LocalRank l;
  l.rank = first({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "PMIX_LOCAL_RANK"}).value_or(0);
  std::optional<int> size = first({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"});
  if (!size) size = slurm_step_tasks();
  if (!size) size = first({"SLURM_NTASKS_PER_NODE", "PMIX_LOCAL_SIZE"});
  l.size = std::max(1, size.value_or(1));
  return l;
}

int select_gpu(const Settings& s, const LocalRank& local, int ngpus) {
  if (!s.selects_gpu() || ngpus <= 0) return -1;
  if (!s.gpu_map.empty()) {
    const std::string text = fmt::format("{}", fmt::join(s.gpu_map, ","));
    if (static_cast<size_t>(local.rank) >= s.gpu_map.size())
      throw ConfigError(fmt::format("FUNNEL_GPU_MAP='{}' is not valid for node-local rank {}: it has {} entries; "
                                    "expected {}",
                                    text, local.rank, s.gpu_map.size(), accepted_of("FUNNEL_GPU_MAP")));
    const int g = s.gpu_map[static_cast<size_t>(local.rank)];
    if (g >= ngpus)
      throw ConfigError(fmt::format("FUNNEL_GPU_MAP='{}' is not valid for node-local rank {}: GPU {} but the "
                                    "funnel-server has {} GPU(s); expected {}",
                                    text, local.rank, g, ngpus, accepted_of("FUNNEL_GPU_MAP")));
    return g;
  }
  if (s.ranks_per_gpu > 0) return (local.rank / s.ranks_per_gpu) % ngpus;
  if (local.rank >= local.size) return local.rank % ngpus;
  return static_cast<int>(static_cast<int64_t>(local.rank) * ngpus / local.size);
}

void check_device_mem_limit(const Settings& s, int visible) {
  for (const auto& [device, bytes] : s.device_mem_limit) {
    if (device < visible) continue;
    const std::string value = value_text(s, "FUNNEL_DEVICE_MEM_LIMIT");
    throw ConfigError(fmt::format("{}='{}' is not valid here: it limits device {}, but this process sees {} device(s){} "
                                  "(ordinals 0..{}); expected {}",
                                  s.device_mem_limit_from, value, device, visible,
                                  s.selects_gpu() ? " (FUNNEL_GPU_MAP / FUNNEL_RANKS_PER_GPU give it one GPU, device 0)"
                                                  : "",
                                  visible - 1, accepted_of("FUNNEL_DEVICE_MEM_LIMIT")));
  }
}

std::optional<std::string> Settings::environment(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

Settings Settings::from_environment() { return from(environment); }

Settings Settings::from(const Lookup& env) {
  Settings s;
  for (const auto& row : setting_table()) {
    std::string source = "default";
    if (auto v = env(row.variable)) {
      if (!setting_accepts(row, *v)) bad(row.variable, *v, row.accepted);
      row.store(s, *v);
      source = "environment";
    } else if (row.fallback != nullptr) {
      if (const char* other = row.fallback(s, env)) source = fmt::format("environment ({})", other);
    }
    s.sources.emplace_back(row.variable, std::move(source));
  }
  // The defaults that depend on the launcher, the user and each other.
  if (s.job_id.empty()) s.job_id = launcher_job_id(env);
  if (s.run_dir.empty()) {
    s.run_dir = default_run_dir(s.job_id);
    if (!accepts_run_dir(s.run_dir.string())) bad("FUNNEL_RUN_DIR", s.run_dir.string(), accepted_of("FUNNEL_RUN_DIR"));
  }
  if (s.log_dir.empty()) s.log_dir = default_log_dir();
  return s;
}

const char* gpu_replies_name(GpuReplies g) noexcept {
  return g == GpuReplies::Auto ? "auto" : g == GpuReplies::Always ? "1" : "0";
}

std::optional<GpuReplies> gpu_replies_from(std::string_view name) noexcept {
  for (GpuReplies g : {GpuReplies::Auto, GpuReplies::Always, GpuReplies::Off})
    if (name == gpu_replies_name(g)) return g;
  return std::nullopt;
}

const char* server_affinity_name(bool server_affinity, bool worker_follows_rank) noexcept {
  return !server_affinity ? "off" : worker_follows_rank ? "auto" : "gpu";
}

std::string value_text(const Settings& s, const std::string& var) {
  const SettingInfo* row = find_setting(var);
  return row != nullptr ? row->show(s) : "";
}

}  // namespace funnel
