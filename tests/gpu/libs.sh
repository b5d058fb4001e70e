#!/usr/bin/env bash
# NVIDIA's libraries and other programs that use the CUDA driver through funnel's client driver
# (issues 29 and 31; called by tests/gpu/run.sh, runs alone as well):
#   tests/gpu/libs.sh BUILD_DIR OUT_DIR
# Builds tests/programs/libs (cuBLAS, cuBLASLt, cuFFT, cuRAND, cuSOLVER, cuSPARSE, cuDNN, NVRTC, a
# driver-API program, a static-runtime program, a program mixing both APIs, the virtual memory
# calls as PyTorch's expandable segments use them) and runs each, and the Python programs of that
# folder where python3 has their framework: torch (torch_ops.py), torch-features
# (torch_features.py: caching allocator, pinned memory, streams and events, CUDA graphs,
# jiterator, a training step), torch-expandable (torch_features.py again under
# PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, natively and through funnel), cupy
# (cupy_ops.py) and jax (jax_probe.py), natively and through funnel-run: the same output (lines
# starting with '# ' left out), and the client never opens the GPU itself (/dev/nvidia* in the
# maps or descriptors of the program and what it starts, watched while it runs, and funnel's own
# warning at its exit).  Programs listed in libs_pending.txt are SKIPped with their reason while
# they fail, and FAIL once they pass.  jax is a report, not a gate (issue 31): when it fails it is
# a SKIP with the summary of its steps ("add: ok; jit: error ..."), never a FAIL.  Then
# eight of the compiled programs that passed run at once through one funnel-server
# (eight-at-once; the Python ones take seconds to import and stay out), and torch-8: eight
# torch_ops.py at once through one funnel-server, each exit 0 with the native output and no
# client opening the GPU itself.
# Prints "RESULT libs name PASS|FAIL|SKIP detail" lines; exit 1 if any failed.
set -u -o pipefail
# shellcheck source=tests/gpu/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
gpu_step "$1" "$2"
TIMEOUT=${TIMEOUT:-120}
progs=$OUT_DIR/bin
bash "$ROOT/tests/programs/libs/build.sh" "$progs" sm_90 >"$OUT_DIR/build.log" 2>&1 ||
  result libs build FAIL "some programs did not build (libs/build.log)"
LIBS=$ROOT/tests/programs/libs
names=()
[[ -f $progs/programs.txt ]] && mapfile -t names <"$progs/programs.txt"
# The Python programs, where python3 has their framework (importing it starts no CUDA).
python3 -c 'import torch' 2>/dev/null && names+=(torch torch-features torch-expandable)
python3 -c 'import cupy' 2>/dev/null && names+=(cupy)
python3 -c 'import jax' 2>/dev/null && names+=(jax)
pending() { awk -v n="$1" '$1 == n { $1 = ""; sub(/^ /, ""); print }' "$ROOT/tests/gpu/libs_pending.txt"; }
# is_python NAME: one of the Python programs (seconds to import: not in the eight-at-once step)
is_python() { case $1 in torch | torch-* | cupy | jax) return 0 ;; *) return 1 ;; esac; }
# command_of NAME: sets cmd, the command line of the program NAME (the same natively and under
# funnel-run; an environment setting goes in front through env)
command_of() {
  case $1 in
    torch) cmd=(python3 "$LIBS/torch_ops.py") ;;
    torch-features) cmd=(python3 "$LIBS/torch_features.py") ;;
    torch-expandable) cmd=(env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 "$LIBS/torch_features.py") ;;
    cupy) cmd=(python3 "$LIBS/cupy_ops.py") ;;
    jax) cmd=(python3 "$LIBS/jax_probe.py") ;;
    *) cmd=("$progs/$1") ;;
  esac
}
# tree_pids PID...: the PIDs and all their descendants, one a line
tree_pids() {
  ps -e -o pid= -o ppid= | awk -v roots="$*" '
    BEGIN { n = split(roots, r, " "); for (i = 1; i <= n; i++) want[r[i]] = 1 }
    { parent[$1] = $2 }
    END {
      for (more = 1; more;) {
        more = 0
        for (p in parent) if (!(p in want) && (parent[p] in want)) { want[p] = 1; more = 1 }
      }
      for (p in want) print p
    }'
}
# watch_gpu_files FILE PID...: until every PID has exited, appends to FILE the /dev/nvidia* files
# mapped or open in the PIDs' process trees (timeout, the program it runs and whatever that
# starts; not a funnel-server, which a client may start and which leaves the tree as it
# daemonizes).
watch_gpu_files() {
  local file=$1 p comm alive
  shift
  : >"$file"
  while :; do
    alive=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [[ $alive == 1 ]] || break
    for p in $(tree_pids "$@"); do
      comm=""
      { read -r comm <"/proc/$p/comm"; } 2>/dev/null
      [[ -z $comm || $comm == funnel-server ]] && continue
      {
        grep -o '/dev/nvidia[^ ]*' "/proc/$p/maps"
        find "/proc/$p/fd" -mindepth 1 -maxdepth 1 -lname '/dev/nvidia*' -printf '%l\n'
      } >>"$file" 2>/dev/null
    done
    sleep 0.05
  done
}
# steps_summary FILE: jax_probe.py's step lines in one line ("import: ok; add: error ...")
steps_summary() {
  grep -E '^jax [a-z]+: ' "$1" 2>/dev/null | sed 's/^jax //' | cut -c1-120 | paste -sd';' - | sed 's/;/; /g' |
    tr '|' '/' | head -c 600
}
export FUNNEL_BACKEND=cuda FUNNEL_LOG_DIR=$OUT_DIR/logs
for name in "${names[@]}"; do
  command_of "$name"
  # jax is a report (issue 31): when it fails it is a SKIP with its steps, not a FAIL.
  report=""
  [[ $name == jax ]] && report="jax is a report (issue 31)"
  LD_LIBRARY_PATH=/usr/local/cuda/lib64 timeout "$TIMEOUT" "${cmd[@]}" >"$OUT_DIR/$name.native.out" 2>"$OUT_DIR/$name.native.err"
  nrc=$?
  export FUNNEL_RUN_DIR=/dev/shm/funnel-gpu-libs-$$-$name
  timeout "$TIMEOUT" "$BIN/funnel-run" "${cmd[@]}" >"$OUT_DIR/$name.out" 2>"$OUT_DIR/$name.err" &
  pid=$!
  watch_gpu_files "$OUT_DIR/$name.gpufiles" "$pid"
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
    if [[ -n $report ]]; then
      result libs "$name" SKIP "$report: exit $nrc natively ($name.native.err): $(steps_summary "$OUT_DIR/$name.native.out")"
    else
      result libs "$name" FAIL "exit $nrc natively ($name.native.err)"
    fi
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
  elif [[ -n $report ]]; then
    [[ $why == "exit "* ]] && why=${why%%: *}  # its steps below say what failed
    result libs "$name" SKIP "$report: $(tr '|' '/' <<<"$why"); steps: $(steps_summary "$OUT_DIR/$name.out")"
  else
    result libs "$name" FAIL "$why"
  fi
done
[[ ${#names[@]} -gt 0 ]] || result libs programs FAIL "no program was built (libs/build.log)"

# Eight at once through one funnel-server: the compiled programs that passed alone (not the
# Python ones, which take seconds to import), round robin; each prints what it printed natively.
passed=()
for name in "${names[@]}"; do
  ! is_python "$name" && [[ -z $(pending "$name") && -s $OUT_DIR/$name.out ]] &&
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

# torch-8: eight torch_ops.py at once through one funnel-server (issue 31: several PyTorch
# processes on one server); each exits 0 with what torch_ops.py printed natively, and no client
# opens the GPU itself (watched while they run, and funnel's warning at exit).
if [[ " ${names[*]} " == *" torch "* ]]; then
  if ! grep -q '^torch: all ok' "$OUT_DIR/torch.native.out" 2>/dev/null; then
    result libs torch-8 SKIP "torch_ops.py did not pass natively (torch.native.out)"
  else
    run_dir=/dev/shm/funnel-gpu-libs-$$-torch8
    # shellcheck source=tests/gpu/server.sh
    . "$ROOT/tests/gpu/server.sh"
    if ! gpu_start_server "$run_dir" "$OUT_DIR/torch8-server.log"; then
      result libs torch-8 FAIL "the funnel-server did not start (libs/torch8-server.log)"
      gpu_stop_server
    else
      pids=()
      for i in 0 1 2 3 4 5 6 7; do
        FUNNEL_RUN_DIR=$run_dir timeout "$TIMEOUT" "$BIN/funnel-run" python3 "$LIBS/torch_ops.py" \
          >"$OUT_DIR/torch8-$i.out" 2>"$OUT_DIR/torch8-$i.err" &
        pids+=($!)
      done
      watch_gpu_files "$OUT_DIR/torch8.gpufiles" "${pids[@]}"
      bad=()
      for i in 0 1 2 3 4 5 6 7; do
        wait "${pids[$i]}"
        rc=$?
        if [[ $rc -ne 0 ]]; then
          bad+=("$i(exit $rc: $(grep -m1 -h -E 'funnel:|FAIL|Error' "$OUT_DIR/torch8-$i.out" "$OUT_DIR/torch8-$i.err" | head -c 120 | tr '|' '/'))")
        elif grep -q "opened the GPU itself" "$OUT_DIR/torch8-$i.err"; then
          bad+=("$i(opened the GPU itself)")
        elif ! diff <(grep -v '^# ' "$OUT_DIR/torch.native.out") <(grep -v '^# ' "$OUT_DIR/torch8-$i.out") \
          >"$OUT_DIR/torch8-$i.diff"; then
          bad+=("$i(output differs: torch8-$i.diff)")
        fi
      done
      gpu_files=$(sort -u "$OUT_DIR/torch8.gpufiles" | tr '\n' ' ')
      FUNNEL_RUN_DIR=$run_dir timeout 20 "$BIN/funnelctl" shutdown >/dev/null 2>&1
      gpu_stop_server
      src=$?
      if [[ -n $gpu_files ]]; then
        result libs torch-8 FAIL "a client opened the GPU itself: $gpu_files(libs/torch8.gpufiles)"
      elif [[ ${#bad[@]} -gt 0 ]]; then
        result libs torch-8 FAIL "${bad[*]} (libs/torch8-*)"
      elif [[ $src == 137 ]]; then
        result libs torch-8 FAIL "the 8 clients passed, but the funnel-server did not stop (libs/torch8-server.log)"
      else
        result libs torch-8 PASS "8 torch_ops.py clients at once through one funnel-server, each exit 0 with the native output, no GPU file opened by a client"
      fi
    fi
    rm -rf "$run_dir"
  fi
fi
exit "$FAILED"
