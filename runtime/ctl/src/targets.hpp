// Which funnel-servers funnelctl talks to: the run directory of --run-dir / FUNNEL_RUN_DIR
// (or of this job), or every run directory of a Slurm job (--job) or of the caller (--all)
// under /dev/shm; root sees every user's (doc/funnelctl.md).
#pragma once
#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

#include "funnel/common/config.hpp"

namespace funnel::ctl {

struct Selection {
  std::string job;   // --job ID; empty: not given
  bool all = false;  // --all
};

// The run directories to ask, sorted.  With --job or --all they are those found (possibly
// none); else the one of `s` (FUNNEL_RUN_DIR, else this job's default).
std::vector<std::filesystem::path> find_run_dirs(const Settings& s, const Selection& sel, uid_t caller);

// Where --job and --all look, and the names they look for there (for messages).
std::string search_pattern(const Selection& sel, uid_t caller);

}  // namespace funnel::ctl
