#!/usr/bin/env bash
# lifecycle.sh SCENARIO NP BIN_DIR PROGRAM
# Runs PROGRAM under real `mpirun --oversubscribe -np NP` on the sim backend, with the
# job's default run directory (/dev/shm/funnel-<uid>-<Open MPI job id>), and checks the
# server's log and what is left on the node afterwards.
#   normal       the hooks start one server, NP ranks attach and detach, it stops at Finalize
#   before-init  CUDA before MPI_Init: the client runtime starts it; it exits once idle
#   prestarted   a server started before the job is left running at Finalize
#   kill, abort  rank 1 SIGKILLed / MPI_Abort: nothing is left after the grace period
set -u
scenario=$1 np=$2 bin=$3 prog=$4
uid=$(id -u)
tmp=$(mktemp -d /tmp/funnel-mpi.XXXXXX)
export FUNNEL_BACKEND=sim FUNNEL_LOG_DIR=$tmp/log FUNNEL_IDLE_EXIT_MS=1000 FUNNEL_ATTACH_TIMEOUT_MS=30000
unset FUNNEL_RUN_DIR FUNNEL_JOB_ID
mpirun=(mpirun --oversubscribe -np "$np" --mca btl self,vader)
[ "$uid" -eq 0 ] && mpirun+=(--allow-run-as-root)
prestarted_dir=
cleanup() {
  [ -n "$prestarted_dir" ] && FUNNEL_RUN_DIR=$prestarted_dir timeout 5 "$bin/funnelctl" shutdown >/dev/null 2>&1
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL ($scenario, $np ranks): $*"; echo "--- output"; cat "$tmp/out" 2>/dev/null; echo "--- server log"; cat "$tmp"/log/*.log 2>/dev/null; exit 1; }
count() { grep -c -- "$1" "$tmp"/log/*.log 2>/dev/null | awk -F: '{s += $NF} END {print s + 0}'; }

mode=$scenario
if [ "$scenario" = prestarted ]; then
  # As the Slurm prolog would: a server for the job id the ranks will use.
  export FUNNEL_JOB_ID=prestarted-$$ FUNNEL_IDLE_EXIT_MS=60000
  prestarted_dir=/dev/shm/funnel-$uid-$FUNNEL_JOB_ID
  "$bin/funnel-run" /bin/true || fail "cannot pre-start the server"
  mode=normal
fi

timeout 100 "${mpirun[@]}" "$prog" "$mode" >"$tmp/out" 2>&1
rc=$?
logs=("$tmp"/log/*.log)
[ "${#logs[@]}" -eq 1 ] && [ -f "${logs[0]}" ] || fail "expected exactly one server log, found ${#logs[@]}"
# funnel-server-<job id>-<pid>.log: every rank used the run directory of this job id.
job=$(basename "${logs[0]}" .log); job=${job#funnel-server-}; job=${job%-*}
run_dir=/dev/shm/funnel-$uid-$job
pid=$(basename "${logs[0]}" .log); pid=${pid##*-}

gone() {  # the server process, its run directory and its segments are all gone
  ! kill -0 "$pid" 2>/dev/null && [ ! -e "$run_dir" ] && [ -z "$(ls /dev/shm | grep -F "funnel-$uid-$job")" ]
}
wait_gone() {
  for _ in $(seq "$1"); do gone && return 0; sleep 0.1; done
  return 1
}

case $scenario in
  normal|before-init|prestarted)
    [ "$rc" -eq 0 ] || fail "mpirun exited with $rc"
    grep -qx "$np of $np ranks ok" "$tmp/out" || fail "not every rank reported ok"
    [ "$(count ' attached: pid')" -eq "$np" ] || fail "expected $np attaches"
    [ "$(count 'detached: pid')" -eq "$np" ] || fail "expected $np clean detaches"
    [ "$(count ' died: pid')" -eq 0 ] || fail "a client died"
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
  kill|abort)
    [ "$rc" -ne 0 ] || fail "mpirun exited with 0"
    # Grace period: FUNNEL_IDLE_EXIT_MS (1 s) after the last client is gone.
    wait_gone 150 || fail "something is left: pid $pid, run directory $run_dir"
    pgrep -f "funnel-$uid-$job" >/dev/null && fail "a process of the job's run directory is left"
    ;;
  *) fail "unknown scenario" ;;
esac
echo "PASS ($scenario, $np ranks, job $job)"
