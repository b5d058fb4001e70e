#!/usr/bin/env bash
# gpu_select.sh BIN_DIR PROGRAM
# FUNNEL_RANKS_PER_GPU and FUNNEL_GPU_MAP under real `mpirun --oversubscribe -np 4` against
# one sim-backend server of 2 devices: each rank sees its GPU as device 0.
set -u
bin=$1 prog=$2
tmp=$(mktemp -d /tmp/funnel-gpusel.XXXXXX)
export FUNNEL_RUN_DIR=$tmp/run FUNNEL_BACKEND=sim FUNNEL_LOG_DIR=$tmp/log
unset FUNNEL_RANKS_PER_GPU FUNNEL_GPU_MAP FUNNEL_DEVICE_MEM_LIMIT CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
mpirun=(mpirun --oversubscribe -np 4 --mca btl "self,vader")
[ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root)
cleanup() { timeout 5 "$bin/funnelctl" shutdown >/dev/null 2>&1; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; echo "--- output"; cat "$tmp/out"; echo "FAIL: $*"; exit 1; }
"$bin/funnel-server" --run-dir "$FUNNEL_RUN_DIR" --backend sim --sim-devices 2 --log-dir "$FUNNEL_LOG_DIR" ||
  fail "cannot start the server"

# run ENV... : the 4 ranks' lines, sorted
run() { env "$@" timeout 60 "${mpirun[@]}" "$bin/funnel-run" "$prog" >"$tmp/out" 2>&1 || fail "mpirun $* exited with $?"; }
line() { echo "local $1: $2 device(s), device 0 at $3, data ok, device $2: cudaErrorInvalidDevice"; }
expect() {  # expect NAME BUS0 BUS1 BUS2 BUS3 (one device each)
  local name=$1; shift
  for r in 0 1 2 3; do
    grep -qxF "$(line $r 1 "$1")" "$tmp/out" || fail "$name: rank $r not on $1"
    shift
  done
  echo "ok: $name"
}
g0=0000:00:00.0 g1=0000:01:00.0

run X=1
for r in 0 1 2 3; do grep -qxF "$(line $r 2 $g0)" "$tmp/out" || fail "unset: rank $r does not see both GPUs"; done
echo "ok: unset"
run FUNNEL_RANKS_PER_GPU=even && expect even $g0 $g0 $g1 $g1
run FUNNEL_RANKS_PER_GPU=2 && expect ranks-per-gpu-2 $g0 $g0 $g1 $g1
run FUNNEL_RANKS_PER_GPU=1 && expect ranks-per-gpu-1 $g0 $g1 $g0 $g1
run FUNNEL_GPU_MAP=1,0,0,1 && expect map $g1 $g0 $g0 $g1
run FUNNEL_GPU_MAP=1,1,1,1 FUNNEL_RANKS_PER_GPU=1 && expect map-wins $g1 $g1 $g1 $g1
run FUNNEL_GPU_MAP=0,0,0,5
grep -qxF "local 3: cudaErrorInitializationError" "$tmp/out" || fail "a map entry past the GPUs was accepted"
grep -qF "FUNNEL_GPU_MAP='0,0,0,5' is not valid for node-local rank 3: GPU 5 but the funnel-server has 2 GPU(s)" \
  "$tmp/out" || fail "no message for the entry past the GPUs"
grep -qxF "$(line 0 1 $g0)" "$tmp/out" || fail "rank 0 failed too"
run FUNNEL_GPU_MAP=1,0
grep -qxF "local 2: cudaErrorInitializationError" "$tmp/out" || fail "a rank without an entry was accepted"
grep -qF "FUNNEL_GPU_MAP='1,0' is not valid for node-local rank 2: it has 2 entries" "$tmp/out" ||
  fail "no message for the rank without an entry"
echo ok: bad maps
echo PASS
