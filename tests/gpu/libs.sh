#!/usr/bin/env bash
# NVIDIA's libraries and other programs that use the CUDA driver through funnel's client driver
# (issue 29; called by tests/gpu/run.sh, runs alone as well):
#   tests/gpu/libs.sh BUILD_DIR OUT_DIR
# Builds tests/programs/libs (cuBLAS, cuBLASLt, cuFFT, cuRAND, cuSOLVER, cuSPARSE, cuDNN, NVRTC, a
# driver-API program, a static-runtime program, a program mixing both APIs, the virtual memory
# calls as PyTorch's expandable segments use them) and runs each, and
# tests/programs/libs/torch_ops.py where python3 has PyTorch, natively and through funnel-run:
# the same output, and the client never opens the GPU itself (/dev/nvidia* in its maps or
# descriptors, watched while it runs, and funnel's own warning at its exit).  Programs listed in
# libs_pending.txt are SKIPped with their reason while they fail, and FAIL once they pass.  Then
# eight of the programs that passed run at once through one funnel-server.
# Prints "RESULT libs name PASS|FAIL|SKIP detail" lines; exit 1 if any failed.
set -u -o pipefail
# shellcheck source=tests/gpu/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
gpu_step "$1" "$2"
TIMEOUT=${TIMEOUT:-120}
progs=$OUT_DIR/bin
bash "$ROOT/tests/programs/libs/build.sh" "$progs" sm_90 >"$OUT_DIR/build.log" 2>&1 ||
  result libs build FAIL "some programs did not build (libs/build.log)"
names=()
[[ -f $progs/programs.txt ]] && mapfile -t names <"$progs/programs.txt"
python3 -c 'import torch' 2>/dev/null && names+=(torch)
pending() { awk -v n="$1" '$1 == n { $1 = ""; sub(/^ /, ""); print }' "$ROOT/tests/gpu/libs_pending.txt"; }
export FUNNEL_BACKEND=cuda FUNNEL_LOG_DIR=$OUT_DIR/logs
for name in "${names[@]}"; do
  cmd=("$progs/$name")
  [[ $name == torch ]] && cmd=(python3 "$ROOT/tests/programs/libs/torch_ops.py")
  LD_LIBRARY_PATH=/usr/local/cuda/lib64 timeout "$TIMEOUT" "${cmd[@]}" >"$OUT_DIR/$name.native.out" 2>"$OUT_DIR/$name.native.err"
  nrc=$?
  export FUNNEL_RUN_DIR=/dev/shm/funnel-gpu-libs-$$-$name
  timeout "$TIMEOUT" "$BIN/funnel-run" "${cmd[@]}" >"$OUT_DIR/$name.out" 2>"$OUT_DIR/$name.err" &
  pid=$!
  : >"$OUT_DIR/$name.gpufiles"
  while kill -0 "$pid" 2>/dev/null; do
    {
      grep -o '/dev/nvidia[^ ]*' "/proc/$pid/maps"
      for fd in "/proc/$pid"/fd/*; do readlink "$fd"; done | grep '^/dev/nvidia'
    } >>"$OUT_DIR/$name.gpufiles" 2>/dev/null
    sleep 0.05
  done
  wait "$pid"
  frc=$?
  timeout 20 "$BIN/funnelctl" shutdown >/dev/null 2>&1
  gpu_files=$(sort -u "$OUT_DIR/$name.gpufiles" | tr '\n' ' ')
  why=""
  # The server ends with the program's teardown done (driver_api leaves a stream wait pending at
  # exit, which the server must meet first).
  for _ in $(seq 100); do pgrep -f -- "--run-dir $FUNNEL_RUN_DIR" >/dev/null || break; sleep 0.1; done
  if pgrep -f -- "--run-dir $FUNNEL_RUN_DIR" >/dev/null; then
    why="the funnel-server did not end after the program (a client's teardown hangs?)"
    pkill -9 -f -- "--run-dir $FUNNEL_RUN_DIR"
  fi
  if [[ $nrc -ne 0 ]]; then
    result libs "$name" FAIL "exit $nrc natively ($name.native.err)"
    continue
  elif [[ -n $why ]]; then
    :
  elif [[ -n $gpu_files ]] || grep -q "opened the GPU itself" "$OUT_DIR/$name.err"; then
    why="the client opened the GPU itself: ${gpu_files:-see $name.err}"
  elif [[ $frc -ne 0 ]]; then
    why="exit $frc through funnel: $(grep -m1 -E 'funnel:|ERROR|FAIL|Error' "$OUT_DIR/$name.err" "$OUT_DIR/$name.out" | head -c 200)"
  elif ! diff <(grep -v '^# ' "$OUT_DIR/$name.native.out") <(grep -v '^# ' "$OUT_DIR/$name.out") >"$OUT_DIR/$name.diff"; then
    why="stdout differs from native ($name.diff)"
  fi
  reason=$(pending "$name")
  if [[ -z $why ]]; then
    if [[ -n $reason ]]; then
      result libs "$name" FAIL "passes now: remove it from tests/gpu/libs_pending.txt"
    else
      result libs "$name" PASS "output identical to native, no GPU file opened by the client"
    fi
  elif [[ -n $reason ]]; then
    result libs "$name" SKIP "not served yet: $reason ($why)"
  else
    result libs "$name" FAIL "$why"
  fi
done
[[ ${#names[@]} -gt 0 ]] || result libs programs FAIL "no program was built (libs/build.log)"

# Eight at once through one funnel-server: the programs that passed alone (not PyTorch, which
# takes seconds to import), round robin; each prints what it printed natively.
passed=()
for name in "${names[@]}"; do
  [[ $name != torch && -z $(pending "$name") && -s $OUT_DIR/$name.out ]] &&
    diff -q <(grep -v '^# ' "$OUT_DIR/$name.native.out") <(grep -v '^# ' "$OUT_DIR/$name.out") >/dev/null &&
    passed+=("$name")
done
if [[ ${#passed[@]} -gt 0 ]]; then
  run_dir=/dev/shm/funnel-gpu-libs-$$-eight
  # shellcheck source=tests/gpu/server.sh
  . "$ROOT/tests/gpu/server.sh"
  gpu_start_server "$run_dir" "$OUT_DIR/eight-server.log"
  pids=() ran=()
  for i in 0 1 2 3 4 5 6 7; do
    name=${passed[$((i % ${#passed[@]}))]}
    ran+=("$name")
    FUNNEL_RUN_DIR=$run_dir timeout "$TIMEOUT" "$BIN/funnel-run" "$progs/$name" >"$OUT_DIR/eight-$i-$name.out" \
      2>"$OUT_DIR/eight-$i-$name.err" &
    pids+=($!)
  done
  bad=()
  for i in 0 1 2 3 4 5 6 7; do
    wait "${pids[$i]}"
    rc=$?
    name=${ran[$i]}
    if [[ $rc -ne 0 ]] || grep -q "opened the GPU itself" "$OUT_DIR/eight-$i-$name.err" ||
      ! diff -q <(grep -v '^# ' "$OUT_DIR/$name.native.out") <(grep -v '^# ' "$OUT_DIR/eight-$i-$name.out") >/dev/null; then
      bad+=("$i:$name(exit $rc)")
    fi
  done

  # How often the libraries' modules were uploaded against loaded (the cache shares them).
  modules=$(FUNNEL_RUN_DIR=$run_dir timeout 10 "$BIN/funnelctl" stats --json 2>/dev/null | python3 -c \
    'import json, sys; m = json.load(sys.stdin)["modules"]; print(m["uploads"], "uploads for", m["loads"], "module loads")' \
    2>/dev/null)
  FUNNEL_RUN_DIR=$run_dir timeout 20 "$BIN/funnelctl" shutdown >/dev/null 2>&1
  gpu_stop_server
  if [[ ${#bad[@]} -eq 0 ]]; then
    result libs eight-at-once PASS "8 clients (${ran[*]}) through one funnel-server, each output identical to native (${modules:-module counts not read})"
  else
    result libs eight-at-once FAIL "${bad[*]} (libs/eight-*)"
  fi

fi
exit "$FAILED"
