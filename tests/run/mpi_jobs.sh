#!/usr/bin/env bash
# mpi_jobs.sh SCENARIO BUILD_DIR PLAIN_PROGRAM LINKED_PROGRAM
# `mpirun --oversubscribe funnel-run PROGRAM normal` on the sim backend (tests/mpi/mpi_cuda.cu;
# PLAIN is not linked with funnel, LINKED is linked with libfunnel_mpi), the server's idle
# timer at 60 s:
#   opt-out  FUNNEL_MPI_HOOKS=0, 4 ranks of PLAIN: the old lifecycle: funnel-run starts the
#            server, the ranks attach at their first CUDA call and detach at exit, and nobody
#            stops it: it still runs when mpirun returned
#   linked   2 ranks of LINKED through a copy of funnel-run and its lib/ elsewhere: each rank
#            loads one copy of the hooks, the preloaded one (its DT_NEEDED libfunnel_mpi.so.0
#            resolves to it), and the hooks stop the server at MPI_Finalize
set -u
scenario=$1 build=$2 plain=$3 linked=$4
uid=$(id -u)
tmp=$(mktemp -d /tmp/funnel-run-mpi.XXXXXX)
unset FUNNEL_RUN_DIR FUNNEL_MPI_HOOKS LD_PRELOAD
export FUNNEL_BACKEND=sim FUNNEL_LOG_DIR=$tmp/log FUNNEL_IDLE_EXIT_MS=60000 FUNNEL_ATTACH_TIMEOUT_MS=30000
export FUNNEL_JOB_ID=funnel-run-$scenario-$$ FUNNEL_SERVER=$build/bin/funnel-server
run_dir=/dev/shm/funnel-$uid-$FUNNEL_JOB_ID
mpirun=(timeout 40 mpirun --oversubscribe --mca btl "self,vader")
[ "$uid" -eq 0 ] && mpirun+=(--allow-run-as-root)
cleanup() {
  [ -S "$run_dir/server.sock" ] && FUNNEL_RUN_DIR=$run_dir timeout 5 "$build/bin/funnelctl" shutdown >/dev/null 2>&1
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {  # the reason and the ranks' output come last: CI shows the end of the output
  echo "--- server log"; cat "$tmp"/log/*.log
  echo "--- output"; cat "$tmp/out"
  echo "FAIL ($scenario): $*"
  exit 1
}
count() { cat "$tmp"/log/*.log 2>/dev/null | grep -c -- "$1"; }
left() { find /dev/shm -maxdepth 1 -name "*funnel-$uid-$FUNNEL_JOB_ID*" -printf '%f\n'; }
# job NP PROGRAM FUNNEL_RUN [ENV...]: the job ran, every rank was ok, one server saw NP
# attaches and NP clean detaches.
job() {
  local np=$1 prog=$2 fr=$3
  shift 3
  "${mpirun[@]}" -np "$np" env "$@" "$fr" "$prog" normal >"$tmp/out" 2>&1 || fail "mpirun exited with $?"
  grep -qx "$np of $np ranks ok" "$tmp/out" || fail "not every rank reported ok"
  [ "$(ls "$tmp"/log/*.log | wc -l)" -eq 1 ] || fail "expected exactly one server log"
  [ "$(count ' attached: pid')" -eq "$np" ] || fail "expected $np attaches"
  [ "$(count 'detached: pid')" -eq "$np" ] || fail "expected $np clean detaches"
  [ "$(count ' died: pid')" -eq 0 ] || fail "a client died"
}

case $scenario in
  opt-out)
    job 4 "$plain" "$build/bin/funnel-run" FUNNEL_MPI_HOOKS=0
    [ "$(count 'shutdown requested')" -eq 0 ] || fail "the server was stopped although the hooks were off"
    FUNNEL_RUN_DIR=$run_dir "$build/bin/funnelctl" stats >/dev/null || fail "the server is gone before its idle timer"
    FUNNEL_RUN_DIR=$run_dir timeout 5 "$build/bin/funnelctl" shutdown >/dev/null || fail "cannot stop the server"
    ;;
  linked)
    mkdir -p "$tmp/funnel/bin" "$tmp/funnel/lib/funnel-driver"
    cp "$build/bin/funnel-run" "$tmp/funnel/bin/" &&
      cp -L "$build/lib/libcudart.so.13" "$build/lib/libfunnel_mpi.so.0" "$tmp/funnel/lib/" &&
      cp -L "$build/lib/funnel-driver/libcuda.so.1" "$tmp/funnel/lib/funnel-driver/" || fail "cannot copy funnel"
    job 2 "$linked" "$tmp/funnel/bin/funnel-run" LD_DEBUG=files LD_DEBUG_OUTPUT="$tmp/ld"
    # The ranks' loader logs (funnel-run's, then the program's after exec: one file a pid).
    ranks=$(grep -l "needed by $linked" "$tmp"/ld.* | wc -l)
    [ "$ranks" -eq 2 ] || fail "expected the loader logs of 2 ranks, found $ranks"
    for f in $(grep -l "needed by $linked" "$tmp"/ld.*); do
      inits=$(grep "calling init: .*libfunnel_mpi" "$f")
      [ "$(grep -c . <<<"$inits")" -eq 1 ] || fail "a rank loaded the hooks more than once: $inits"
      grep -q "calling init: $tmp/funnel/lib/libfunnel_mpi.so.0\$" <<<"$inits" ||
        fail "a rank did not use the preloaded hooks: $inits"
    done
    [ "$(count 'shutdown requested')" -eq 1 ] || fail "the hooks did not stop the server at MPI_Finalize"
    ;;
  *) fail "unknown scenario" ;;
esac
for _ in $(seq 50); do [ ! -e "$run_dir" ] && [ -z "$(left)" ] && break; sleep 0.1; done
[ ! -e "$run_dir" ] && [ -z "$(left)" ] || fail "left in /dev/shm: $run_dir $(left)"
echo "PASS ($scenario)"
