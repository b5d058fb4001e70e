#!/usr/bin/env bash
# bad_value.sh BIN_DIR PROGRAM
# A malformed FUNNEL_* (or CUDA_MPS_*) variable under real mpirun with the linked program:
# MPI_Init fails on every rank with a message naming the variable, the value and what is
# accepted; the job ends (no hang) and no server, run directory or segment is left.
set -u
prog=$2  # $1, BIN_DIR, is not needed here
uid=$(id -u)
tmp=$(mktemp -d /tmp/funnel-mpi-bad.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export FUNNEL_BACKEND=sim FUNNEL_LOG_DIR=$tmp/log FUNNEL_IDLE_EXIT_MS=1000
mpirun=(mpirun --oversubscribe -np 2 --mca btl "self,vader")
[ "$uid" -eq 0 ] && mpirun+=(--allow-run-as-root)
check() {  # VAR VALUE ACCEPTED
  local var=$1 value=$2 accepted=$3 job=bad-$$-$RANDOM
  env "$var=$value" FUNNEL_JOB_ID=$job timeout 60 "${mpirun[@]}" "$prog" normal >"$tmp/out" 2>&1
  rc=$?
  [ "$rc" -ne 0 ] || { echo "FAIL: $var='$value': mpirun exited 0"; cat "$tmp/out"; exit 1; }
  [ "$rc" -ne 124 ] || { echo "FAIL: $var='$value': the job hung"; cat "$tmp/out"; exit 1; }
  grep -qF -- "$var='$value' is not valid: expected $accepted" "$tmp/out" ||
    { echo "FAIL: $var='$value': no message naming it"; cat "$tmp/out"; exit 1; }
  grep -q 'ranks ok' "$tmp/out" && { echo "FAIL: $var='$value': the program ran"; exit 1; }
  left() { [ -n "$(find /dev/shm -maxdepth 1 -name "*funnel-$uid-$job*")" ]; }
  for _ in $(seq 50); do left || break; sleep 0.1; done
  left && { echo "FAIL: $var='$value': left /dev/shm/funnel-$uid-$job"; exit 1; }
  pgrep -f "funnel-$uid-$job" >/dev/null && { echo "FAIL: $var='$value': a server is left"; exit 1; }
  echo "ok: $var='$value' (exit $rc)"
}
check FUNNEL_GPU_FRACTION 2 "a fraction above 0 and at most 1"
check CUDA_MPS_ACTIVE_THREAD_PERCENTAGE 150 "a percentage of the GPU's SMs above 0 and at most 100"
check FUNNEL_GPU_PLACEMENT apart "shared | disjoint"
check FUNNEL_CLIENT_PRIORITY urgent "normal | below-normal | 0 | 1"
check CUDA_MPS_CLIENT_PRIORITY 3 "0 (normal) or 1 (below normal)"
check FUNNEL_DEVICE_MEM_LIMIT 0=lots "bytes with an optional K, M, G or T"
check FUNNEL_RANKS_PER_GPU 0 "even | integer 1..4096"
echo PASS
