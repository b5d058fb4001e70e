// Every FUNNEL_* environment variable is declared once, in setting_table(): its
// default, what it accepts, what it means, how it is stored and shown, and the
// funnel-server option that sets the same thing. Settings::from, value_text,
// `funnelctl config`, funnel-server's options (setting_option.hpp) and
// doc/configuration.md's table all come from it. A bad value is a ConfigError whose
// message names the variable, the value and what is accepted.
#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "funnel/common/setting_defaults.hpp"

namespace funnel {

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Backend { Cuda, Sim };
const char* to_string(Backend b) noexcept;

// FUNNEL_MPI_HOOKS: whether funnel-run preloads the MPI hooks (libfunnel_mpi.so) into the
// program. Auto: when it runs under an MPI launcher (mpi_launcher_variable()).
enum class MpiHooks { Auto, On, Off };
const char* to_string(MpiHooks h) noexcept;

// FUNNEL_GPU_REPLIES (doc/design/channel.md, "Answered by the GPU"): Always (1), the GPU
// answers every synchronous copy and busy-stream synchronize by a stream write; Off (0), the
// server's worker answers them all; Auto, as Always, but while another such call is on the
// GPU the worker also answers once an event recorded before the write completes, if that
// comes first (the stream write waits for every copy in flight on the GPU, doc/performance.md).
enum class GpuReplies : uint8_t { Off, Always, Auto };
const char* gpu_replies_name(GpuReplies g) noexcept;
// The value named "auto", "1" or "0" (as gpu_replies_name writes it); nullopt for any other.
std::optional<GpuReplies> gpu_replies_from(std::string_view name) noexcept;

struct Settings {
  std::filesystem::path run_dir;    // FUNNEL_RUN_DIR
  std::string job_id;               // FUNNEL_JOB_ID, else the launcher's job id, else "nojob"
  Backend backend = Backend::Cuda;  // FUNNEL_BACKEND: for a server that a client starts
  std::filesystem::path server_binary;  // FUNNEL_SERVER; empty: beside the client runtime
  std::filesystem::path log_dir;    // FUNNEL_LOG_DIR
  std::string log_level = "info";   // FUNNEL_LOG_LEVEL
  std::chrono::milliseconds idle_exit{setting_default::kIdleExitMs};             // FUNNEL_IDLE_EXIT_MS
  std::chrono::milliseconds attach_timeout{setting_default::kAttachTimeoutMs};   // FUNNEL_ATTACH_TIMEOUT_MS
  std::vector<int> devices;         // FUNNEL_DEVICES; empty: every visible GPU
  uint32_t staging_slots = setting_default::kStagingSlots;  // FUNNEL_STAGING_SLOTS
  uint64_t staging_slot_bytes = uint64_t{setting_default::kStagingSlotKb} * 1024;  // FUNNEL_STAGING_SLOT_KB
  uint32_t max_clients = setting_default::kMaxClients;  // FUNNEL_MAX_CLIENTS
  uint32_t copy_threads = setting_default::kCopyThreads;  // FUNNEL_COPY_THREADS
  uint32_t device_connections = setting_default::kDeviceConnections;  // FUNNEL_DEVICE_CONNECTIONS
  uint32_t server_spin_us = setting_default::kServerSpinUs;  // FUNNEL_SERVER_SPIN_US
  uint32_t server_idle_spin_us = setting_default::kServerIdleSpinUs;  // FUNNEL_SERVER_IDLE_SPIN_US
  uint32_t server_spin_backoff_ms = setting_default::kServerSpinBackoffMs;  // FUNNEL_SERVER_SPIN_BACKOFF_MS (0: never)
  uint32_t server_workers = setting_default::kServerWorkers;  // FUNNEL_SERVER_WORKERS (0: a thread per client)
  uint32_t launch_batch = setting_default::kLaunchBatch;  // FUNNEL_LAUNCH_BATCH (0, 1: each launch on its own)
  std::filesystem::path sim_launch_log;  // FUNNEL_SIM_LAUNCH_LOG; empty: launches are not logged
  std::string sim_fault_kernel;     // FUNNEL_SIM_FAULT_KERNEL; empty: no fault injection
  // FUNNEL_DEVICE_MEM_LIMIT, else CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: the most device memory
  // this client may hold on a device, in bytes. A device's own entry wins over the value
  // for every device; 0: no limit. The server enforces it (it gets it in the hello).
  uint64_t device_mem_limit_all = 0;
  std::map<int, uint64_t> device_mem_limit;  // by device ordinal as the client sees it
  std::string device_mem_limit_from;         // the variable it came from; empty: none set
  uint64_t device_mem_limit_for(int device) const noexcept;
  // Which GPU this process uses (select_gpu()): FUNNEL_GPU_MAP by node-local rank, else
  // FUNNEL_RANKS_PER_GPU ("even" = 0, or ranks per GPU). When either is set the client
  // runtime shows that one GPU as device 0.
  bool ranks_per_gpu_set = false;
  int ranks_per_gpu = 0;            // 0: node-local ranks spread evenly over the GPUs
  std::vector<int> gpu_map;         // FUNNEL_GPU_MAP; empty: not set
  bool selects_gpu() const noexcept { return ranks_per_gpu_set || !gpu_map.empty(); }
  MpiHooks mpi_hooks = MpiHooks::Auto;  // FUNNEL_MPI_HOOKS (funnel-run only)
  bool client_layout_low = true;        // FUNNEL_CLIENT_LAYOUT=low (funnel-run only)
  bool client_driver = true;            // FUNNEL_CLIENT_DRIVER=1 (funnel-run only)
  // FUNNEL_GPU_FRACTION (or CUDA_MPS_ACTIVE_THREAD_PERCENTAGE) in 1/10000 of a GPU's SMs;
  // 0: the whole GPU.  The server turns it into an SM partition (a green context).
  uint32_t gpu_share_bp = 0;
  std::string gpu_share_from;  // the variable it came from; empty: none set
  bool gpu_disjoint = false;   // FUNNEL_GPU_PLACEMENT=disjoint (default shared)
  // FUNNEL_CLIENT_PRIORITY (or CUDA_MPS_CLIENT_PRIORITY) is below-normal.
  bool below_normal_priority = false;
  // FUNNEL_SERVER_AFFINITY=auto (true): a server pins its threads near their GPU and away
  // from the ranks (doc/placement.md); off: it leaves its CPU affinity alone.
  bool server_affinity = true;
  // auto (true): where ranks are bound to every core, a worker shares its own rank's CPUs;
  // gpu (false): it shares every core near its GPU.
  bool worker_follows_rank = true;
  // FUNNEL_PRINT_PLAN=1: the placement plan is printed to stderr once the process attached
  // (under the MPI hooks: by the node's first rank, once the node's ranks of the job attached).
  bool print_plan = false;
  bool mpi_local = false;  // FUNNEL_MPI_LOCAL: GPU-local messages under the MPI hooks
  // FUNNEL_GPU_REPLIES: whether the GPU answers a waiting client itself (a stream memory
  // write) where the server's worker would otherwise have to notice the completion.
  GpuReplies gpu_replies = GpuReplies::Auto;
  // FUNNEL_SUBMIT_ORDER: workers on cores of their own take waited copies to the driver in
  // turn (runtime/server/src/loop/submit_order.hpp); experimental, off by default.
  bool submit_order = false;
  // FUNNEL_JOB_REPORT: a stopping server writes the job report to log_dir (doc/accounting.md).
  bool job_report = true;

  // Where each value came from ("default", "environment"), by variable name, in table order.
  std::vector<std::pair<std::string, std::string>> sources;

  using Lookup = std::function<std::optional<std::string>(const char*)>;
  // The Lookup of this process's environment (getenv).
  static std::optional<std::string> environment(const char* name);
  static Settings from_environment();
  static Settings from(const Lookup& env);
};

// What a setting's value must be.
// An integer in min..max, a multiple of multiple_of (from_chars, base 10, nothing after).
struct IntegerRange {
  int64_t min;
  int64_t max;
  int64_t multiple_of = 1;
};
// One of the words of the row's accepted text, which lists them separated by " | ".
struct OneOfWords {};
// Anything else (paths, GPU lists, sizes): true when the text is accepted.
struct FreeForm {
  bool (*accepts)(const std::string& value);
};
using SettingCheck = std::variant<IntegerRange, OneOfWords, FreeForm>;

// A row's words for people: doc/configuration.md's table (scripts/gen-config-doc.py reads
// these four literals out of config.cpp) and `funnelctl config`.
struct SettingText {
  const char* variable;
  const char* default_text;
  const char* accepted;  // also every "expected ..." of a bad value's message
  const char* meaning;
};

// One row of the configuration table: everything about one FUNNEL_* variable.
struct SettingInfo : SettingText {
  SettingCheck check;
  // Stores an accepted value (Settings::from); the default is Settings' initializer.
  void (*store)(Settings& s, const std::string& value);
  // The effective value as text (value_text).
  std::string (*show)(const Settings& s);
  // funnel-server's option that sets the same thing and accepts exactly the same values
  // (setting_option.hpp), its help and the unit of its value; nullptr: none.
  const char* option = nullptr;
  const char* option_help = nullptr;
  const char* unit = nullptr;
  // Where the variable is unset: reads the CUDA MPS variable it stands in for; returns
  // that variable's name when it was set, nullptr when not.
  const char* (*fallback)(Settings& s, const Settings::Lookup& env) = nullptr;
};
const std::vector<SettingInfo>& setting_table();
// The row of `variable`; nullptr when there is none.
const SettingInfo* find_setting(std::string_view variable) noexcept;
// Whether `row`'s variable (and its option) accepts `value`.
bool setting_accepts(const SettingInfo& row, const std::string& value);
// The words of a OneOfWords row ("trace | debug" -> trace, debug).
std::vector<std::string_view> setting_words(const SettingInfo& row);
// funnel-server's option of `row` (setting_option.hpp): its help, and what it says of a
// value it does not accept ("" for one it accepts).
std::string setting_option_help(const SettingInfo& row);
std::string setting_option_error(const SettingInfo& row, const std::string& value);

// The job id a launcher gave this process: SLURM_JOB_ID, PBS_JOBID, LSB_JOBID,
// Open MPI's OMPI_MCA_ess_base_jobid, PMIX_NAMESPACE — or "nojob".
std::string launcher_job_id(const Settings::Lookup& env);

// Parses a device-memory limit: "1G", "512M", "1024K", "4096" (bytes), a "B" after the
// unit allowed ("512MB"), or per device "0=1G,1=512M" (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT's
// syntax), items of both kinds mixed. Throws ConfigError naming `variable`.
void parse_device_mem_limit(const char* variable, const std::string& value, Settings& out);

// This process's node-local rank and the number of ranks on its node, from the launcher
// (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID, PMIX_LOCAL_RANK; sizes from
// OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS, this node's entry (SLURM_NODEID) of srun's
// SLURM_STEP_TASKS_PER_NODE, SLURM_NTASKS_PER_NODE, PMIX_LOCAL_SIZE);
// rank 0 of 1 when there is no launcher.
struct LocalRank {
  int rank = 0;
  int size = 1;
};
LocalRank launcher_local_rank(const Settings::Lookup& env);

// The GPU (an ordinal of the server's, 0..ngpus-1) this process uses under FUNNEL_GPU_MAP
// or FUNNEL_RANKS_PER_GPU; -1 when neither is set. ConfigError when the map has no entry
// for the rank or names a GPU the server does not have.
int select_gpu(const Settings& s, const LocalRank& local, int ngpus);
// Throws ConfigError when FUNNEL_DEVICE_MEM_LIMIT (or CUDA_MPS_PINNED_DEVICE_MEM_LIMIT)
// names a device ordinal the process cannot see (`visible` devices: the server's, or 1
// where FUNNEL_GPU_MAP / FUNNEL_RANKS_PER_GPU give it one): a limit that limits nothing.
void check_device_mem_limit(const Settings& s, int visible);

// The variable that shows this process was started by an MPI launcher, "" when none is
// set: OMPI_COMM_WORLD_SIZE (Open MPI's mpirun), PMIX_RANK (any PMIx launcher: Open MPI's
// mpirun and prterun, srun --mpi=pmix), PMI_RANK (PMI: MPICH's and Intel MPI's mpiexec).
std::string mpi_launcher_variable(const Settings::Lookup& env);

// The value of the effective setting, as text (for funnelctl config and logs).
std::string value_text(const Settings& s, const std::string& variable);
// FUNNEL_SERVER_AFFINITY's value for Settings::server_affinity and worker_follows_rank:
// "auto", "gpu" or "off".
const char* server_affinity_name(bool server_affinity, bool worker_follows_rank) noexcept;

}  // namespace funnel
