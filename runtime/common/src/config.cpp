#include "funnel/common/config.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "funnel/common/run_dir.hpp"

namespace funnel {

const char* to_string(Backend b) noexcept { return b == Backend::Cuda ? "cuda" : "sim"; }

const char* to_string(MpiHooks h) noexcept { return h == MpiHooks::Auto ? "auto" : h == MpiHooks::On ? "1" : "0"; }

const std::vector<SettingInfo>& setting_table() {
  static const std::vector<SettingInfo> table{
      {"FUNNEL_RUN_DIR", "/dev/shm/funnel-<uid>-<job id>",
       "an absolute path, socket path under 108 characters; a new or empty directory, or one funnel made",
       "the job's run directory: the server's socket, start lock, channel and pinned-buffer files (mode 0700). "
       "funnel creates it (or adopts it empty) and marks it (.funnel-run-dir); a directory holding other files "
       "is refused, since the server removes the files it makes there when it stops, and the directory itself "
       "only where funnel created it"},
      {"FUNNEL_JOB_ID", "SLURM_JOB_ID, PBS_JOBID, LSB_JOBID, OMPI_MCA_ess_base_jobid, PMIX_NAMESPACE, else nojob",
       "letters, digits, '.', '_', '-'", "names the default run directory: processes of one job share a server"},
      {"FUNNEL_BACKEND", "cuda", "cuda | sim",
       "backend of a server that a client starts; sim stands host memory in for a GPU (testing)"},
      {"FUNNEL_SERVER", "funnel-server beside the client runtime (../bin)", "path to an executable",
       "the funnel-server binary a client starts when none runs"},
      {"FUNNEL_LOG_DIR", "/tmp/funnel-<uid>-logs",
       "a directory path; a directory of this user's that no other user can write (not a symlink)",
       "where funnel-server writes its log and job report; created 0700 where missing. A directory another user "
       "owns or can write is refused with the fix, except the default: where someone else made "
       "/tmp/funnel-<uid>-logs first, the server logs to a new private /tmp/funnel-<uid>-logs.XXXXXX instead "
       "and says so there"},
      {"FUNNEL_LOG_LEVEL", "info", "trace | debug | info | warn | error | off", "log detail"},
      {"FUNNEL_IDLE_EXIT_MS", "3000", "integer 0..3600000",
       "a server started by a client exits this long after its last client left"},
      {"FUNNEL_ATTACH_TIMEOUT_MS", "30000", "integer 100..3600000",
       "how long a client waits for the start lock and for a server to become ready"},
      {"FUNNEL_DEVICES", "every visible GPU", "comma-separated GPU ordinals, e.g. 0,1",
       "GPUs of a server that a client starts"},
      {"FUNNEL_STAGING_SLOTS", "4", "integer 2..16", "staging buffers per client for pageable copies"},
      {"FUNNEL_STAGING_SLOT_KB", "2048", "integer 64..262144, a multiple of 4", "size of each staging buffer"},
      {"FUNNEL_MAX_CLIENTS", "256", "integer 1..4096", "clients one server accepts at once"},
      {"FUNNEL_COPY_THREADS", "4", "integer 1..64",
       "host threads (the caller included) that copy a large pageable transfer into or out of the staging "
       "buffers; never more than the CPUs the process may run on"},
      {"FUNNEL_DEVICE_CONNECTIONS", "8", "integer 1..32",
       "hardware work queues of the server's context on each GPU (it sets CUDA_DEVICE_MAX_CONNECTIONS to this "
       "for itself). Every client's streams share them: with more than this many clients some clients' kernels "
       "queue behind others'. 32 raised the small-kernel launch rate of 16 clients by 14 % on an H100 but made "
       "every synchronising round trip (event record + synchronize) about 0.7 us slower, so the default is the "
       "driver's 8; raise it for jobs of many clients that launch many tiny kernels and rarely synchronise"},
      {"FUNNEL_SERVER_SPIN_US", "2000", "integer 0..100000",
       "how long (microseconds) a server worker keeps polling a client's unfinished GPU work, yielding its core "
       "past the first 20 us, before it polls every 50 us instead: longer answers synchronous copies and stream "
       "synchronisations sooner, shorter leaves more CPU to the ranks when they fill the node's cores"},
      {"FUNNEL_SERVER_IDLE_SPIN_US", "50", "integer 0..100000",
       "how long (microseconds) a server worker keeps polling its client's empty command ring, yielding its core "
       "past the first 20 us, before it sleeps; the client's next command then wakes it (a futex wake, 10-30 us "
       "or more on a busy node). Longer catches a command that follows a pause (an MPI exchange) sooner, at the "
       "price of a polling thread per client for that long. A worker that placement put alone on a core no rank "
       "is bound to (every rank bound, free cores left: doc/placement.md) polls for FUNNEL_SERVER_SPIN_US instead"},
      {"FUNNEL_SERVER_SPIN_BACKOFF_MS", "100", "integer 0..60000",
       "how long (milliseconds) a server worker stops polling once it found its core wanted: when one of its "
       "sched_yield calls while polling let another thread run for more than 200 us (the node's cores are all "
       "busy, e.g. 16 ranks that busy-wait in MPI on 16 cores), it polls neither its empty ring nor its pending "
       "GPU work for this long: idle, it sleeps until its client's next command (within 20 ms of its last one it "
       "naps, at most 200 us at a time, through kernel launches, which then wake no one and go out together at "
       "the client's next other call); with work pending, it looks every 50 us. 0: always poll for the whole "
       "FUNNEL_SERVER_SPIN_US / FUNNEL_SERVER_IDLE_SPIN_US"},
      {"FUNNEL_SERVER_WORKERS", "0", "integer 0..1024",
       "worker threads of the server per GPU, each serving several of that GPU's clients in turn; 0: every "
       "client has a worker thread of its own. Fewer threads than clients leave cores to ranks that fill the "
       "node's cores, at the cost of one client's commands waiting behind another's in the same thread "
       "(doc/design/overview.md, \"Worker threads\")"},
      {"FUNNEL_LAUNCH_BATCH", "32", "integer 0..64",
       "the most consecutive kernel launches of one client on one stream that a server worker issues as one "
       "CUDA graph launch, when they are already queued together (a client launching faster than the driver "
       "takes launches); a launch alone still goes out at once. One process's launch rate tops out near 750 k "
       "kernels/s on an H100; graphs of 8 lifted it past 1.4 M in a probe. 0 or 1: every launch on its own "
       "(doc/design/overview.md, \"Launch batches\")"},
      {"FUNNEL_SIM_LAUNCH_LOG", "(none)", "a file path",
       "sim backend only: a server that a client starts appends every kernel launch to this file as one JSON "
       "line (kernel, grid, block, shared, params as hex) for tests of argument packing"},
      {"FUNNEL_SIM_FAULT_KERNEL", "(none)", "a mangled kernel name",
       "sim backend only: a launch of this kernel faults its device once the stream reaches it (every later "
       "call there answers cudaErrorIllegalAddress until the server resets the device), for tests of fault "
       "handling"},
      {"FUNNEL_DEVICE_MEM_LIMIT", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, else no limit",
       "bytes with an optional K, M, G or T (powers of 1024, a B after it allowed), e.g. 1G, 512M, 1024K, "
       "4096; or per device ordinal, e.g. 0=1G,1=512M (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT's syntax); "
       "both kinds mixed: a device's own entry wins; each at least 1 byte; a device entry must name a device "
       "the process sees (checked when it attaches)",
       "the most device memory this client may hold on a GPU (cudaMalloc, cudaMallocPitch, cudaMalloc3D, "
       "cudaMallocAsync): an allocation past it fails with cudaErrorMemoryAllocation, and cudaMemGetInfo "
       "reports the limit as total and the limit less what the client holds as free (never more than the "
       "GPU has free). The server enforces it. CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, in the same syntax, is "
       "honoured when this is unset"},
      {"FUNNEL_RANKS_PER_GPU", "(not set: every GPU visible)", "even | integer 1..4096",
       "when set, each process uses one GPU, shown to it as device 0 (as CUDA_VISIBLE_DEVICES would): even "
       "spreads the node's ranks evenly (GPU = local rank x GPUs / local ranks), N puts N consecutive "
       "node-local ranks on each GPU (GPU = local rank / N, modulo the GPUs). The node-local rank comes from "
       "OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID or PMIX_LOCAL_RANK, the node's rank count "
       "from OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS, this node's entry of srun's SLURM_STEP_TASKS_PER_NODE "
       "(SLURM_NODEID), SLURM_NTASKS_PER_NODE or PMIX_LOCAL_SIZE"},
      {"FUNNEL_GPU_MAP", "(not set)", "comma-separated GPU ordinals indexed by node-local rank, e.g. 0,0,1,1",
       "each process uses the GPU of its node-local rank's entry, shown to it as device 0; wins over "
       "FUNNEL_RANKS_PER_GPU. A rank without an entry, or an entry past the server's GPUs, fails the attach "
       "(MPI_Init or the first CUDA call) with a message"},
      {"FUNNEL_GPU_FRACTION", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, else the whole GPU",
       "a fraction above 0 and at most 1 (e.g. 0.25) or a percentage (e.g. 25%)",
       "the share of each GPU's SMs this process's kernels may use: the server gives it an SM partition (a "
       "green context) of that share rounded down to the GPU's granularity (8 SMs on an H100), at least one "
       "group, and cudaDevAttrMultiProcessorCount reports its SMs, as MPS does. "
       "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (a percentage without the sign) is honoured when this is unset. "
       "NVIDIA's advice for n processes per GPU, 100/(0.5n) percent each, is a good start: 0.125 for 16"},
      {"FUNNEL_GPU_PLACEMENT", "shared", "shared | disjoint",
       "where FUNNEL_GPU_FRACTION partitions go. shared: on the SMs the fewest other processes use, overlapping "
       "others once the GPU is covered (a cap, like MPS's percentage). disjoint: on SMs no other disjoint "
       "process holds (reserved, for quality of service); when too few are free the attach fails with a "
       "message. Processes without a fraction run on every SM either way"},
      {"FUNNEL_CLIENT_PRIORITY", "CUDA_MPS_CLIENT_PRIORITY, else normal", "normal | below-normal | 0 | 1",
       "the priority of this process's work against other processes' on the same GPU (CUDA_MPS_CLIENT_PRIORITY's "
       "0 and 1 mean normal and below-normal and are honoured when this is unset): every stream of a normal "
       "process runs one stream-priority level above what it asked for, so a below-normal process's work "
       "yields to it (the top two levels of a normal process then coincide)"},
      {"FUNNEL_MPI_HOOKS", "auto", "auto | 1 | 0",
       "funnel-run only: whether it also preloads the MPI hooks (libfunnel_mpi.so, beside the client runtime) "
       "into the program, so that an unmodified MPI program's MPI_Init starts the node's funnel-server and its "
       "MPI_Finalize stops it, as for a program linked with funnel::mpi. auto: when funnel-run runs under an MPI "
       "launcher (OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_RANK set); 1: always; 0: never (funnel-run starts the "
       "server itself and it exits FUNNEL_IDLE_EXIT_MS after the last process left)"},
      {"FUNNEL_CLIENT_LAYOUT", "low", "low | default",
       "funnel-run only: where the program's memory mappings go. low: bottom-up from a third of the address "
       "space (the kernel's legacy layout, ADDR_COMPAT_LAYOUT), far from the top of the address space where "
       "funnel-server's CUDA driver places device memory, so that no host mapping of the program lies at the "
       "numeric address of one of its device allocations (doc/reliability.md); default: the usual top-down "
       "layout (the client runtime then moves clashing allocations, which can run out of tries); programs built "
       "with ThreadSanitizer need it, as their sanitizer keeps its shadow memory where the low layout maps"},
      {"FUNNEL_SERVER_AFFINITY", "auto", "auto | gpu | off",
       "auto: the server pins its worker threads to cores near the GPU each serves and away from the cores the "
       "ranks are bound to, and its other threads to a core of their own where one is free, re-planning as "
       "ranks attach and leave; where ranks are bound to every core, each worker shares the CPUs of the rank it "
       "serves (doc/placement.md); gpu: as auto, but such workers share every core near their GPU; off: its "
       "threads keep the CPU affinity they started with (for sites that bind the server themselves, e.g. with "
       "taskset or a Slurm task prolog)"},
      {"FUNNEL_PRINT_PLAN", "0", "0 | 1",
       "1: print the server's placement plan (GPUs and their cores, where the server and each GPU's workers "
       "run, which rank uses which GPU with what fraction and binding) to stderr once this process attached; "
       "under the MPI hooks node rank 0 prints it once every rank of its node attached. The server logs every "
       "plan it applies either way"},
      {"FUNNEL_GPU_REPLIES", "auto", "auto | 1 | 0",
       "for a server that a client starts: 1 makes the GPU answer a synchronous copy between pinned and "
       "device memory, and a synchronize of a busy stream, itself (a stream memory write into the client's "
       "reply word once the work is done), so the waiting process sees it done without the server's worker "
       "thread having to run; 0 leaves every answer to the worker (as before protocol 7); auto is 1, but "
       "where another such call is already on the GPU a one-thread kernel after the work stores the word "
       "instead of the stream write, and the worker also watches an event recorded before it and answers "
       "when it completes, if that comes first: the stream write waits for every copy then in flight on the "
       "GPU, so of copies made together each would otherwise be answered only when the last is done "
       "(doc/performance.md)"},
      {"FUNNEL_SUBMIT_ORDER", "0", "1 | 0",
       "for a server that a client starts: 1 makes the workers that have a core of their own (every rank "
       "bound, free cores left) take their clients' waited copies to the driver one at a time, first come "
       "first served, instead of all at once. Experimental, off by default: on an H100 in a KVM guest it "
       "shortened the stencil's steps by 11-13 % at 4 and 8 bound ranks on calm machines and lengthened them "
       "by up to 30 % where the workers lost their cores to the host (doc/performance.md). Workers that share "
       "their ranks' cores never queue"},
      {"FUNNEL_JOB_REPORT", "1", "1 | 0",
       "1: when funnel-server stops it writes a job report to FUNNEL_LOG_DIR, one row per client that "
       "attached during its life (MPI rank, pid, GPU, launches, bytes copied, peak memory, GPU busy time, how "
       "it ended): funnel-report-<host>-<server pid>.txt and .json, and a chart of GPU time and memory per "
       "rank (.png, drawn by python3-matplotlib where installed) (doc/accounting.md); 0: no report"},
  };
  return table;
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
  for (const auto& row : setting_table())
    if (std::string_view(row.variable) == var) return row.accepted;
  return "a valid value";
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

}  // namespace

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
  auto get = [&](const char* var) -> std::optional<std::string> {
    auto v = env(var);
    s.sources.emplace_back(var, v ? "environment" : "default");
    return v;
  };
  // A variable that, when set, must not be empty (paths and names).
  auto non_empty = [&](const char* var) -> std::optional<std::string> {
    auto v = get(var);
    if (v && v->empty()) bad(var, *v, accepted_of(var));
    return v;
  };
  auto integer = [&](const char* var, int64_t lo, int64_t hi) -> std::optional<int64_t> {
    auto v = get(var);
    if (!v) return std::nullopt;
    return parse_int(var, *v, lo, hi, accepted_of(var));
  };

  auto run_dir = get("FUNNEL_RUN_DIR");
  if (auto j = get("FUNNEL_JOB_ID")) {
    if (j->empty() || sanitize_for_filename(*j) != *j) bad("FUNNEL_JOB_ID", *j, accepted_of("FUNNEL_JOB_ID"));
    s.job_id = *j;
  } else {
    s.job_id = launcher_job_id(env);
  }
  if (run_dir) {
    if (run_dir->empty() || (*run_dir)[0] != '/') bad("FUNNEL_RUN_DIR", *run_dir, accepted_of("FUNNEL_RUN_DIR"));
    s.run_dir = *run_dir;
  } else {
    s.run_dir = default_run_dir(s.job_id);
  }
  if ((s.run_dir / "server.sock").string().size() > 107)
    bad("FUNNEL_RUN_DIR", s.run_dir.string(), accepted_of("FUNNEL_RUN_DIR"));

  if (auto b = get("FUNNEL_BACKEND")) {
    if (*b == "cuda") s.backend = Backend::Cuda;
    else if (*b == "sim") s.backend = Backend::Sim;
    else bad("FUNNEL_BACKEND", *b, accepted_of("FUNNEL_BACKEND"));
  }
  if (auto p = non_empty("FUNNEL_SERVER")) s.server_binary = *p;
  if (auto d = non_empty("FUNNEL_LOG_DIR")) {
    s.log_dir = *d;
  } else {
    s.log_dir = default_log_dir();
  }
  if (auto l = get("FUNNEL_LOG_LEVEL")) {
    static const std::set<std::string> levels{"trace", "debug", "info", "warn", "error", "off"};
    if (!levels.contains(*l)) bad("FUNNEL_LOG_LEVEL", *l, accepted_of("FUNNEL_LOG_LEVEL"));
    s.log_level = *l;
  }
  if (auto v = integer("FUNNEL_IDLE_EXIT_MS", 0, 3600000)) s.idle_exit = std::chrono::milliseconds(*v);
  if (auto v = integer("FUNNEL_ATTACH_TIMEOUT_MS", 100, 3600000)) s.attach_timeout = std::chrono::milliseconds(*v);
  if (auto d = get("FUNNEL_DEVICES")) s.devices = parse_ordinals("FUNNEL_DEVICES", *d);
  if (auto v = integer("FUNNEL_STAGING_SLOTS", 2, 16)) s.staging_slots = static_cast<uint32_t>(*v);
  if (auto v = integer("FUNNEL_STAGING_SLOT_KB", 64, 262144)) {
    if (*v % 4 != 0) bad("FUNNEL_STAGING_SLOT_KB", std::to_string(*v), accepted_of("FUNNEL_STAGING_SLOT_KB"));
    s.staging_slot_bytes = static_cast<uint64_t>(*v) * 1024;
  }
  if (auto v = integer("FUNNEL_MAX_CLIENTS", 1, 4096)) s.max_clients = static_cast<uint32_t>(*v);
  if (auto v = integer("FUNNEL_COPY_THREADS", 1, 64)) s.copy_threads = static_cast<uint32_t>(*v);
  if (auto v = integer("FUNNEL_DEVICE_CONNECTIONS", 1, 32)) s.device_connections = static_cast<uint32_t>(*v);
  if (auto v = integer("FUNNEL_SERVER_SPIN_US", 0, 100000)) s.server_spin_us = static_cast<uint32_t>(*v);
  if (auto v = integer("FUNNEL_SERVER_IDLE_SPIN_US", 0, 100000)) s.server_idle_spin_us = static_cast<uint32_t>(*v);
  if (auto v = integer("FUNNEL_SERVER_SPIN_BACKOFF_MS", 0, 60000)) s.server_spin_backoff_ms = static_cast<uint32_t>(*v);
  if (auto v = integer("FUNNEL_SERVER_WORKERS", 0, 1024)) s.server_workers = static_cast<uint32_t>(*v);
  if (auto v = integer("FUNNEL_LAUNCH_BATCH", 0, 64)) s.launch_batch = static_cast<uint32_t>(*v);
  if (auto p = non_empty("FUNNEL_SIM_LAUNCH_LOG")) s.sim_launch_log = *p;
  if (auto k = non_empty("FUNNEL_SIM_FAULT_KERNEL")) s.sim_fault_kernel = *k;
  if (auto m = get("FUNNEL_DEVICE_MEM_LIMIT")) {
    parse_device_mem_limit("FUNNEL_DEVICE_MEM_LIMIT", *m, s);
  } else if (auto mps = env("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")) {
    parse_device_mem_limit("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", *mps, s);
    s.sources.back().second = "environment (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT)";
  }
  if (auto r = get("FUNNEL_RANKS_PER_GPU")) {
    s.ranks_per_gpu_set = true;
    if (*r != "even") s.ranks_per_gpu = static_cast<int>(parse_int("FUNNEL_RANKS_PER_GPU", *r, 1, 4096,
                                                                  accepted_of("FUNNEL_RANKS_PER_GPU")));
  }
  if (auto m = get("FUNNEL_GPU_MAP")) s.gpu_map = parse_ordinals("FUNNEL_GPU_MAP", *m);
  if (auto f = get("FUNNEL_GPU_FRACTION")) {
    s.gpu_share_bp = parse_share("FUNNEL_GPU_FRACTION", *f, false);
    s.gpu_share_from = "FUNNEL_GPU_FRACTION";
  } else if (auto p = env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")) {
    s.gpu_share_bp = parse_share("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", *p, true);
    s.gpu_share_from = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE";
    s.sources.back().second = "environment (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE)";
  }
  if (auto p = get("FUNNEL_GPU_PLACEMENT")) {
    if (*p == "disjoint") s.gpu_disjoint = true;
    else if (*p != "shared") bad("FUNNEL_GPU_PLACEMENT", *p, accepted_of("FUNNEL_GPU_PLACEMENT"));
  }
  if (auto p = get("FUNNEL_CLIENT_PRIORITY")) {
    if (*p == "below-normal" || *p == "1") s.below_normal_priority = true;
    else if (*p != "normal" && *p != "0") bad("FUNNEL_CLIENT_PRIORITY", *p, accepted_of("FUNNEL_CLIENT_PRIORITY"));
  } else if (auto mps = env("CUDA_MPS_CLIENT_PRIORITY")) {
    if (*mps == "1") s.below_normal_priority = true;
    else if (*mps != "0") bad("CUDA_MPS_CLIENT_PRIORITY", *mps, "0 (normal) or 1 (below normal)");
    s.sources.back().second = "environment (CUDA_MPS_CLIENT_PRIORITY)";
  }
  if (auto h = get("FUNNEL_MPI_HOOKS")) {
    if (*h == "auto") s.mpi_hooks = MpiHooks::Auto;
    else if (*h == "1") s.mpi_hooks = MpiHooks::On;
    else if (*h == "0") s.mpi_hooks = MpiHooks::Off;
    else bad("FUNNEL_MPI_HOOKS", *h, accepted_of("FUNNEL_MPI_HOOKS"));
  }
  if (auto l = get("FUNNEL_CLIENT_LAYOUT")) {
    if (*l == "default") s.client_layout_low = false;
    else if (*l != "low") bad("FUNNEL_CLIENT_LAYOUT", *l, accepted_of("FUNNEL_CLIENT_LAYOUT"));
  }
  if (auto a = get("FUNNEL_SERVER_AFFINITY")) {
    if (*a == "off") s.server_affinity = false;
    else if (*a == "gpu") s.worker_follows_rank = false;
    else if (*a != "auto") bad("FUNNEL_SERVER_AFFINITY", *a, accepted_of("FUNNEL_SERVER_AFFINITY"));
  }
  // A "1 | 0" switch: set, the variable decides; unset, the default stays.
  auto flag = [&](const char* var, bool& out) {
    if (auto v = get(var)) {
      if (*v == "1") out = true;
      else if (*v == "0") out = false;
      else bad(var, *v, accepted_of(var));
    }
  };
  flag("FUNNEL_PRINT_PLAN", s.print_plan);
  if (auto v = get("FUNNEL_GPU_REPLIES")) {
    if (auto g = gpu_replies_from(*v)) s.gpu_replies = *g;
    else bad("FUNNEL_GPU_REPLIES", *v, accepted_of("FUNNEL_GPU_REPLIES"));
  }
  flag("FUNNEL_SUBMIT_ORDER", s.submit_order);
  flag("FUNNEL_JOB_REPORT", s.job_report);
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
  if (var == "FUNNEL_RUN_DIR") return s.run_dir.string();
  if (var == "FUNNEL_JOB_ID") return s.job_id;
  if (var == "FUNNEL_BACKEND") return to_string(s.backend);
  if (var == "FUNNEL_SERVER") return s.server_binary.empty() ? "(beside the client runtime)" : s.server_binary.string();
  if (var == "FUNNEL_LOG_DIR") return s.log_dir.string();
  if (var == "FUNNEL_LOG_LEVEL") return s.log_level;
  if (var == "FUNNEL_IDLE_EXIT_MS") return std::to_string(s.idle_exit.count());
  if (var == "FUNNEL_ATTACH_TIMEOUT_MS") return std::to_string(s.attach_timeout.count());
  if (var == "FUNNEL_DEVICES") return s.devices.empty() ? "(all)" : fmt::format("{}", fmt::join(s.devices, ","));
  if (var == "FUNNEL_STAGING_SLOTS") return std::to_string(s.staging_slots);
  if (var == "FUNNEL_STAGING_SLOT_KB") return std::to_string(s.staging_slot_bytes / 1024);
  if (var == "FUNNEL_MAX_CLIENTS") return std::to_string(s.max_clients);
  if (var == "FUNNEL_COPY_THREADS") return std::to_string(s.copy_threads);
  if (var == "FUNNEL_DEVICE_CONNECTIONS") return std::to_string(s.device_connections);
  if (var == "FUNNEL_SERVER_SPIN_US") return std::to_string(s.server_spin_us);
  if (var == "FUNNEL_SERVER_IDLE_SPIN_US") return std::to_string(s.server_idle_spin_us);
  if (var == "FUNNEL_SERVER_SPIN_BACKOFF_MS") return std::to_string(s.server_spin_backoff_ms);
  if (var == "FUNNEL_SERVER_WORKERS") return std::to_string(s.server_workers);
  if (var == "FUNNEL_LAUNCH_BATCH") return std::to_string(s.launch_batch);
  if (var == "FUNNEL_SIM_LAUNCH_LOG") return s.sim_launch_log.empty() ? "(none)" : s.sim_launch_log.string();
  if (var == "FUNNEL_SIM_FAULT_KERNEL") return s.sim_fault_kernel.empty() ? "(none)" : s.sim_fault_kernel;
  if (var == "FUNNEL_DEVICE_MEM_LIMIT") {
    if (s.device_mem_limit_from.empty()) return "(none)";
    std::vector<std::string> items;
    if (s.device_mem_limit_all != 0) items.push_back(size_text(s.device_mem_limit_all));
    for (const auto& [d, b] : s.device_mem_limit) items.push_back(fmt::format("{}={}", d, size_text(b)));
    return fmt::format("{}", fmt::join(items, ","));
  }
  if (var == "FUNNEL_RANKS_PER_GPU")
    return !s.ranks_per_gpu_set ? "(not set)" : s.ranks_per_gpu == 0 ? "even" : std::to_string(s.ranks_per_gpu);
  if (var == "FUNNEL_GPU_MAP") return s.gpu_map.empty() ? "(not set)" : fmt::format("{}", fmt::join(s.gpu_map, ","));
  if (var == "FUNNEL_MPI_HOOKS") return to_string(s.mpi_hooks);
  if (var == "FUNNEL_CLIENT_LAYOUT") return s.client_layout_low ? "low" : "default";
  if (var == "FUNNEL_GPU_FRACTION")
    return s.gpu_share_bp == 0 ? "(the whole GPU)" : fmt::format("{:g}%", s.gpu_share_bp / 100.0);
  if (var == "FUNNEL_GPU_PLACEMENT") return s.gpu_disjoint ? "disjoint" : "shared";
  if (var == "FUNNEL_CLIENT_PRIORITY") return s.below_normal_priority ? "below-normal" : "normal";
  if (var == "FUNNEL_SERVER_AFFINITY") return server_affinity_name(s.server_affinity, s.worker_follows_rank);
  if (var == "FUNNEL_PRINT_PLAN") return s.print_plan ? "1" : "0";
  if (var == "FUNNEL_GPU_REPLIES") return gpu_replies_name(s.gpu_replies);
  if (var == "FUNNEL_SUBMIT_ORDER") return s.submit_order ? "1" : "0";
  if (var == "FUNNEL_JOB_REPORT") return s.job_report ? "1" : "0";
  return "";
}

}  // namespace funnel
