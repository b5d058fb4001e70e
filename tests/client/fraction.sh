#!/usr/bin/env bash
# fraction.sh BIN_DIR PROGRAM [PRELOAD]
# tests/gpu/fraction.cu through funnel-run on the sim backend (which splits its 132 SMs into
# 16 groups of 8, as an H100): what FUNNEL_GPU_FRACTION, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and
# FUNNEL_CLIENT_PRIORITY / CUDA_MPS_CLIENT_PRIORITY make of the SM count the program is told
# and of its launches (FUNNEL_SIM_LAUNCH_LOG: the SMs, groups and priority each could use),
# and that bad values stop funnel-run before the program runs.
set -u
bin=$1 prog=$2 preload=${3:-}
# shellcheck source=tests/client/sim_env.sh
. "$(dirname "$0")/sim_env.sh"
sim_env "$bin" "$preload"
fail() { echo "FAIL: $*"; echo "--- out"; cat "$dir/out"; echo "--- err"; cat "$dir/err"; echo "FAIL: $*"; exit 1; }

# run "VAR=value ..." SM_COUNT LAUNCH_JSON_FRAGMENT...
run() {
  local vars=$1 want=$2
  shift 2
  : >"$FUNNEL_SIM_LAUNCH_LOG"
  # shellcheck disable=SC2086  # the assignments are split on purpose
  env $vars timeout 60 "$bin/funnel-run" "$prog" >"$dir/out" 2>"$dir/err" || fail "[$vars] exit $?"
  grep -qx "sm_count $want props $want" "$dir/out" || fail "[$vars] the program was not told $want SMs"
  for frag in "$@"; do
    grep -qF -- "$frag" "$FUNNEL_SIM_LAUNCH_LOG" || fail "[$vars] no launch with $frag: $(cat "$FUNNEL_SIM_LAUNCH_LOG")"
  done
  echo "ok [$vars]: $want SMs; $*"
}

run "FUNNEL_RUN_DIR=$dir/run" 132 '"sms":132' '"sm_groups":[]' '"priority":-1'
run "FUNNEL_GPU_FRACTION=0.25" 32 '"sms":32' '"sm_groups":[0,1,2,3]'
run "FUNNEL_GPU_FRACTION=12.5%" 16 '"sms":16'
run "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50" 64 '"sms":64'
run "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 FUNNEL_GPU_FRACTION=0.1" 8 '"sms":8'
run "FUNNEL_GPU_FRACTION=0.25 FUNNEL_GPU_PLACEMENT=disjoint" 32 '"sms":32'
run "FUNNEL_CLIENT_PRIORITY=below-normal" 132 '"priority":0'
run "CUDA_MPS_CLIENT_PRIORITY=1" 132 '"priority":0'
run "CUDA_MPS_CLIENT_PRIORITY=0" 132 '"priority":-1'

# Bad values: funnel-run names the variable, the value and what is accepted, exit 2.
bad() {
  local var=$1 value=$2 accepted=$3
  env "$var=$value" timeout 30 "$bin/funnel-run" "$prog" >"$dir/out" 2>"$dir/err"
  rc=$?
  [ "$rc" -eq 2 ] || fail "$var='$value': exit $rc, expected 2"
  grep -qF -- "$var='$value' is not valid: expected $accepted" "$dir/err" || fail "$var='$value': no clear message"
  grep -q '^sm_count' "$dir/out" && fail "$var='$value': the program ran"
  echo "ok: $var='$value' refused"
}
bad FUNNEL_GPU_FRACTION 1.5 "a fraction above 0 and at most 1"
bad CUDA_MPS_ACTIVE_THREAD_PERCENTAGE 0 "a percentage of the GPU's SMs above 0 and at most 100"
bad FUNNEL_GPU_PLACEMENT exclusive "shared | disjoint"
bad FUNNEL_CLIENT_PRIORITY high "normal | below-normal | 0 | 1"
echo PASS
