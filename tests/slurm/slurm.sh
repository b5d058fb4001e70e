#!/usr/bin/env bash
# slurm.sh BUILD_DIR SOURCE_DIR MPI_PROGRAM GPU_SELECT_PROGRAM
# funnel's Slurm prolog, task prolog and epilog (slurm/) on a real single-node Slurm that
# this test configures and starts itself: a private munged, slurmctld and slurmd (Debian's
# packages; proctrack/linuxproc, task/none, no cgroups, every path under a temp dir, free
# ports), jobs of a non-root user (funneltest, created if absent), `srun --mpi=pmix -n 4`
# of tests/mpi's mpi_cuda (linked with the MPI hooks) on the sim backend.  Jobs:
#   normal      --comment=funnel: the prolog's server (2 sim GPUs) runs as the job's user; the
#               tasks got the task prolog's variables and ranks 0,1 use GPU 0, ranks 2,3 GPU 1
#               (tests/mpi's gpu_select through funnel-run); 4 of 4 ranks ok; the hooks left
#               the server alone; the epilog stopped it
#   scancel     --comment=funnel, ranks holding: scancel once the 4 ranks attached
#   task-kill   --constraint=funnel: rank 1 SIGKILLs itself (srun -K ends the step)
#   server-kill --comment=funnel, ranks holding: the server SIGKILLed (as a crash would)
#   no-funnel   no opt-in: no server from the prolog, no variables; the hooks start their own
#   server-stopped  --comment=funnel, the server SIGSTOPped, then scancel: the epilog's
#               funnelctl shutdown times out, SIGTERM does nothing, SIGKILL ends it
#   prolog-fails  the config names a prefix without funnel-server: the prolog logs it and
#               exits 0, the job runs (the hooks start a server), the node stays idle
# After each: no funnel process of the job, no run directory, no /dev/shm entry of the job.
# Needs root; skips (exit 77) with the reason when not root or when a daemon cannot start.
set -u
build=$1 src=$2 prog=$3 gpu_select=$4
SKIP=77
skip() { echo "SKIP: $*"; exit "$SKIP"; }
[ "$(id -u)" -eq 0 ] || skip "needs root: it starts munged, slurmctld and slurmd and runs jobs as another user"
for c in munged munge slurmctld slurmd sbatch srun squeue scancel scontrol sinfo setpriv useradd timeout; do
  command -v "$c" >/dev/null || skip "no $c (scripts/install-deps.sh installs munge slurmctld slurmd slurm-client)"
done
for f in "$prog" "$gpu_select"; do [ -x "$f" ] || skip "no test program $f (tests/mpi builds it)"; done
plugins=$(dirname "$(readlink -f "$(command -v slurmd)")")/../lib/x86_64-linux-gnu/slurm-wlm
ls /usr/lib/*/slurm-wlm/mpi_pmix*.so >/dev/null 2>&1 || ls "$plugins"/mpi_pmix*.so >/dev/null 2>&1 ||
  skip "Slurm has no mpi_pmix plugin"

user=funneltest
if ! id "$user" >/dev/null 2>&1; then
  useradd --system --no-create-home --home-dir /nonexistent --shell /bin/bash "$user" ||
    skip "cannot create the test user $user"
fi
uid=$(id -u "$user") gid=$(id -g "$user")

start=$SECONDS
tmp=$(mktemp -d /tmp/funnel-slurm.XXXXXX)
chmod 755 "$tmp"
daemons_pids=()
cleanup() {
  local p f j any
  # Jobs first, with time for their epilogs; then the daemons; then, by pid, whatever of this
  # run is left (a step daemon of an interrupted job, a job's process, a server).
  if [ -f "$tmp/slurmctld.pid" ]; then
    SLURM_CONF=$tmp/slurm.conf timeout 5 scancel --user="$user" 2>/dev/null
    for _ in $(seq 75); do
      [ -z "$(SLURM_CONF=$tmp/slurm.conf timeout 5 squeue -h -u "$user" 2>/dev/null)" ] && break
      sleep 0.2
    done
  fi
  for f in slurmd slurmctld munged; do
    [ -f "$tmp/$f.pid" ] && p=$(cat "$tmp/$f.pid") && kill -TERM "$p" 2>/dev/null && daemons_pids+=("$p")
  done
  for _ in $(seq 50); do
    any=0
    for p in "${daemons_pids[@]}"; do kill -0 "$p" 2>/dev/null && any=1; done
    [ "$any" -eq 0 ] && break
    sleep 0.1
  done
  for p in "${daemons_pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  for j in "${jobs_run[@]}"; do
    for p in $(pgrep -f "^slurmstepd: \[$j\."); do kill -KILL "$p" 2>/dev/null; done
    for p in $(pgrep -u "$uid" -f -- "/dev/shm/funnel-$uid-$j( |$)"); do kill -KILL "$p" 2>/dev/null; done
    rm -rf "/dev/shm/funnel-$uid-$j"
  done
  for p in $(pgrep -u "$uid" -f -- "$tmp/"); do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
jobs_run=()
trap cleanup EXIT
trap 'echo "interrupted"; exit 1' TERM INT HUP
fail() {
  echo "FAIL: $*"
  for f in "$tmp"/out/*/*; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done
  for f in "$tmp"/flog/slurm.log "$tmp"/flog/jobs/*/*.log "$tmp"/log/slurmd.log; do
    [ -f "$f" ] && { echo "--- $f"; tail -n 40 "$f"; }
  done
  echo "FAIL: $*"  # again last: CI shows the end of a failing test's output
  exit 1
}

# funnel installed as an admin would (a prefix with bin/, lib/ and libexec/funnel/slurm/),
# readable by the job's user; the config names no prefix: the scripts find their own.
prefix=$tmp/prefix
mkdir -p "$prefix/bin" "$prefix/lib/funnel-driver" "$prefix/libexec/funnel/slurm" "$tmp/flog" "$tmp/out"
cp "$build"/bin/funnel-server "$build"/bin/funnelctl "$build"/bin/funnel-run "$prefix/bin/" || fail "no funnel binaries in $build/bin"
cp -P "$build"/lib/libcudart.so* "$build"/lib/libfunnel-client.so* "$build"/lib/libfunnel_mpi.so* "$prefix/lib/" &&
  cp -P "$build"/lib/funnel-driver/libcuda.so* "$prefix/lib/funnel-driver/" || fail "no funnel libraries in $build/lib"
cp "$src"/slurm/funnel-slurm-* "$prefix/libexec/funnel/slurm/"
cp "$prog" "$prefix/bin/mpi_cuda"
cp "$gpu_select" "$prefix/bin/gpu_select"
cat >"$tmp/funnel-slurm.conf" <<EOF
# the test's admin config
backend=sim
mode=opt-in
log_dir=$tmp/flog
sim_devices=2
start_timeout=20
stop_timeout=3
EOF
# Slurm runs Prolog=/Epilog=/TaskProlog= with an environment of its own: wrappers point the
# scripts at the test's config.
mkdir -p "$tmp/hooks"
for s in prolog task-prolog epilog; do
  printf '#!/bin/bash\nexport FUNNEL_SLURM_CONF=%s\nexec %s "$@"\n' "$tmp/funnel-slurm.conf" \
    "$prefix/libexec/funnel/slurm/funnel-slurm-$s" >"$tmp/hooks/$s"
done
chmod -R a+rX "$tmp"
chmod 755 "$tmp"/hooks/*

# A private munged.
mkdir -p "$tmp/munge" "$tmp/state" "$tmp/spool" "$tmp/log"
dd if=/dev/urandom of="$tmp/munge/key" bs=128 count=1 status=none
chmod 600 "$tmp/munge/key"
timeout 20 munged --force --socket="$tmp/munge/sock" --key-file="$tmp/munge/key" --pid-file="$tmp/munged.pid" \
  --log-file="$tmp/munge/log" --seed-file="$tmp/munge/seed" ||
  skip "munged does not start here: $(tail -n 3 "$tmp/munge/log" 2>/dev/null)"
timeout 10 munge -S "$tmp/munge/sock" -n >/dev/null || skip "munge does not work here"

# Two free TCP ports (not listening in /proc/net/tcp*).
port_free() {
  local hex
  hex=$(printf ':%04X ' "$1")
  ! grep -q -- "$hex" /proc/net/tcp /proc/net/tcp6 2>/dev/null
}
port=
for _ in $(seq 50); do
  p=$((20000 + RANDOM % 30000))
  port_free "$p" && port_free $((p + 1)) && { port=$p; break; }
done
[ -n "$port" ] || skip "no free TCP port pair"
first_job=$((100000 + RANDOM * 20))

cat >"$tmp/slurm.conf" <<EOF
ClusterName=funneltest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$tmp/munge/sock
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
SlurmdDebug=verbose
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
FirstJobId=$first_job
MinJobAge=300
KillWait=5
SlurmdParameters=config_overrides
# funnel: the prolog at allocation, so that the server is up before any task
Prolog=$tmp/hooks/prolog
TaskProlog=$tmp/hooks/task-prolog
Epilog=$tmp/hooks/epilog
PrologFlags=Alloc
NodeName=funnel1 NodeAddr=127.0.0.1 NodeHostname=localhost CPUs=8 RealMemory=2000 Feature=funnel State=UNKNOWN
PartitionName=test Nodes=funnel1 Default=YES MaxTime=5 State=UP
EOF
export SLURM_CONF=$tmp/slurm.conf
timeout 20 slurmctld -i -f "$tmp/slurm.conf" || skip "slurmctld does not start here: $(tail -n 5 "$tmp/log/slurmctld.log" 2>/dev/null)"
timeout 20 slurmd -f "$tmp/slurm.conf" -N funnel1 || skip "slurmd does not start here: $(tail -n 5 "$tmp/log/slurmd.log" 2>/dev/null)"
node_state() { timeout 5 sinfo -h -n funnel1 -o %T 2>/dev/null; }
for _ in $(seq 100); do [ "$(node_state)" = idle ] && break; sleep 0.2; done
[ "$(node_state)" = idle ] ||
  skip "the Slurm node does not come up here (state '$(node_state)'): $(tail -n 5 "$tmp/log/slurmd.log" "$tmp/log/slurmctld.log" 2>/dev/null)"
echo "slurm up in $((SECONDS - start)) s (ports $port, $((port + 1)); first job id $first_job)"

# The batch script (as the job's user).  MODE: normal | hold | kill | plain.
cat >"$tmp/job.sh" <<'EOF'
#!/bin/bash
out=$1 mode=$2
export OMPI_MCA_btl=self,vader
{
  echo "user $(id -un)"
  echo "FUNNEL_RUN_DIR ${FUNNEL_RUN_DIR:-unset}"
  run_dir=/dev/shm/funnel-$(id -u)-$SLURM_JOB_ID
  if [ -S "$run_dir/server.sock" ]; then
    echo "run_dir_owner $(stat -c %U "$run_dir")"
    pid=$(timeout 10 funnelctl --run-dir "$run_dir" stats --json | grep -o '"pid":[0-9]*' | head -n 1 | cut -d: -f2)
    echo "server_pid $pid"
    echo "server_uid $(stat -c %u "/proc/$pid")"
    echo "server_exe $(readlink "/proc/$pid/exe")"
  else
    echo "no_server"
  fi
} >"$out/info" 2>&1
srun --mpi=pmix -n 4 bash -c 'echo "task $SLURM_LOCALID ${FUNNEL_RUN_DIR:-unset} ${FUNNEL_RANKS_PER_GPU:-unset} ${FUNNEL_BACKEND:-unset} ${FUNNEL_LOG_DIR:-unset}"' >"$out/tasks" 2>&1
case $mode in
  normal|plain)
    [ "$mode" = normal ] && srun --mpi=pmix -n 4 bash -c 'echo "gpu $SLURM_LOCALID $(funnel-run gpu_select 2>&1)"' >"$out/gpus" 2>&1
    srun --mpi=pmix -n 4 mpi_cuda normal >"$out/prog" 2>&1
    echo "rc $?" >>"$out/prog"
    # The hooks leave a server they did not start running.
    if [ -S "$run_dir/server.sock" ]; then
      echo "server_pid_after $(timeout 10 funnelctl --run-dir "$run_dir" stats --json | grep -o '"pid":[0-9]*' | head -n 1 | cut -d: -f2)" >>"$out/info"
    fi
    ;;
  hold) srun --mpi=pmix -n 4 mpi_cuda hold >"$out/prog" 2>&1; echo "rc $?" >>"$out/prog" ;;
  kill) srun --mpi=pmix -K -n 4 mpi_cuda kill >"$out/prog" 2>&1; echo "rc $?" >>"$out/prog" ;;
esac
EOF
chmod 755 "$tmp/job.sh"

# submit NAME MODE SBATCH_OPTION...: sets job to the job id; the job's environment gets extra_env.
extra_env=()
submit() {
  local name=$1 mode=$2 id
  shift 2
  mkdir -p "$tmp/out/$name"
  chown "$uid:$gid" "$tmp/out/$name"
  id=$(cd "$tmp/out/$name" && env -i PATH="$prefix/bin:/usr/bin:/bin" HOME=/ USER=$user LOGNAME=$user \
         SLURM_CONF="$tmp/slurm.conf" LD_LIBRARY_PATH="$prefix/lib" "${extra_env[@]}" \
         setpriv --reuid="$uid" --regid="$gid" --init-groups -- \
         timeout 10 sbatch --parsable -J "$name" -n 4 -t 2 -o "$tmp/out/$name/slurm.out" "$@" \
         "$tmp/job.sh" "$tmp/out/$name" "$mode") || fail "sbatch of $name failed: $id"
  job=${id%%;*}
  jobs_run+=("$job")
}
# held_job NAME: a --comment=funnel job whose 4 ranks hold (round trips until killed), once
# they attached; sets job and spid (the prolog's server).
held_job() {
  submit "$1" hold --comment=funnel
  wait_attached "$job" 4 60
  spid=$(sed -n 's/^server_pid //p' "$tmp/out/$1/info")
  [ -n "$spid" ] || fail "$1: no server pid recorded"
}
job_state() { timeout 5 scontrol -o show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
# Waits (at most $2 s) until job $1 ended and its epilog ran (the node is idle again).
wait_done() {
  local end=$((SECONDS + $2)) s
  while [ "$SECONDS" -lt "$end" ]; do
    s=$(job_state "$1")
    case $s in PENDING|CONFIGURING|RUNNING|COMPLETING|"") ;; *) [ "$(node_state)" = idle ] && return 0 ;; esac
    sleep 0.2
  done
  fail "job $1 not done after $2 s (state $(job_state "$1"), node $(node_state))"
}
count() { grep -hc -- "$2" "$tmp/flog/jobs/$1"/funnel-server-*.log 2>/dev/null | awk '{s += $1} END {print s + 0}'; }
# Waits (at most $3 s) until the job's server logged $2 attaches.
wait_attached() {
  local end=$((SECONDS + $3))
  while [ "$SECONDS" -lt "$end" ]; do
    [ "$(count "$1" ' attached: pid')" -ge "$2" ] && return 0
    sleep 0.2
  done
  fail "job $1: $2 ranks did not attach in $3 s (state $(job_state "$1"))"
}
# Nothing of job $1 is left: no process of the user with its run directory on the command
# line, no run directory, no /dev/shm entry of it.
leftovers() {
  local dir=/dev/shm/funnel-$uid-$1
  pgrep -u "$uid" -f -- "$dir( |$)" | sed 's/^/process /'
  [ -e "$dir" ] && echo "run directory $dir"
  local f
  for f in "$dir" "$dir"[!0-9]*; do [ -e "$f" ] && echo "shm $f"; done
}
assert_clean() {
  local end=$((SECONDS + 10)) left
  while :; do
    left=$(leftovers "$1")
    [ -z "$left" ] && return 0
    [ "$SECONDS" -ge "$end" ] && fail "job $1 ($2) left: $left"
    sleep 0.2
  done
}
# The info the batch script recorded: the prolog's server ran as the job's user.
assert_server_as_user() {  # NAME JOB
  local info=$tmp/out/$1/info
  grep -qx "user $user" "$info" || fail "$1: the job did not run as $user"
  grep -qx "FUNNEL_RUN_DIR /dev/shm/funnel-$uid-$2" "$info" || fail "$1: the batch step has no FUNNEL_RUN_DIR from the task prolog"
  grep -qx "run_dir_owner $user" "$info" || fail "$1: the run directory is not the job user's"
  grep -qx "server_uid $uid" "$info" || fail "$1: the server does not run as uid $uid"
  grep -qx "server_exe $prefix/bin/funnel-server" "$info" || fail "$1: the server is not $prefix/bin/funnel-server"
  grep -q "started funnel-server (pid $(sed -n 's/^server_pid //p' "$info")) as $user" "$tmp/flog/slurm.log" ||
    fail "$1: the prolog did not log the server it started"
}
assert_tasks_env() {  # NAME JOB
  local r
  for r in 0 1 2 3; do
    grep -qx "task $r /dev/shm/funnel-$uid-$2 even sim $tmp/flog/jobs/$2" "$tmp/out/$1/tasks" ||
      fail "$1: task $r did not get the task prolog's variables"
  done
}

# 1. normal
submit normal normal --comment=funnel
wait_done "$job" 60
assert_server_as_user normal "$job"
assert_tasks_env normal "$job"
grep -qx "4 of 4 ranks ok" "$tmp/out/normal/prog" || fail "normal: the program's result is wrong"
grep -qx "rc 0" "$tmp/out/normal/prog" || fail "normal: srun failed"
if [ "$(count "$job" ' attached: pid .*mpi_cuda')" -ne 4 ] || [ "$(count "$job" 'detached: pid .*mpi_cuda')" -ne 4 ]; then
  fail "normal: expected 4 attaches and 4 clean detaches"
fi
grep -qx "server_pid_after $(sed -n 's/^server_pid //p' "$tmp/out/normal/info")" "$tmp/out/normal/info" ||
  fail "normal: the prolog's server did not outlive the MPI job step (the hooks must leave it alone)"
for r in 0 1 2 3; do
  grep -q "^gpu $r local -1: 1 device(s), device 0 at 0000:0$((r / 2)):00.0, data ok" "$tmp/out/normal/gpus" ||
    fail "normal: rank $r is not on GPU $((r / 2)) (FUNNEL_RANKS_PER_GPU=even over 4 ranks, 2 GPUs)"
done
assert_clean "$job" normal
grep -q "job $job: funnel processes of the job: [0-9]*; done: funnelctl shutdown" "$tmp/flog/slurm.log" ||
  fail "normal: the epilog did not stop the server with funnelctl shutdown"
echo "ok normal (job $job) at $((SECONDS - start)) s"

# 2. scancel of a running job
held_job scancel
timeout 10 scancel "$job" || fail "scancel $job failed"
wait_done "$job" 60
assert_server_as_user scancel "$job"
assert_clean "$job" scancel
echo "ok scancel (job $job) at $((SECONDS - start)) s"

# 3. a task SIGKILLed (opt-in through the node feature)
submit task-kill kill --constraint=funnel
wait_done "$job" 60
assert_server_as_user task-kill "$job"
grep -qx "rc 0" "$tmp/out/task-kill/prog" && fail "task-kill: srun exited with 0"
[ "$(count "$job" ' died: pid [0-9]* rank 1 ')" -eq 1 ] || fail "task-kill: the server did not see rank 1 die"
assert_clean "$job" task-kill
echo "ok task-kill (job $job) at $((SECONDS - start)) s"

# 4. the server SIGKILLed under running ranks
held_job server-kill
kill -KILL "$spid"
wait_done "$job" 90
assert_server_as_user server-kill "$job"
grep -qx "4 of 4 ranks ok" "$tmp/out/server-kill/prog" && fail "server-kill: the ranks did not notice the server's death"
assert_clean "$job" server-kill
# The ranks that see the death remove the dead server's files and directory themselves
# (reclaim_dead_run_dir); what they leave, the epilog removes: either way nothing is left
# (assert_clean above), and the epilog met nothing it could not remove.
grep -q "cannot remove /dev/shm/funnel-$uid-$job" "$tmp/flog/slurm.log" && fail "server-kill: the epilog could not clean up"
echo "ok server-kill (job $job) at $((SECONDS - start)) s"

# 5. no opt-in: nothing from the prolog or the task prolog; the hooks start and stop their own
extra_env=(FUNNEL_BACKEND=sim FUNNEL_LOG_DIR="$tmp/out/no-funnel/log")
submit no-funnel plain
wait_done "$job" 60
grep -qx "no_server" "$tmp/out/no-funnel/info" || fail "no-funnel: the prolog started a server for a job that did not ask"
grep -qx "FUNNEL_RUN_DIR unset" "$tmp/out/no-funnel/info" || fail "no-funnel: the task prolog exported FUNNEL_RUN_DIR"
grep -q "unset unset sim $tmp/out/no-funnel/log\$" "$tmp/out/no-funnel/tasks" || fail "no-funnel: the task prolog exported variables"
grep -qx "4 of 4 ranks ok" "$tmp/out/no-funnel/prog" || fail "no-funnel: the program's result is wrong"
assert_clean "$job" no-funnel
echo "ok no-funnel (job $job) at $((SECONDS - start)) s"

# 6. a server that does not answer (SIGSTOPped) when the job is cancelled: the epilog's
# funnelctl shutdown times out, SIGTERM stays pending, SIGKILL ends it
held_job server-stopped
kill -STOP "$spid"
timeout 10 scancel "$job" || fail "scancel $job failed"
wait_done "$job" 90
assert_clean "$job" server-stopped
grep -q "job $job: funnel processes of the job: $spid; done: SIGTERM to $spid;SIGKILL to $spid" "$tmp/flog/slurm.log" ||
  fail "server-stopped: the epilog did not SIGTERM, then SIGKILL the server"
echo "ok server-stopped (job $job) at $((SECONDS - start)) s"

# 7. the prolog cannot start a server (no funnel-server where the config says): the job runs
# all the same, its ranks start their own server, the node stays up
echo "prefix=/nonexistent" >>"$tmp/funnel-slurm.conf"
extra_env=(FUNNEL_BACKEND=sim FUNNEL_LOG_DIR="$tmp/out/prolog-fails/log")
submit prolog-fails plain --comment=funnel
wait_done "$job" 60
grep -q "job $job: no funnel-server at /nonexistent/bin/funnel-server" "$tmp/flog/slurm.log" ||
  fail "prolog-fails: the prolog did not log why it started no server"
grep -qx "no_server" "$tmp/out/prolog-fails/info" || fail "prolog-fails: a server ran"
grep -qx "4 of 4 ranks ok" "$tmp/out/prolog-fails/prog" || fail "prolog-fails: the job did not run"
[ "$(node_state)" = idle ] || fail "prolog-fails: the node is $(node_state) after the job"
assert_clean "$job" prolog-fails
echo "ok prolog-fails (job $job) at $((SECONDS - start)) s"

echo "--- slurm.log"
cat "$tmp/flog/slurm.log"
echo "PASS (7 jobs, $((SECONDS - start)) s)"
