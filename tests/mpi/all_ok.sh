# shellcheck shell=bash
# Sourced by device_buffers.sh, local_messages.sh and mixed.sh:
#   runs_all_ok NP PROGRAM [mpirun options...] [-- more of the command line...]
# runs PROGRAM under real `mpirun --oversubscribe -np NP` on the sim backend (on the GPU:
# FUNNEL_TEST_BACKEND=cuda) with its stdout in $tmp/out and stderr in $tmp/err (a directory removed
# at exit), and fails the test unless every rank printed "rank R: all ok" and no FAIL line.  What
# follows `--` comes after PROGRAM (an MPMD job's ": -np K OTHER"); ALL_OK_RANKS is then the
# job's whole rank count (default NP).
tmp=$(mktemp -d /tmp/funnel-mpi.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export FUNNEL_BACKEND=${FUNNEL_TEST_BACKEND:-sim} FUNNEL_LOG_DIR=$tmp/log FUNNEL_IDLE_EXIT_MS=1000 FUNNEL_ATTACH_TIMEOUT_MS=30000
unset FUNNEL_RUN_DIR FUNNEL_JOB_ID
runs_all_ok() {
  local np=$1 prog=$2
  shift 2
  local mpirun=(mpirun --oversubscribe --mca btl "self,vader")
  [ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root)
  mpirun+=(-np "$np")
  while [ $# -gt 0 ] && [ "$1" != -- ]; do mpirun+=("$1"); shift; done
  mpirun+=("$prog")
  [ $# -gt 0 ] && shift && mpirun+=("$@")
  local ranks=${ALL_OK_RANKS:-$np}
  timeout 120 "${mpirun[@]}" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  sort "$tmp/out"
  local ok
  ok=$(grep -c "^rank [0-9]*: all ok$" "$tmp/out")
  if [ "$rc" -ne 0 ] || [ "$ok" -ne "$ranks" ] || grep -q FAIL "$tmp/out"; then
    echo "FAIL: mpirun exit $rc, $ok of $ranks ranks all ok; stderr:"
    cat "$tmp/err"
    exit 1
  fi
}
