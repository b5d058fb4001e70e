#include "targets.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "funnel/common/run_dir.hpp"

namespace funnel::ctl {
namespace {

// default_run_dir's folder: /dev/shm, else $TMPDIR or /tmp.
std::filesystem::path run_dir_base() { return default_run_dir("x").parent_path(); }

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// "funnel-<uid>-<job>": whether `name` is one, of `uid` (any uid when root asks) and of
// `job` (any job when empty).
bool matches(const std::string& name, uid_t caller, const std::string& job) {
  const std::string prefix = "funnel-";
  if (name.rfind(prefix, 0) != 0) return false;
  const size_t dash = name.find('-', prefix.size());
  if (dash == std::string::npos) return false;
  const std::string uid = name.substr(prefix.size(), dash - prefix.size());
  if (!all_digits(uid) || (caller != 0 && uid != std::to_string(caller))) return false;
  const std::string rest = name.substr(dash + 1);
  return job.empty() ? !rest.empty() : rest == job;
}

}  // namespace

std::string search_pattern(const Selection& sel, uid_t caller) {
  const std::string uid = caller == 0 ? "*" : std::to_string(caller);
  const std::string job = sel.job.empty() ? "*" : sanitize_for_filename(sel.job);
  return (run_dir_base() / fmt::format("funnel-{}-{}", uid, job)).string();
}

std::vector<std::filesystem::path> find_run_dirs(const Settings& s, const Selection& sel, uid_t caller) {
  if (sel.job.empty() && !sel.all) return {s.run_dir};
  const std::string job = sel.job.empty() ? "" : sanitize_for_filename(sel.job);
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(run_dir_base(), ec)) {
    std::error_code type_ec;
    if (!e.is_directory(type_ec) || e.is_symlink(type_ec)) continue;
    if (matches(e.path().filename().string(), caller, job)) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace funnel::ctl
