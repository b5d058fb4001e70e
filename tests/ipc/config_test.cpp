// Settings: every FUNNEL_* variable's default, accepted values, and rejected values
// (a ConfigError that names the variable and the value).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "funnel/common/config.hpp"
#include "funnel/common/launcher.hpp"
#include "funnel/common/run_dir.hpp"
#include "funnel/common/setting_option.hpp"
#include "watchdog.hpp"

namespace funnel {
namespace {

using Env = std::map<std::string, std::string>;

Settings settings(const Env& env) {
  return Settings::from([&](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

WATCHED_TEST(Settings, Defaults) {
  const Settings s = settings({});
  EXPECT_EQ(s.job_id, "nojob");
  EXPECT_EQ(s.run_dir, default_run_dir("nojob"));
  EXPECT_EQ(s.backend, Backend::Cuda);
  EXPECT_TRUE(s.server_binary.empty());
  EXPECT_EQ(s.log_dir, "/tmp/funnel-" + std::to_string(::geteuid()) + "-logs");
  EXPECT_EQ(s.log_level, "info");
  EXPECT_EQ(s.idle_exit.count(), 3000);
  EXPECT_EQ(s.attach_timeout.count(), 30000);
  EXPECT_TRUE(s.devices.empty());
  EXPECT_EQ(s.staging_slots, 4u);
  EXPECT_EQ(s.staging_slot_bytes, 2u << 20);
  EXPECT_EQ(s.max_clients, 256u);
  EXPECT_TRUE(s.sim_launch_log.empty());
}

WATCHED_TEST(Settings, SimFaultKernel) {
  EXPECT_EQ(settings({{"FUNNEL_SIM_FAULT_KERNEL", "_Z5crashPi"}}).sim_fault_kernel, "_Z5crashPi");
  EXPECT_EQ(value_text(settings({}), "FUNNEL_SIM_FAULT_KERNEL"), "(none)");
  EXPECT_THROW(settings({{"FUNNEL_SIM_FAULT_KERNEL", ""}}), ConfigError);
}

WATCHED_TEST(Settings, SimLaunchLog) {
  EXPECT_EQ(settings({{"FUNNEL_SIM_LAUNCH_LOG", "/tmp/launches.jsonl"}}).sim_launch_log, "/tmp/launches.jsonl");
  EXPECT_EQ(value_text(settings({}), "FUNNEL_SIM_LAUNCH_LOG"), "(none)");
  try {
    settings({{"FUNNEL_SIM_LAUNCH_LOG", ""}});
    FAIL() << "an empty FUNNEL_SIM_LAUNCH_LOG was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("FUNNEL_SIM_LAUNCH_LOG"), std::string::npos) << e.what();
  }
}

WATCHED_TEST(Settings, SourcesFollowTheTableAndSayWhereEachValueCameFrom) {
  const auto& table = setting_table();
  const Settings d = settings({});
  ASSERT_EQ(d.sources.size(), table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    EXPECT_EQ(d.sources[i].first, table[i].variable);
    EXPECT_EQ(d.sources[i].second, "default");
  }
  const Settings e = settings({{"FUNNEL_MAX_CLIENTS", "8"}});
  for (const auto& [var, source] : e.sources)
    EXPECT_EQ(source, var == "FUNNEL_MAX_CLIENTS" ? "environment" : "default") << var;
}

WATCHED_TEST(Settings, TableRowsAreCompleteAndUnique) {
  std::set<std::string> seen;
  for (const auto& row : setting_table()) {
    const std::string var = row.variable;
    EXPECT_EQ(var.rfind("FUNNEL_", 0), 0u) << var;
    EXPECT_TRUE(seen.insert(var).second) << var << " twice";
    EXPECT_NE(std::string(row.default_text), "") << var;
    EXPECT_NE(std::string(row.accepted), "") << var;
    EXPECT_NE(std::string(row.meaning), "") << var;
    EXPECT_NE(value_text(settings({}), var), "") << var << " has no value_text";
  }
  EXPECT_EQ(value_text(settings({}), "FUNNEL_NOT_A_SETTING"), "");
}

WATCHED_TEST(Settings, GoodValues) {
  const Settings s = settings({
      {"FUNNEL_RUN_DIR", "/dev/shm/my-run"},
      {"FUNNEL_JOB_ID", "job-42_a.b"},
      {"FUNNEL_BACKEND", "sim"},
      {"FUNNEL_SERVER", "/opt/funnel/bin/funnel-server"},
      {"FUNNEL_LOG_DIR", "/var/tmp/logs"},
      {"FUNNEL_LOG_LEVEL", "debug"},
      {"FUNNEL_IDLE_EXIT_MS", "0"},
      {"FUNNEL_ATTACH_TIMEOUT_MS", "100"},
      {"FUNNEL_DEVICES", "0,3,63"},
      {"FUNNEL_STAGING_SLOTS", "16"},
      {"FUNNEL_STAGING_SLOT_KB", "64"},
      {"FUNNEL_MAX_CLIENTS", "4096"},
  });
  EXPECT_EQ(s.run_dir, "/dev/shm/my-run");
  EXPECT_EQ(s.job_id, "job-42_a.b");
  EXPECT_EQ(s.backend, Backend::Sim);
  EXPECT_EQ(s.server_binary, "/opt/funnel/bin/funnel-server");
  EXPECT_EQ(s.log_dir, "/var/tmp/logs");
  EXPECT_EQ(s.log_level, "debug");
  EXPECT_EQ(s.idle_exit.count(), 0);
  EXPECT_EQ(s.attach_timeout.count(), 100);
  EXPECT_EQ(s.devices, (std::vector<int>{0, 3, 63}));
  EXPECT_EQ(s.staging_slots, 16u);
  EXPECT_EQ(s.staging_slot_bytes, 64u * 1024);
  EXPECT_EQ(s.max_clients, 4096u);
  EXPECT_EQ(value_text(s, "FUNNEL_DEVICES"), "0,3,63");
  EXPECT_EQ(value_text(s, "FUNNEL_BACKEND"), "sim");
  EXPECT_EQ(value_text(s, "FUNNEL_STAGING_SLOT_KB"), "64");

  const Settings upper = settings({{"FUNNEL_BACKEND", "cuda"}, {"FUNNEL_IDLE_EXIT_MS", "3600000"},
                                   {"FUNNEL_STAGING_SLOT_KB", "262144"}, {"FUNNEL_DEVICES", "5"}});
  EXPECT_EQ(upper.backend, Backend::Cuda);
  EXPECT_EQ(upper.idle_exit.count(), 3600000);
  EXPECT_EQ(upper.staging_slot_bytes, 262144ull * 1024);
  EXPECT_EQ(upper.devices, std::vector<int>{5});
  for (const char* level : {"trace", "debug", "info", "warn", "error", "off"})
    EXPECT_EQ(settings({{"FUNNEL_LOG_LEVEL", level}}).log_level, level);
}

WATCHED_TEST(Settings, JobIdComesFromTheLauncher) {
  EXPECT_EQ(settings({{"SLURM_JOB_ID", "123"}}).job_id, "123");
  EXPECT_EQ(settings({{"PBS_JOBID", "77.pbs-server"}}).job_id, "77.pbs-server");
  EXPECT_EQ(settings({{"PMIX_NAMESPACE", "prterun/1"}}).job_id, "prterun_1") << "sanitized for a file name";
  EXPECT_EQ(settings({{"SLURM_JOB_ID", "9"}, {"PBS_JOBID", "8"}}).job_id, "9") << "SLURM first";
  EXPECT_EQ(settings({{"SLURM_JOB_ID", "9"}, {"FUNNEL_JOB_ID", "mine"}}).job_id, "mine") << "FUNNEL_JOB_ID wins";
  const Settings s = settings({{"SLURM_JOB_ID", "123"}});
  EXPECT_EQ(s.run_dir.filename(), "funnel-" + std::to_string(::geteuid()) + "-123");
}

struct Bad {
  std::string variable;
  std::string value;
};

WATCHED_TEST(Settings, BadValuesNameTheVariableAndTheValue) {
  const std::vector<Bad> cases{
      {"FUNNEL_BACKEND", "gpu"},
      {"FUNNEL_BACKEND", ""},
      {"FUNNEL_IDLE_EXIT_MS", "-1"},
      {"FUNNEL_IDLE_EXIT_MS", "3600001"},
      {"FUNNEL_IDLE_EXIT_MS", "12ms"},
      {"FUNNEL_IDLE_EXIT_MS", ""},
      {"FUNNEL_ATTACH_TIMEOUT_MS", "99"},
      {"FUNNEL_STAGING_SLOT_KB", "5"},
      {"FUNNEL_STAGING_SLOT_KB", "66"},
      {"FUNNEL_STAGING_SLOT_KB", "262148"},
      {"FUNNEL_STAGING_SLOTS", "1"},
      {"FUNNEL_STAGING_SLOTS", "17"},
      {"FUNNEL_MAX_CLIENTS", "0"},
      {"FUNNEL_MAX_CLIENTS", "4097"},
      {"FUNNEL_DEVICES", "0,,1"},
      {"FUNNEL_DEVICES", "0,1,"},
      {"FUNNEL_DEVICES", ",0"},
      {"FUNNEL_DEVICES", ""},
      {"FUNNEL_DEVICES", "-1"},
      {"FUNNEL_DEVICES", "64"},
      {"FUNNEL_DEVICES", "0,a"},
      {"FUNNEL_RUN_DIR", "relative/dir"},
      {"FUNNEL_RUN_DIR", ""},
      {"FUNNEL_RUN_DIR", "/" + std::string(120, 'd')},
      {"FUNNEL_JOB_ID", "a/b"},
      {"FUNNEL_JOB_ID", ""},
      {"FUNNEL_JOB_ID", "x y"},
      {"FUNNEL_SERVER", ""},
      {"FUNNEL_LOG_DIR", ""},
      {"FUNNEL_LOG_LEVEL", "verbose"},
  };
  for (const auto& c : cases) {
    try {
      settings({{c.variable, c.value}});
      ADD_FAILURE() << c.variable << "='" << c.value << "' was accepted";
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(c.variable), std::string::npos) << msg;
      EXPECT_NE(msg.find("'" + c.value + "'"), std::string::npos) << "the message must quote the whole value: " << msg;
      EXPECT_NE(msg.find("expected"), std::string::npos) << msg;
    }
  }
}

WATCHED_TEST(Settings, DeviceMemLimit) {
  constexpr uint64_t K = 1024, M = K * K, G = M * K;
  const Settings none = settings({});
  EXPECT_EQ(none.device_mem_limit_for(0), 0u);
  EXPECT_EQ(value_text(none, "FUNNEL_DEVICE_MEM_LIMIT"), "(none)");
  EXPECT_EQ(settings({{"FUNNEL_DEVICE_MEM_LIMIT", "1G"}}).device_mem_limit_for(3), G);
  EXPECT_EQ(settings({{"FUNNEL_DEVICE_MEM_LIMIT", "512M"}}).device_mem_limit_for(0), 512 * M);
  EXPECT_EQ(settings({{"FUNNEL_DEVICE_MEM_LIMIT", "512MB"}}).device_mem_limit_for(0), 512 * M);
  EXPECT_EQ(settings({{"FUNNEL_DEVICE_MEM_LIMIT", "1024K"}}).device_mem_limit_for(0), M);
  EXPECT_EQ(settings({{"FUNNEL_DEVICE_MEM_LIMIT", "1024k"}}).device_mem_limit_for(0), M);
  EXPECT_EQ(settings({{"FUNNEL_DEVICE_MEM_LIMIT", "4097"}}).device_mem_limit_for(0), 4097u);
  EXPECT_EQ(settings({{"FUNNEL_DEVICE_MEM_LIMIT", "2T"}}).device_mem_limit_for(0), 2048 * G);

  const Settings per = settings({{"FUNNEL_DEVICE_MEM_LIMIT", "0=1G,1=512M"}});
  EXPECT_EQ(per.device_mem_limit_for(0), G);
  EXPECT_EQ(per.device_mem_limit_for(1), 512 * M);
  EXPECT_EQ(per.device_mem_limit_for(2), 0u) << "a device without an entry has no limit";
  EXPECT_EQ(value_text(per, "FUNNEL_DEVICE_MEM_LIMIT"), "0=1G,1=512M");
  const Settings mixed = settings({{"FUNNEL_DEVICE_MEM_LIMIT", "2G,1=512M"}});
  EXPECT_EQ(mixed.device_mem_limit_for(0), 2 * G);
  EXPECT_EQ(mixed.device_mem_limit_for(1), 512 * M);
  EXPECT_EQ(value_text(mixed, "FUNNEL_DEVICE_MEM_LIMIT"), "2G,1=512M");
  EXPECT_EQ(value_text(settings({{"FUNNEL_DEVICE_MEM_LIMIT", "4097"}}), "FUNNEL_DEVICE_MEM_LIMIT"), "4097");

  // CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: honoured when FUNNEL_DEVICE_MEM_LIMIT is unset.
  const Settings mps = settings({{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=1G,1=2G"}});
  EXPECT_EQ(mps.device_mem_limit_for(1), 2 * G);
  EXPECT_EQ(mps.device_mem_limit_from, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT");
  bool found = false;
  for (const auto& [var, source] : mps.sources)
    if (var == "FUNNEL_DEVICE_MEM_LIMIT") {
      found = true;
      EXPECT_EQ(source, "environment (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT)");
    }
  EXPECT_TRUE(found);
  const Settings both =
      settings({{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=1G"}, {"FUNNEL_DEVICE_MEM_LIMIT", "0=256M"}});
  EXPECT_EQ(both.device_mem_limit_for(0), 256 * M) << "FUNNEL_DEVICE_MEM_LIMIT wins";
  EXPECT_EQ(both.device_mem_limit_from, "FUNNEL_DEVICE_MEM_LIMIT");

  for (const char* var : {"FUNNEL_DEVICE_MEM_LIMIT", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"}) {
    for (const std::string v : {"", "0", "1X", "G", "-1G", "1.5G", "1GiB", "0=", "=1G", "0=1G,", ",0=1G", "0=1G,0=2G",
                                "1G,2G", "a=1G", "64=1G", "0=0", "0:1G", "99999999999999999999",
                                "17179869184T"}) {
      try {
        settings({{var, v}});
        ADD_FAILURE() << var << "='" << v << "' was accepted";
      } catch (const ConfigError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(std::string(var) + "='" + v + "'"), std::string::npos) << msg;
        EXPECT_NE(msg.find("expected bytes with an optional K, M, G or T"), std::string::npos) << msg;
        EXPECT_NE(msg.find("0=1G,1=512M"), std::string::npos) << msg;
      }
    }
  }
}

// A ConfigError whose message names the variable, the value and `accepted`.
void expect_bad(const std::string& var, const std::string& value, const std::string& accepted) {
  try {
    settings({{var, value}});
    ADD_FAILURE() << var << "='" << value << "' was accepted";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(var + "='" + value + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(accepted), std::string::npos) << msg;
  }
}

WATCHED_TEST(Settings, GpuSelection) {
  const Settings none = settings({});
  EXPECT_FALSE(none.selects_gpu());
  EXPECT_EQ(select_gpu(none, {0, 4}, 2), -1);
  EXPECT_EQ(value_text(none, "FUNNEL_RANKS_PER_GPU"), "(not set)");
  EXPECT_EQ(value_text(none, "FUNNEL_GPU_MAP"), "(not set)");

  const Settings even = settings({{"FUNNEL_RANKS_PER_GPU", "even"}});
  EXPECT_TRUE(even.selects_gpu());
  EXPECT_EQ(value_text(even, "FUNNEL_RANKS_PER_GPU"), "even");
  std::vector<int> got;
  for (int r = 0; r < 6; ++r) got.push_back(select_gpu(even, {r, 6}, 4));
  EXPECT_EQ(got, (std::vector<int>{0, 0, 1, 2, 2, 3})) << "local rank x GPUs / local ranks";
  EXPECT_EQ(select_gpu(even, {7, 4}, 2), 1) << "a rank past the local size wraps";

  const Settings two = settings({{"FUNNEL_RANKS_PER_GPU", "2"}});
  got.clear();
  for (int r = 0; r < 6; ++r) got.push_back(select_gpu(two, {r, 6}, 2));
  EXPECT_EQ(got, (std::vector<int>{0, 0, 1, 1, 0, 0})) << "consecutive pairs, modulo the GPUs";

  const Settings map = settings({{"FUNNEL_GPU_MAP", "0,0,1,1"}, {"FUNNEL_RANKS_PER_GPU", "1"}});
  EXPECT_EQ(map.gpu_map, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(value_text(map, "FUNNEL_GPU_MAP"), "0,0,1,1");
  EXPECT_EQ(select_gpu(map, {1, 4}, 2), 0) << "the map wins over FUNNEL_RANKS_PER_GPU";
  EXPECT_EQ(select_gpu(map, {2, 4}, 2), 1);
  try {
    select_gpu(map, {4, 5}, 2);
    ADD_FAILURE() << "a rank without a map entry was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("FUNNEL_GPU_MAP='0,0,1,1' is not valid for node-local rank 4"),
              std::string::npos) << e.what();
  }
  try {
    select_gpu(map, {3, 4}, 1);
    ADD_FAILURE() << "a map entry past the GPUs was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("GPU 1 but the funnel-server has 1 GPU(s)"), std::string::npos) << e.what();
  }

  // The node-local rank and size from the launcher.
  auto local = [](const Env& env) {
    return launcher_local_rank([&](const char* name) -> std::optional<std::string> {
      auto it = env.find(name);
      if (it == env.end()) return std::nullopt;
      return it->second;
    });
  };
  EXPECT_EQ(local({}).rank, 0);
  EXPECT_EQ(local({}).size, 1);
  EXPECT_EQ(local({{"OMPI_COMM_WORLD_LOCAL_RANK", "3"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "8"}}).rank, 3);
  EXPECT_EQ(local({{"OMPI_COMM_WORLD_LOCAL_RANK", "3"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "8"}}).size, 8);
  EXPECT_EQ(local({{"MPI_LOCALRANKID", "2"}, {"MPI_LOCALNRANKS", "4"}}).rank, 2);
  EXPECT_EQ(local({{"SLURM_LOCALID", "5"}, {"SLURM_NTASKS_PER_NODE", "6"}}).size, 6);
  EXPECT_EQ(local({{"PMIX_LOCAL_RANK", "1"}, {"PMIX_LOCAL_SIZE", "2"}}).rank, 1);
  // srun: the step's tasks on this node (SLURM_NODEID) from SLURM_STEP_TASKS_PER_NODE.
  EXPECT_EQ(local({{"SLURM_LOCALID", "1"}, {"SLURM_STEP_TASKS_PER_NODE", "4"}}).size, 4);
  EXPECT_EQ(local({{"SLURM_STEP_TASKS_PER_NODE", "2(x3),1"}, {"SLURM_NODEID", "2"}}).size, 2);
  EXPECT_EQ(local({{"SLURM_STEP_TASKS_PER_NODE", "2(x3),1"}, {"SLURM_NODEID", "3"}}).size, 1);
  EXPECT_EQ(local({{"SLURM_STEP_TASKS_PER_NODE", "3,5"}, {"SLURM_NODEID", "1"}}).size, 5);
  EXPECT_EQ(local({{"SLURM_STEP_TASKS_PER_NODE", "2(x3),1"}, {"SLURM_NODEID", "4"}, {"SLURM_NTASKS_PER_NODE", "7"}}).size, 7)
      << "a node past the list: the next variable";
  for (const char* bad : {"", "x", "2(x", "2(x0)", "2(x3", "0", "2(y3)", "2(x3)z"})
    EXPECT_EQ(local({{"SLURM_STEP_TASKS_PER_NODE", bad}}).size, 1) << bad;
  EXPECT_EQ(local({{"OMPI_COMM_WORLD_LOCAL_SIZE", "8"}, {"SLURM_STEP_TASKS_PER_NODE", "4"}}).size, 8)
      << "the MPI launcher's own variable first";
  EXPECT_EQ(local({{"SLURM_LOCALID", "x"}, {"PMIX_LOCAL_RANK", "1"}}).rank, 1) << "a malformed one is skipped";

  for (const auto& [var, v] : std::vector<std::pair<std::string, std::string>>{
           {"FUNNEL_RANKS_PER_GPU", ""}, {"FUNNEL_RANKS_PER_GPU", "0"}, {"FUNNEL_RANKS_PER_GPU", "4097"},
           {"FUNNEL_RANKS_PER_GPU", "Even"}, {"FUNNEL_RANKS_PER_GPU", "2x"}, {"FUNNEL_GPU_MAP", ""},
           {"FUNNEL_GPU_MAP", "0,,1"}, {"FUNNEL_GPU_MAP", "0,1,"}, {"FUNNEL_GPU_MAP", ",0"},
           {"FUNNEL_GPU_MAP", "-1"}, {"FUNNEL_GPU_MAP", "64"}, {"FUNNEL_GPU_MAP", "0;1"}})
    expect_bad(var, v, "' is not valid: expected");
}

// FUNNEL_MPI_HOOKS, and the launcher detection behind its "auto" (funnel-run).
WATCHED_TEST(Settings, MpiHooks) {
  EXPECT_EQ(settings({}).mpi_hooks, MpiHooks::Auto);
  EXPECT_EQ(value_text(settings({}), "FUNNEL_MPI_HOOKS"), "auto");
  EXPECT_EQ(settings({{"FUNNEL_MPI_HOOKS", "auto"}}).mpi_hooks, MpiHooks::Auto);
  EXPECT_EQ(settings({{"FUNNEL_MPI_HOOKS", "1"}}).mpi_hooks, MpiHooks::On);
  EXPECT_EQ(settings({{"FUNNEL_MPI_HOOKS", "0"}}).mpi_hooks, MpiHooks::Off);
  EXPECT_EQ(value_text(settings({{"FUNNEL_MPI_HOOKS", "0"}}), "FUNNEL_MPI_HOOKS"), "0");
  for (const std::string v : {"", "yes", "on", "off", "true", "2", "Auto", " 1"}) {
    try {
      settings({{"FUNNEL_MPI_HOOKS", v}});
      ADD_FAILURE() << "FUNNEL_MPI_HOOKS='" << v << "' was accepted";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()), "FUNNEL_MPI_HOOKS='" + v + "' is not valid: expected auto | 1 | 0");
    }
  }

  auto launcher = [](const Env& env) {
    return mpi_launcher_variable([&](const char* name) -> std::optional<std::string> {
      return env.contains(name) ? std::optional<std::string>(env.at(name)) : std::nullopt;
    });
  };
  EXPECT_EQ(launcher({}), "");
  // What Open MPI 4.1's mpirun sets (it sets both); MPICH's and Intel MPI's mpiexec.
  EXPECT_EQ(launcher({{"OMPI_COMM_WORLD_SIZE", "4"}, {"PMIX_RANK", "0"}}), "OMPI_COMM_WORLD_SIZE");
  EXPECT_EQ(launcher({{"PMIX_RANK", "3"}}), "PMIX_RANK");
  EXPECT_EQ(launcher({{"PMI_RANK", "0"}}), "PMI_RANK");
  EXPECT_EQ(launcher({{"PMI_RANK", ""}}), "") << "an empty variable shows no launcher";
  // A batch job, or a job id, is not an MPI launcher: a plain program under Slurm gets no hooks.
  EXPECT_EQ(launcher({{"SLURM_JOB_ID", "7"}, {"SLURM_PROCID", "0"}, {"OMPI_MCA_ess_base_jobid", "1"}}), "");
}

WATCHED_TEST(Settings, GpuFractionPlacementAndClientPriority) {
  const Settings none = settings({});
  EXPECT_EQ(none.gpu_share_bp, 0u);
  EXPECT_FALSE(none.gpu_disjoint);
  EXPECT_FALSE(none.below_normal_priority);
  EXPECT_EQ(value_text(none, "FUNNEL_GPU_FRACTION"), "(the whole GPU)");
  EXPECT_EQ(value_text(none, "FUNNEL_GPU_PLACEMENT"), "shared");
  EXPECT_EQ(value_text(none, "FUNNEL_CLIENT_PRIORITY"), "normal");

  EXPECT_EQ(settings({{"FUNNEL_GPU_FRACTION", "0.25"}}).gpu_share_bp, 2500u);
  EXPECT_EQ(settings({{"FUNNEL_GPU_FRACTION", "25%"}}).gpu_share_bp, 2500u);
  EXPECT_EQ(settings({{"FUNNEL_GPU_FRACTION", "12.5%"}}).gpu_share_bp, 1250u);
  EXPECT_EQ(settings({{"FUNNEL_GPU_FRACTION", ".125"}}).gpu_share_bp, 1250u);
  EXPECT_EQ(settings({{"FUNNEL_GPU_FRACTION", "1"}}).gpu_share_bp, 0u) << "the whole GPU";
  EXPECT_EQ(settings({{"FUNNEL_GPU_FRACTION", "100%"}}).gpu_share_bp, 0u);
  EXPECT_EQ(settings({{"FUNNEL_GPU_FRACTION", "0.00001"}}).gpu_share_bp, 1u) << "never rounded to nothing";
  EXPECT_EQ(value_text(settings({{"FUNNEL_GPU_FRACTION", "0.125"}}), "FUNNEL_GPU_FRACTION"), "12.5%");
  for (const char* v : {"", "0", "0%", "1.5", "101%", "-0.5", "abc", "0.25x", "%", "25 %", "nan", "inf"})
    expect_bad("FUNNEL_GPU_FRACTION", v, "a fraction above 0 and at most 1 (e.g. 0.25) or a percentage (e.g. 25%)");

  // CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: a percentage without the sign, when FUNNEL_GPU_FRACTION is unset.
  const Settings mps = settings({{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "12.5"}});
  EXPECT_EQ(mps.gpu_share_bp, 1250u);
  EXPECT_EQ(mps.gpu_share_from, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
  EXPECT_EQ(settings({{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100"}}).gpu_share_bp, 0u);
  EXPECT_EQ(settings({{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "50"}, {"FUNNEL_GPU_FRACTION", "0.25"}}).gpu_share_bp,
            2500u)
      << "FUNNEL_GPU_FRACTION wins";
  for (const char* v : {"", "0", "101", "25%", "x"})
    expect_bad("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", v, "a percentage of the GPU's SMs above 0 and at most 100");

  EXPECT_TRUE(settings({{"FUNNEL_GPU_PLACEMENT", "disjoint"}}).gpu_disjoint);
  EXPECT_FALSE(settings({{"FUNNEL_GPU_PLACEMENT", "shared"}}).gpu_disjoint);
  for (const char* v : {"", "Disjoint", "exclusive"}) expect_bad("FUNNEL_GPU_PLACEMENT", v, "shared | disjoint");

  EXPECT_TRUE(settings({{"FUNNEL_CLIENT_PRIORITY", "below-normal"}}).below_normal_priority);
  EXPECT_TRUE(settings({{"FUNNEL_CLIENT_PRIORITY", "1"}}).below_normal_priority);
  EXPECT_FALSE(settings({{"FUNNEL_CLIENT_PRIORITY", "normal"}}).below_normal_priority);
  EXPECT_FALSE(settings({{"FUNNEL_CLIENT_PRIORITY", "0"}}).below_normal_priority);
  EXPECT_TRUE(settings({{"CUDA_MPS_CLIENT_PRIORITY", "1"}}).below_normal_priority);
  EXPECT_FALSE(settings({{"CUDA_MPS_CLIENT_PRIORITY", "1"}, {"FUNNEL_CLIENT_PRIORITY", "normal"}}).below_normal_priority)
      << "FUNNEL_CLIENT_PRIORITY wins";
  for (const char* v : {"", "2", "high", "-1"}) expect_bad("FUNNEL_CLIENT_PRIORITY", v, "normal | below-normal | 0 | 1");
  for (const char* v : {"", "2", "normal"}) expect_bad("CUDA_MPS_CLIENT_PRIORITY", v, "0 (normal) or 1 (below normal)");
}

WATCHED_TEST(Settings, ServerSpin) {
  EXPECT_EQ(settings({}).server_spin_us, 2000u);
  EXPECT_EQ(settings({{"FUNNEL_SERVER_SPIN_US", "0"}}).server_spin_us, 0u);
  EXPECT_EQ(value_text(settings({{"FUNNEL_SERVER_SPIN_US", "300"}}), "FUNNEL_SERVER_SPIN_US"), "300");
  for (const char* v : {"", "-1", "100001", "2ms"}) expect_bad("FUNNEL_SERVER_SPIN_US", v, "integer 0..100000");
  EXPECT_EQ(settings({}).server_idle_spin_us, 50u);
  EXPECT_EQ(settings({{"FUNNEL_SERVER_IDLE_SPIN_US", "1000"}}).server_idle_spin_us, 1000u);
  EXPECT_EQ(value_text(settings({{"FUNNEL_SERVER_IDLE_SPIN_US", "0"}}), "FUNNEL_SERVER_IDLE_SPIN_US"), "0");
  for (const char* v : {"", "-1", "100001", "1ms"}) expect_bad("FUNNEL_SERVER_IDLE_SPIN_US", v, "integer 0..100000");
  EXPECT_EQ(settings({}).server_spin_backoff_ms, 100u);
  EXPECT_EQ(settings({{"FUNNEL_SERVER_SPIN_BACKOFF_MS", "0"}}).server_spin_backoff_ms, 0u);
  EXPECT_EQ(value_text(settings({{"FUNNEL_SERVER_SPIN_BACKOFF_MS", "2500"}}), "FUNNEL_SERVER_SPIN_BACKOFF_MS"), "2500");
  for (const char* v : {"", "-1", "60001", "1s"}) expect_bad("FUNNEL_SERVER_SPIN_BACKOFF_MS", v, "integer 0..60000");
  EXPECT_EQ(settings({}).server_workers, 0u);
  EXPECT_EQ(settings({{"FUNNEL_SERVER_WORKERS", "4"}}).server_workers, 4u);
  EXPECT_EQ(value_text(settings({{"FUNNEL_SERVER_WORKERS", "2"}}), "FUNNEL_SERVER_WORKERS"), "2");
  for (const char* v : {"", "-1", "1025", "two"}) expect_bad("FUNNEL_SERVER_WORKERS", v, "integer 0..1024");
  EXPECT_EQ(settings({}).launch_batch, 32u);
  EXPECT_EQ(settings({{"FUNNEL_LAUNCH_BATCH", "0"}}).launch_batch, 0u);
  EXPECT_EQ(settings({{"FUNNEL_LAUNCH_BATCH", "64"}}).launch_batch, 64u);
  EXPECT_EQ(value_text(settings({{"FUNNEL_LAUNCH_BATCH", "8"}}), "FUNNEL_LAUNCH_BATCH"), "8");
  for (const char* v : {"", "-1", "65", "many"}) expect_bad("FUNNEL_LAUNCH_BATCH", v, "integer 0..64");
}

WATCHED_TEST(Settings, ServerAffinityAndPrintPlan) {
  EXPECT_TRUE(settings({}).server_affinity);
  EXPECT_FALSE(settings({}).print_plan);
  EXPECT_FALSE(settings({{"FUNNEL_SERVER_AFFINITY", "off"}}).server_affinity);
  EXPECT_TRUE(settings({{"FUNNEL_SERVER_AFFINITY", "auto"}}).server_affinity);
  EXPECT_TRUE(settings({}).worker_follows_rank);
  const Settings gpu = settings({{"FUNNEL_SERVER_AFFINITY", "gpu"}});
  EXPECT_TRUE(gpu.server_affinity);
  EXPECT_FALSE(gpu.worker_follows_rank);
  EXPECT_EQ(value_text(settings({{"FUNNEL_SERVER_AFFINITY", "off"}}), "FUNNEL_SERVER_AFFINITY"), "off");
  EXPECT_TRUE(settings({{"FUNNEL_PRINT_PLAN", "1"}}).print_plan);
  EXPECT_EQ(value_text(settings({{"FUNNEL_PRINT_PLAN", "1"}}), "FUNNEL_PRINT_PLAN"), "1");
  EXPECT_EQ(value_text(gpu, "FUNNEL_SERVER_AFFINITY"), "gpu");
  for (const char* v : {"", "on", "none", "0"}) expect_bad("FUNNEL_SERVER_AFFINITY", v, "auto | gpu | off");
  for (const char* v : {"", "yes", "2", "true"}) expect_bad("FUNNEL_PRINT_PLAN", v, "0 | 1");
  EXPECT_EQ(settings({}).gpu_replies, GpuReplies::Auto);
  EXPECT_EQ(settings({{"FUNNEL_GPU_REPLIES", "0"}}).gpu_replies, GpuReplies::Off);
  EXPECT_EQ(settings({{"FUNNEL_GPU_REPLIES", "1"}}).gpu_replies, GpuReplies::Always);
  EXPECT_EQ(settings({{"FUNNEL_GPU_REPLIES", "auto"}}).gpu_replies, GpuReplies::Auto);
  EXPECT_EQ(value_text(settings({{"FUNNEL_GPU_REPLIES", "0"}}), "FUNNEL_GPU_REPLIES"), "0");
  EXPECT_EQ(value_text(settings({}), "FUNNEL_GPU_REPLIES"), "auto");
  for (const char* v : {"", "on", "2", "Auto"}) expect_bad("FUNNEL_GPU_REPLIES", v, "auto | 1 | 0");
  EXPECT_FALSE(settings({}).submit_order);
  EXPECT_TRUE(settings({{"FUNNEL_SUBMIT_ORDER", "1"}}).submit_order);
  EXPECT_EQ(value_text(settings({{"FUNNEL_SUBMIT_ORDER", "1"}}), "FUNNEL_SUBMIT_ORDER"), "1");
  for (const char* v : {"", "on", "2"}) expect_bad("FUNNEL_SUBMIT_ORDER", v, "1 | 0");
}

WATCHED_TEST(Settings, JobReport) {
  EXPECT_TRUE(settings({}).job_report);
  EXPECT_FALSE(settings({{"FUNNEL_JOB_REPORT", "0"}}).job_report);
  EXPECT_TRUE(settings({{"FUNNEL_JOB_REPORT", "1"}}).job_report);
  EXPECT_EQ(value_text(settings({{"FUNNEL_JOB_REPORT", "0"}}), "FUNNEL_JOB_REPORT"), "0");
  for (const char* v : {"", "on", "yes", "2"}) expect_bad("FUNNEL_JOB_REPORT", v, "1 | 0");
}

WATCHED_TEST(Settings, ARunDirWhoseSocketPathIsTooLongIsRejected) {
  // 107 characters is the most a socket address holds: dir + "/server.sock".
  const std::string ok_dir = "/" + std::string(107 - 1 - 12, 'r');
  EXPECT_NO_THROW(settings({{"FUNNEL_RUN_DIR", ok_dir}}));
  EXPECT_THROW(settings({{"FUNNEL_RUN_DIR", ok_dir + "r"}}), ConfigError);
}

// ---- The settings table: every row's variable, its funnel-server option and its doc agree.

// Whether funnel-server's option of `row` accepts `value`: the option as funnel-server
// declares it (add_setting_options), parsed by CLI11 as `--option=value`.
bool option_accepts(const SettingInfo& row, const std::string& value) {
  CLI::App app;
  GivenSettings given;
  add_setting_options(app, given);
  const std::string arg = std::string(row.option) + "=" + value;
  const char* argv[] = {"funnel-server", arg.c_str()};
  try {
    app.parse(2, argv);
  } catch (const CLI::ParseError&) {
    return false;
  }
  EXPECT_EQ(given.at(row.variable), value) << arg;
  return true;
}

bool variable_accepts(const SettingInfo& row, const std::string& value) {
  try {
    settings({{row.variable, value}});
    return true;
  } catch (const ConfigError&) {
    return false;
  }
}

// Values at and past every edge of `row`'s accepted values, and some that fit other rows.
std::vector<std::string> probes(const SettingInfo& row) {
  std::vector<std::string> out{"", "abc", "-1", "0", "1", "2", "4", "64", "0x40", "1e3", " 64", "64 ", "0,1", "0,,1",
                               "/tmp/funnel-probe", "relative/dir", "auto", "Auto", "critical", "on", "true"};
  if (const auto* r = std::get_if<IntegerRange>(&row.check)) {
    for (int64_t v : {r->min - r->multiple_of, r->min - 1, r->min, r->min + 1, r->min + r->multiple_of, r->max - 1,
                      r->max, r->max + 1, r->max + r->multiple_of, int64_t{4}, int64_t{1} << 20})
      out.push_back(std::to_string(v));
    out.push_back(std::to_string(r->min) + "k");
  }
  if (std::holds_alternative<OneOfWords>(row.check))
    for (std::string_view w : setting_words(row)) {
      out.emplace_back(w);
      out.push_back(std::string(w) + "x");
    }
  return out;
}

WATCHED_TEST(SettingTable, EachServerOptionAcceptsExactlyWhatItsVariableAccepts) {
  int options = 0;
  for (const SettingInfo& row : setting_table()) {
    if (row.option == nullptr) continue;
    ++options;
    for (const std::string& probe : probes(row)) {
      const bool by_variable = variable_accepts(row, probe);
      EXPECT_EQ(option_accepts(row, probe), by_variable)
          << row.option << "='" << probe << "' vs " << row.variable << "='" << probe << "' (which "
          << (by_variable ? "accepts" : "rejects") << " it)";
    }
  }
  EXPECT_GE(options, 20) << "funnel-server's options of the settings";
}

WATCHED_TEST(SettingTable, AnOptionsMessageNamesTheValueAndWhatIsAccepted) {
  const SettingInfo& row = *find_setting("FUNNEL_STAGING_SLOT_KB");
  EXPECT_EQ(setting_option_error(row, "4"),
            "'4' is not valid: expected integer 64..262144, a multiple of 4 (as FUNNEL_STAGING_SLOT_KB)");
  EXPECT_EQ(setting_option_error(row, "64"), "");
  EXPECT_STREQ(row.option, "--staging-slot-kb");
  for (const char* word : {"trace", "debug", "info", "warn", "error", "off"})
    EXPECT_TRUE(option_accepts(*find_setting("FUNNEL_LOG_LEVEL"), word)) << word;
  EXPECT_FALSE(option_accepts(*find_setting("FUNNEL_LOG_LEVEL"), "critical")) << "FUNNEL_LOG_LEVEL does not accept it";
}

// The options win over the variables, and a variable that no option sets stays.
WATCHED_TEST(SettingTable, GivenOptionsWinOverTheEnvironment) {
  const GivenSettings given{{"FUNNEL_STAGING_SLOT_KB", "64"}};
  const Env env{{"FUNNEL_STAGING_SLOT_KB", "128"}, {"FUNNEL_MAX_CLIENTS", "8"}};
  const Settings s = Settings::from(given_first(given, [&](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  }));
  EXPECT_EQ(s.staging_slot_bytes, 64u * 1024);
  EXPECT_EQ(s.max_clients, 8u);
}

// The texts people read (doc/configuration.md, `funnelctl config`, every "expected ...")
// say what the typed check and the defaults (setting_defaults.hpp) do.
WATCHED_TEST(SettingTable, TextsSayWhatTheChecksAndDefaultsDo) {
  const Settings d = settings({});
  for (const SettingInfo& row : setting_table()) {
    if (const auto* r = std::get_if<IntegerRange>(&row.check)) {
      std::string accepted = "integer " + std::to_string(r->min) + ".." + std::to_string(r->max);
      if (r->multiple_of != 1) accepted += ", a multiple of " + std::to_string(r->multiple_of);
      EXPECT_EQ(row.accepted, accepted) << row.variable;
    }
    if (std::holds_alternative<FreeForm>(row.check) || row.fallback != nullptr) continue;
    EXPECT_EQ(row.default_text, value_text(d, row.variable)) << row.variable << ": the default text is not the default";
    EXPECT_TRUE(variable_accepts(row, row.default_text)) << row.variable;
  }
}

std::string read_doc() {
  const auto doc = std::filesystem::path(__FILE__).parent_path() / "../../doc/configuration.md";
  std::ifstream in(doc);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// As doc/configuration.md writes a table cell (scripts/gen-config-doc.py).
std::string cell(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else out += c;
  }
  return out;
}

WATCHED_TEST(SettingTable, DocConfigurationMdListsEveryVariableAndOption) {
  const std::string doc = read_doc();
  ASSERT_FALSE(doc.empty()) << "cannot read doc/configuration.md beside " << __FILE__;
  for (const SettingInfo& row : setting_table()) {
    const std::string line = "| `" + std::string(row.variable) + "` | " + cell(row.default_text) + " | " +
                             cell(row.accepted) + " | ";
    EXPECT_NE(doc.find(line), std::string::npos) << "doc/configuration.md lacks " << line;
    if (row.option != nullptr) {
      EXPECT_NE(doc.find("| `" + std::string(row.option) + " "), std::string::npos)
          << "doc/configuration.md's option table lacks " << row.option;
    }
  }
}

WATCHED_TEST(Settings, ToStringOfBackends) {
  EXPECT_STREQ(to_string(Backend::Cuda), "cuda");
  EXPECT_STREQ(to_string(Backend::Sim), "sim");
}

}  // namespace
}  // namespace funnel

// A server that a client starts gets the client's environment minus what funnel-run gave the
// program for itself: our libcudart and MPI hooks preloaded, our client driver's folder first in
// the library path (the server must load NVIDIA's libcuda.so.1, and refuses ours).
TEST(ServerEnvironment, DropsTheClientsRuntimeHooksAndDriverFolder) {
  const std::vector<std::string> env = funnel::server_environment({
      "PATH=/usr/bin",
      "LD_PRELOAD=/usr/lib/libasan.so.8:/opt/funnel/lib/libcudart.so.13 /opt/funnel/lib/libfunnel_mpi.so",
      "LD_LIBRARY_PATH=/opt/funnel/lib/funnel-driver:/opt/funnel/lib:/opt/funnel/lib/funnel-driver/:/usr/local/"
      "nvidia/lib64",
      "FUNNEL_RUN_DIR=/tmp/x",
  });
  EXPECT_EQ(env, (std::vector<std::string>{"PATH=/usr/bin", "LD_PRELOAD=/usr/lib/libasan.so.8",
                                           "LD_LIBRARY_PATH=/opt/funnel/lib:/usr/local/nvidia/lib64",
                                           "FUNNEL_RUN_DIR=/tmp/x"}));
  // Nothing left: the variable goes.
  EXPECT_EQ(funnel::server_environment({"LD_PRELOAD=libcudart.so.13", "LD_LIBRARY_PATH=/a/funnel-driver"}),
            std::vector<std::string>{});
  // A folder merely named like ours somewhere inside is kept.
  EXPECT_EQ(funnel::server_environment({"LD_LIBRARY_PATH=/a/funnel-driver/lib"}),
            std::vector<std::string>{"LD_LIBRARY_PATH=/a/funnel-driver/lib"});
}
