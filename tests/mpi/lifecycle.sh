#!/usr/bin/env bash
# lifecycle.sh SCENARIO NP BIN_DIR PROGRAM [ARG...]
# Runs `PROGRAM ARG... MODE` under real `mpirun --oversubscribe -np NP` on the sim backend,
# with the job's default run directory (/dev/shm/funnel-<uid>-<Open MPI job id>), and checks
# the server's log and what is left on the node afterwards.  MODE is the scenario (normal
# for prestarted, hold for mpirun-killed): mpi_cuda.cu's modes.
#   normal         the hooks start one server, NP ranks attach and detach, it stops at Finalize
#   before-init    CUDA before MPI_Init: the client runtime starts it; it exits once idle
#   prestarted     a server started before the job is left running at Finalize
#   kill, abort    rank 1 SIGKILLed / MPI_Abort: nothing is left after the grace period
#   mpirun-killed  mpirun SIGKILLed once every rank attached: Open MPI ends the orphaned
#                  ranks, and nothing is left after the grace period
set -u
scenario=$1 np=$2 bin=$3 prog=$4
shift 4
prog_args=("$@")
uid=$(id -u)
tmp=$(mktemp -d /tmp/funnel-mpi.XXXXXX)
export FUNNEL_BACKEND=sim FUNNEL_LOG_DIR=$tmp/log FUNNEL_IDLE_EXIT_MS=1000 FUNNEL_ATTACH_TIMEOUT_MS=30000
unset FUNNEL_RUN_DIR FUNNEL_JOB_ID
mpirun=(mpirun --oversubscribe -np "$np" --mca btl "self,vader")
[ "$uid" -eq 0 ] && mpirun+=(--allow-run-as-root)
prestarted_dir='' mpirun_pid='' ranks=''
# pid $1 is still one of this job's ranks (not a zombie, not a pid used again since).
# Builtins only: it runs in wait_gone's loop.
rank_alive() {
  local stat arg0
  { read -r stat </proc/"$1"/stat && IFS= read -r -d '' arg0 </proc/"$1"/cmdline; } 2>/dev/null || return 1
  stat=${stat##*) }
  [ "${stat:0:1}" != Z ] && [ "$arg0" = "$prog" ]
}
rank_pids() { grep -ho ' attached: pid [0-9]*' "$tmp"/log/*.log 2>/dev/null | awk '{print $3}'; }
cleanup() {
  [ -n "$prestarted_dir" ] && FUNNEL_RUN_DIR=$prestarted_dir timeout 5 "$bin/funnelctl" shutdown >/dev/null 2>&1
  # A failed mpirun-killed run must not leave its job running.
  [ -n "$mpirun_pid" ] && kill -KILL "$mpirun_pid" 2>/dev/null
  for p in $ranks; do rank_alive "$p" && kill -KILL "$p"; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {  # the reason and the ranks' output come last: CI shows the end of the output
  echo "--- server log"; cat "$tmp"/log/*.log 2>/dev/null
  echo "--- output"; cat "$tmp/out" 2>/dev/null
  echo "FAIL ($scenario, $np ranks): $*"
  exit 1
}
count() { grep -c -- "$1" "$tmp"/log/*.log 2>/dev/null | awk -F: '{s += $NF} END {print s + 0}'; }

mode=$scenario
if [ "$scenario" = prestarted ]; then
  # As the Slurm prolog would: a server for the job id the ranks will use.
  export FUNNEL_JOB_ID=prestarted-$$ FUNNEL_IDLE_EXIT_MS=60000
  prestarted_dir=/dev/shm/funnel-$uid-$FUNNEL_JOB_ID
  "$bin/funnel-run" /bin/true || fail "cannot pre-start the server"
  mode=normal
fi

if [ "$scenario" = mpirun-killed ]; then
  # mpirun's session directory and shared-memory (vader) segments are its own to remove,
  # which a killed mpirun cannot: keep them in $tmp rather than /tmp and /dev/shm.
  mpirun+=(--mca orte_tmpdir_base "$tmp" --mca btl_vader_backing_directory "$tmp")
  "${mpirun[@]}" "$prog" "${prog_args[@]}" hold >"$tmp/out" 2>&1 &
  mpirun_pid=$!
  # Bounded polling: every rank attached (at MPI_Init) and the job still running.
  for _ in $(seq 300); do
    [ "$(count ' attached: pid')" -ge "$np" ] && break
    kill -0 "$mpirun_pid" 2>/dev/null || break
    sleep 0.1
  done
  [ "$(count ' attached: pid')" -eq "$np" ] || fail "expected $np ranks attached to a running job"
  ranks=$(rank_pids)
  for p in $ranks; do rank_alive "$p" || fail "rank pid $p is not running before mpirun is killed"; done
  kill -KILL "$mpirun_pid"
  wait "$mpirun_pid"
  rc=$?
  mpirun_pid=
else
  timeout 100 "${mpirun[@]}" "$prog" "${prog_args[@]}" "$mode" >"$tmp/out" 2>&1
  rc=$?
fi
logs=("$tmp"/log/*.log)
[ "${#logs[@]}" -eq 1 ] && [ -f "${logs[0]}" ] || fail "expected exactly one server log, found ${#logs[@]}"
# funnel-server-<job id>-<pid>.log: every rank used the run directory of this job id.
job=$(basename "${logs[0]}" .log); job=${job#funnel-server-}; job=${job%-*}
run_dir=/dev/shm/funnel-$uid-$job
pid=$(basename "${logs[0]}" .log); pid=${pid##*-}
case $scenario in kill|abort) ranks=$(rank_pids) ;; esac

gone() {  # the ranks (where known), the server process, its run directory and its segments are all gone
  for p in $ranks; do rank_alive "$p" && return 1; done
  ! kill -0 "$pid" 2>/dev/null && [ ! -e "$run_dir" ] && [ -z "$(find /dev/shm -maxdepth 1 -name "*funnel-$uid-$job*")" ]
}
wait_gone() {  # at most $1 tenths of a second
  local end=$((${EPOCHREALTIME//[!0-9]/} + $1 * 100000))
  while ((${EPOCHREALTIME//[!0-9]/} < end)); do gone && return 0; sleep 0.1; done
  gone
}

# The server never loads the client runtime or the hooks (funnel-run preloads both).
grep -E 'LD_PRELOAD=.*(libfunnel_mpi|libcudart)' "${logs[0]}" && fail "the server was started with funnel's libraries preloaded"
case $scenario in
  normal|before-init|prestarted)
    [ "$rc" -eq 0 ] || fail "mpirun exited with $rc"
    grep -qx "$np of $np ranks ok" "$tmp/out" || fail "not every rank reported ok"
    [ "$(count ' attached: pid')" -eq "$np" ] || fail "expected $np attaches"
    [ "$(count 'detached: pid')" -eq "$np" ] || fail "expected $np clean detaches"
    [ "$(count ' died: pid')" -eq 0 ] || fail "a client died"
    # FUNNEL_PRINT_PLAN=1 (test mpi.print_plan): the first rank prints the plan once, with every rank.
    plans=$(grep -c 'placement plan of funnel-server in ' "$tmp/out")
    if [ "${FUNNEL_PRINT_PLAN:-0}" = 1 ]; then
      [ "$plans" -eq 1 ] || fail "FUNNEL_PRINT_PLAN=1: expected the plan printed once, found $plans"
      [ "$(grep -cE '^rank [0-9]+ \(client [0-9]+, pid [0-9]+\): GPU 0, the whole GPU' "$tmp/out")" -eq "$np" ] ||
        fail "FUNNEL_PRINT_PLAN=1: the plan should list the $np ranks"
      grep -q '^server: ' "$tmp/out" || fail "FUNNEL_PRINT_PLAN=1: the plan should say where the server runs"
    else
      [ "$plans" -eq 0 ] || fail "the plan was printed without FUNNEL_PRINT_PLAN=1"
    fi
    ;;
esac
case $scenario in
  normal)
    grep -q "shutdown requested" "${logs[0]}" || fail "the hooks did not stop the server they started"
    # MPI_Finalize waits for the run directory to go: nothing is left when mpirun returns.
    wait_gone 50 || fail "the server, its run directory $run_dir or a segment is left after Finalize"
    ;;
  before-init)
    # The client runtime started it, not the hooks: it exits once idle (FUNNEL_IDLE_EXIT_MS).
    wait_gone 100 || fail "the idle server did not exit"
    ;;
  prestarted)
    grep -q "shutdown requested" "${logs[0]}" && fail "the hooks stopped a server they did not start"
    kill -0 "$pid" 2>/dev/null && [ -S "$run_dir/server.sock" ] || fail "the pre-started server is gone"
    FUNNEL_RUN_DIR=$run_dir "$bin/funnelctl" stats >/dev/null || fail "the pre-started server does not answer"
    ;;
  kill|abort|mpirun-killed)
    [ "$rc" -ne 0 ] || fail "mpirun exited with 0"
    # Grace period: FUNNEL_IDLE_EXIT_MS (1 s) after the last client is gone.
    wait_gone 150 || fail "something is left: ranks $(for p in $ranks; do rank_alive "$p" && echo -n "$p "; done)server pid $pid, run directory $run_dir"
    pgrep -f "funnel-$uid-$job" >/dev/null && fail "a process of the job's run directory is left"
    # The server's log is complete now.  The job got as far as the scenario: rank 1 (or
    # every rank) attached and left without a Detach.
    if [ "$scenario" = mpirun-killed ]; then
      [ "$(count ' died: pid')" -eq "$np" ] || fail "expected $np clients that died with the job"
      [ "$(count 'detached: pid')" -eq 0 ] || fail "a rank detached after mpirun was killed"
    else
      [ "$(count ' attached: pid [0-9]* rank 1 ')" -eq 1 ] || fail "rank 1 never attached"
      [ "$(count ' died: pid [0-9]* rank 1 ')" -eq 1 ] || fail "the server did not see rank 1 die"
    fi
    ;;
  *) fail "unknown scenario" ;;
esac
echo "PASS ($scenario, $np ranks, job $job)"
