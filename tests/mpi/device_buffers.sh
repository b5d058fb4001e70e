#!/usr/bin/env bash
# device_buffers.sh NP BIN_DIR PROGRAM
# tests/mpi/device_buffers.cu under real `mpirun --oversubscribe -np NP` on the sim backend (on the
# GPU: FUNNEL_TEST_BACKEND=cuda): every rank prints "rank R: all ok", and each names the freed
# buffer it passed once on stderr.
set -u
np=$1 bin=$2 prog=$3
tmp=$(mktemp -d /tmp/funnel-mpi.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export FUNNEL_BACKEND=${FUNNEL_TEST_BACKEND:-sim} FUNNEL_LOG_DIR=$tmp/log FUNNEL_IDLE_EXIT_MS=1000 FUNNEL_ATTACH_TIMEOUT_MS=30000
unset FUNNEL_RUN_DIR FUNNEL_JOB_ID
mpirun=(mpirun --oversubscribe -np "$np" --mca btl "self,vader")
[ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root)
[ -x "$bin/funnel-server" ] || { echo "FAIL: no $bin/funnel-server"; exit 1; }
timeout 120 "${mpirun[@]}" "$prog" >"$tmp/out" 2>"$tmp/err"
rc=$?
sort "$tmp/out"
ok=$(grep -c "^rank [0-9]*: all ok$" "$tmp/out")
if [ "$rc" -ne 0 ] || [ "$ok" -ne "$np" ] || grep -q FAIL "$tmp/out"; then
  echo "FAIL: mpirun exit $rc, $ok of $np ranks all ok; stderr:"
  cat "$tmp/err"
  exit 1
fi
n=$(grep -c "MPI_Send: the buffer at 0x[0-9a-f]* (1024 bytes) is neither host memory" "$tmp/err")
[ "$n" -eq "$np" ] || { echo "FAIL: the freed buffer named $n times, want $np; stderr:"; cat "$tmp/err"; exit 1; }
echo PASS
