# shellcheck shell=bash
# Sourced by funnel's Slurm scripts (funnel-slurm-prolog, -task-prolog, -epilog): the admin
# config, logging, the job's run directory, starting a command as the job's user, and
# stopping and removing whatever funnel left of a job.  doc/admin-guide.md describes them.

# The admin config (FUNNEL_SLURM_CONF, default /etc/funnel/slurm.conf): KEY=VALUE lines,
# '#' starts a comment.  These are the defaults.  (The scripts that source this file use them.)
# shellcheck disable=SC2034
cfg_prefix=                  # funnel's install prefix: bin/funnel-server, bin/funnelctl
cfg_backend=cuda             # cuda | sim
cfg_log_dir=/var/log/funnel  # slurm.log (what the scripts did) and jobs/<job id>/ (server logs)
cfg_mode=opt-in              # opt-in | always | off
cfg_start_timeout=30         # seconds the prolog waits for the server to be ready
cfg_stop_timeout=10          # seconds the epilog waits for `funnelctl shutdown`
cfg_ranks_per_gpu=even       # FUNNEL_RANKS_PER_GPU the task prolog exports ('' for none)
cfg_sim_devices=1            # sim backend: devices of a job without GPUs
cfg_no_gpus=skip             # cuda backend, job without GPUs: skip | all (every GPU of the node)
cfg_log_keep_days=14         # the epilog removes job log directories older than this

funnel_script=${0##*/}

# funnel_log LEVEL MESSAGE: syslog (tag funnel-slurm) and, when writable, <log_dir>/slurm.log.
funnel_log() {
  local level=$1 msg="job ${SLURM_JOB_ID:-?}: $2"
  logger -t funnel-slurm -p "user.$level" -- "$funnel_script: $msg" 2>/dev/null
  [ -d "$cfg_log_dir" ] || { [ "$EUID" -eq 0 ] && mkdir -p "$cfg_log_dir"; } 2>/dev/null
  if [ -d "$cfg_log_dir" ] && [ -w "$cfg_log_dir" ]; then
    printf '%s %s %s[%d] %s: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "${SLURMD_NODENAME:-$(hostname -s)}" \
      "$funnel_script" "$$" "$level" "$msg" >>"$cfg_log_dir/slurm.log" 2>/dev/null
  fi
  return 0
}

# Reads the admin config into cfg_*.  Returns 1 (and logs why) on a bad line; the values
# read so far stay, the rest keep their defaults.
funnel_read_config() {
  local file=${FUNNEL_SLURM_CONF:-/etc/funnel/slurm.conf} line key value n=0 bad=0
  [ -e "$file" ] || return 0
  if [ ! -r "$file" ]; then
    funnel_log err "cannot read $file"
    return 1
  fi
  while IFS= read -r line || [ -n "$line" ]; do
    n=$((n + 1))
    line=${line%%#*}
    line=${line#"${line%%[![:space:]]*}"}
    line=${line%"${line##*[![:space:]]}"}
    [ -z "$line" ] && continue
    key=${line%%=*}
    key=${key%"${key##*[![:space:]]}"}
    value=${line#*=}
    value=${value#"${value%%[![:space:]]*}"}
    value=${value#\"}
    value=${value%\"}
    local ok=1
    case $key in
      prefix) cfg_prefix=$value ;;
      backend) [[ $value == cuda || $value == sim ]] && cfg_backend=$value || ok=0 ;;
      log_dir) [[ $value == /* ]] && cfg_log_dir=$value || ok=0 ;;
      mode) [[ $value == opt-in || $value == always || $value == off ]] && cfg_mode=$value || ok=0 ;;
      start_timeout) [[ $value =~ ^[1-9][0-9]{0,3}$ ]] && cfg_start_timeout=$value || ok=0 ;;
      stop_timeout) [[ $value =~ ^[1-9][0-9]{0,3}$ ]] && cfg_stop_timeout=$value || ok=0 ;;
      ranks_per_gpu) [[ -z $value || $value == even || $value =~ ^[1-9][0-9]{0,3}$ ]] && cfg_ranks_per_gpu=$value || ok=0 ;;
      sim_devices) [[ $value =~ ^([1-9]|1[0-6])$ ]] && cfg_sim_devices=$value || ok=0 ;;
      no_gpus) [[ $value == skip || $value == all ]] && cfg_no_gpus=$value || ok=0 ;;
      log_keep_days) [[ $value =~ ^[0-9]{1,4}$ ]] && cfg_log_keep_days=$value || ok=0 ;;
      *) ok=0 ;;
    esac
    if [ "$ok" -eq 0 ]; then
      funnel_log err "$file line $n: '$line' is not valid (see doc/admin-guide.md)"
      bad=1
    fi
  done <"$file"
  [ "$bad" -eq 0 ]
}

# The install prefix: the config's, else the one these scripts are installed in
# (<prefix>/libexec/funnel/slurm).
funnel_prefix() {
  if [ -n "$cfg_prefix" ]; then
    echo "$cfg_prefix"
  else
    local here
    here=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
    readlink -f "$here/../../.."
  fi
}

# The run directory every process of the job finds by default (runtime/common/src/run_dir.cpp):
# /dev/shm/funnel-<uid>-<job id>.
funnel_run_dir() {  # UID JOB
  if [ -d /dev/shm ]; then echo "/dev/shm/funnel-$1-$2"; else echo "${TMPDIR:-/tmp}/funnel-$1-$2"; fi
}

# Sets job_id, job_uid, job_gid, job_user, run_dir, job_log_dir from the Prolog/Epilog
# environment; returns 1 (logged) when they are missing or malformed.
funnel_job_from_env() {
  job_id=${SLURM_JOB_ID:-} job_uid=${SLURM_JOB_UID:-} job_gid=${SLURM_JOB_GID:-} job_user=${SLURM_JOB_USER:-}
  if ! [[ $job_id =~ ^[0-9]+$ && $job_uid =~ ^[0-9]+$ && $job_gid =~ ^[0-9]+$ ]]; then
    funnel_log err "SLURM_JOB_ID='$job_id' SLURM_JOB_UID='$job_uid' SLURM_JOB_GID='$job_gid': not a job's environment"
    return 1
  fi
  if [ "$job_uid" -eq 0 ]; then
    funnel_log info "root's job: funnel is not run for root"
    return 1
  fi
  [ -n "$job_user" ] || job_user=$(getent passwd "$job_uid" | cut -d: -f1)
  run_dir=$(funnel_run_dir "$job_uid" "$job_id")
  # shellcheck disable=SC2034  # the prolog's
  job_log_dir=$cfg_log_dir/jobs/$job_id
}

# Runs "$@" as the job's user, with a clean environment plus any NAME=VALUE given before --.
funnel_as_user() {
  local vars=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do vars+=("$1"); shift; done
  shift
  (cd / && env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/ USER="$job_user" LOGNAME="$job_user" "${vars[@]}" \
    setpriv --reuid="$job_uid" --regid="$job_gid" --init-groups -- "$@")
}

# The pids of the job user's processes with the run directory on their command line
# (funnel-server --run-dir DIR, whoever started it: the prolog or a rank).  Builtins only
# past the uid check, so that scanning /proc stays cheap.
funnel_job_pids() {
  local d arg uid
  for d in /proc/[0-9]*; do
    while IFS= read -r -d '' arg; do
      if [[ $arg == "$run_dir" || $arg == "--run-dir=$run_dir" ]]; then
        uid=$(stat -c %u "$d") && [ "$uid" = "$job_uid" ] && echo "${d#/proc/}"
        break
      fi
    done 2>/dev/null <"$d/cmdline"  # (a process that is gone: no cmdline, no output)
  done
}

# Waits until none of the pids "$@" runs (or is a zombie), at most $wait_s seconds; 0 when
# they are gone.  Sets alive to those still there.
funnel_wait_gone() {
  local end=$((SECONDS + wait_s)) p st
  while :; do
    alive=()
    for p in "$@"; do
      { read -r st <"/proc/$p/stat"; } 2>/dev/null || continue
      st=${st##*) }
      [ "${st:0:1}" = Z ] || alive+=("$p")
    done
    [ ${#alive[@]} -eq 0 ] && return 0
    [ "$SECONDS" -ge "$end" ] && return 1
    sleep 0.1
  done
}

# Stops every funnel process of the job (funnelctl shutdown, then SIGTERM, then SIGKILL)
# and removes its run directory.  Idempotent; logs what it found and did.
funnel_stop_job() {
  local pids=() done_what=() wait_s alive=()
  mapfile -t pids < <(funnel_job_pids)
  if [ ${#pids[@]} -eq 0 ] && [ ! -e "$run_dir" ] && [ ! -L "$run_dir" ]; then
    return 0
  fi
  if [ ${#pids[@]} -gt 0 ]; then
    local ctl
    ctl=$(funnel_prefix)/bin/funnelctl
    if [ -S "$run_dir/server.sock" ] && [ -x "$ctl" ]; then
      if funnel_as_user -- timeout "$cfg_stop_timeout" "$ctl" --run-dir "$run_dir" shutdown --force >/dev/null 2>&1; then
        done_what+=("funnelctl shutdown")
      fi
    fi
    wait_s=$cfg_stop_timeout
    if ! funnel_wait_gone "${pids[@]}"; then
      kill -TERM "${alive[@]}" 2>/dev/null
      done_what+=("SIGTERM to ${alive[*]}")
      wait_s=3
      if ! funnel_wait_gone "${alive[@]}"; then
        kill -KILL "${alive[@]}" 2>/dev/null
        done_what+=("SIGKILL to ${alive[*]}")
        wait_s=3
        funnel_wait_gone "${alive[@]}" || funnel_log err "processes ${alive[*]} survive SIGKILL"
      fi
    fi
  fi
  if [ -L "$run_dir" ] || [ -f "$run_dir" ]; then
    rm -f -- "$run_dir" && done_what+=("removed the non-directory $run_dir")
  elif [ -d "$run_dir" ]; then
    rm -rf -- "$run_dir" && done_what+=("removed $run_dir")
  fi
  [ -e "$run_dir" ] && funnel_log err "cannot remove $run_dir"
  local IFS=';'
  funnel_log info "funnel processes of the job: ${pids[*]:-none}; done: ${done_what[*]:-nothing}"
  return 0
}
