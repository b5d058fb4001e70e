#!/usr/bin/env bash
# Kernel launches of N processes at once: natively (time-sliced contexts), under NVIDIA MPS
# (started here with a private pipe/log directory and always stopped) and through funnel-run,
# in the same run on the same GPU.  apps/kernelbench/kernelbench.cu is the program.
#   bench/kernels.sh
# Environment:
#   BUILD_DIR  build with bin/kernelbench and bin/funnel-run (default build-gpu, else build)
#   OUT        logs and results (default $PWD/bench-out/kernels)
#   MODES      default "native mps funnel threads"; "threads" is ONE native process with N
#              threads, each on its own stream, in one context: the driver's single-process
#              launch ceiling, which funnel's one server process per GPU lives under;
#              "funnel-wK", "funnel-bN", "funnel-cN", "funnel-sN", "funnel-iN", "funnel-yN" (e.g. funnel-w4, funnel-b0):
#              funnel with one server setting changed (bench/modes.sh)
#   NS         client counts for throughput (default "1 4 8 16 32 48 64")
#   SECONDS_PER_RUN  throughput window (default 1.5)
#   START_NS   client counts for start-up and idle memory (default "16")
#   MAX_N_FUNNEL extra funnel-only count that must attach and run (default 128; 0 = skip)
#   MPS_MAX_CLIENTS  larger N are not run under MPS, recorded with a note (default 48: the
#              client limit of Volta and later through CUDA 13.0)
#   NATIVE_MAX_N     larger N are not run natively, recorded with a note (default: no limit)
# Writes OUT/results.jsonl (one line per figure) and OUT/table.txt (printed last).
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ -z ${BUILD_DIR:-} ]]; then
  if [[ -x $ROOT/build-gpu/bin/kernelbench ]]; then BUILD_DIR=$ROOT/build-gpu; else BUILD_DIR=$ROOT/build; fi
fi
OUT_DIR=${OUT:-$PWD/bench-out/kernels}
MODES=${MODES:-native mps funnel threads}
NS=${NS:-1 4 8 16 32 48 64}
SECS=${SECONDS_PER_RUN:-1.5}
START_NS=${START_NS:-16}
MAX_N_FUNNEL=${MAX_N_FUNNEL:-128}
MPS_MAX_CLIENTS=${MPS_MAX_CLIENTS:-48}
NATIVE_MAX_N=${NATIVE_MAX_N:-0}
KB=$BUILD_DIR/bin/kernelbench
FR=$BUILD_DIR/bin/funnel-run
for f in "$KB" "$FR"; do
  [[ -x $f ]] || { echo "kernels.sh: $f not found: build funnel first (BUILD_DIR=$BUILD_DIR)" >&2; exit 2; }
done
mkdir -p "$OUT_DIR"
RESULTS=$OUT_DIR/results.jsonl
: >"$RESULTS"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# shellcheck source=bench/mps.sh
source "$ROOT/bench/mps.sh"
# shellcheck source=bench/modes.sh
source "$ROOT/bench/modes.sh"

# run_one MODE ARGS...: one kernelbench process in MODE (at most 5 minutes)
run_one() {
  local mode=$1 setting
  shift
  if [[ $mode == funnel ]]; then
    timeout 300 "$FR" --backend cuda "$KB" "$@"
  elif setting=$(funnel_variant_env "$mode"); then
    # a funnel variant: one server setting changed (bench/modes.sh)
    # shellcheck disable=SC2086  # one word per setting
    env $setting timeout 300 "$FR" --backend cuda "$KB" "$@"
  else
    timeout 300 "$KB" "$@"
  fi
}

emit() {  # emit MODE BENCH N VALUE UNIT [EXTRA_JSON]
  printf '{"mode":"%s","bench":"%s","n":%s,"value":%s,"unit":"%s"%s}\n' "$1" "$2" "$3" "$4" "$5" "${6:-}" >>"$RESULTS"
}

# group MODE N LOGPREFIX ARGS...: N processes at once; waits; echoes how many failed
group() {
  local mode=$1 n=$2 prefix=$3
  shift 3
  local pids=() i failed=0
  for ((i = 0; i < n; i++)); do
    run_one "$mode" "$@" >"$prefix.$i.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
  echo "$failed"
}

# capped MODE BENCH UNIT NS...: echoes the NS this mode runs; records the others with a note
capped() {
  local mode=$1 bench=$2 unit=$3 cap=0 why="" n out=""
  shift 3
  if [[ $mode == mps ]]; then cap=$MPS_MAX_CLIENTS why="over the MPS client limit ($MPS_MAX_CLIENTS)"
  elif [[ $mode == native ]]; then cap=$NATIVE_MAX_N why="over NATIVE_MAX_N ($NATIVE_MAX_N)"; fi
  for n in "$@"; do
    if ((cap > 0 && n > cap)); then emit "$mode" "$bench" "$n" null "$unit" ",\"note\":\"$why\""
    else out="$out $n"; fi
  done
  echo "$out"
}

gpu_mem_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 | head -1; }

for mode in $MODES; do
  if [[ $mode == mps ]]; then
    if [[ -z $MPS_CONTROL ]]; then
      echo "kernels.sh: nvidia-cuda-mps-control not found: MPS skipped" | tee "$OUT_DIR/mps-skipped.txt"
      continue
    fi
    mps_start || { echo "kernels.sh: MPS did not start: skipped"; continue; }
  fi
  export FUNNEL_JOB_ID=kernels-$mode-$$
  d=$OUT_DIR/$mode
  mkdir -p "$d"

  if [[ $mode == threads ]]; then
    for kernel in empty small; do
      for n in $NS; do
        failed=$(group native 1 "$d/tp-$kernel-$n" throughput --kernel "$kernel" --seconds "$SECS" --threads "$n")
        total=$(grep -o '"per_s":[0-9.]*' "$d/tp-$kernel-$n.0.log" | cut -d: -f2)
        bad=$(grep -c '"ok":false' "$d/tp-$kernel-$n.0.log")
        echo "one process, $n threads, $kernel: ${total:-?} launches/s (bad counts: $bad)"
        if [[ $failed == 0 && $bad == 0 && -n $total ]]; then emit threads "throughput_$kernel" "$n" "$total" launches/s
        else emit threads "throughput_$kernel" "$n" null launches/s ",\"failed\":$failed"; fi
      done
    done
    continue
  fi

  # (a) launch issue cost, one process
  run_one "$mode" issue --kernel empty >"$d/issue.log" 2>&1 &&
    emit "$mode" issue_empty 1 "$(grep -o '"us":[0-9.]*' "$d/issue.log" | cut -d: -f2)" us
  # (a2) synchronisation round trip: one launch + cudaStreamSynchronize, one process
  run_one "$mode" roundtrip --kernel empty >"$d/roundtrip.log" 2>&1 &&
    emit "$mode" roundtrip_empty 1 "$(grep -o '"us":[0-9.]*' "$d/roundtrip.log" | cut -d: -f2)" us

  # (b) aggregate throughput of N processes
  ns=$NS
  [[ $mode == funnel* && $MAX_N_FUNNEL != 0 ]] && ns="$NS $MAX_N_FUNNEL"
  # MPS serves at most 48 client processes per GPU (Volta and later): larger N fail to
  # attach, so they are recorded as such without running (and natively above NATIVE_MAX_N).
  for kernel in empty small; do
    # shellcheck disable=SC2086  # lists of numbers
    for n in $(capped "$mode" "throughput_$kernel" launches/s $ns); do
      bar=$(mktemp -d /tmp/funnel-kb.XXXXXX)
      failed=$(group "$mode" "$n" "$d/tp-$kernel-$n" throughput --kernel "$kernel" --seconds "$SECS" --barrier "$bar" --clients "$n")
      rm -rf "$bar"
      total=$(cat "$d"/tp-$kernel-$n.*.log | grep -o '"per_s":[0-9.]*' | cut -d: -f2 | awk '{s += $1} END {if (NR) printf "%.1f", s}')
      bad=$(cat "$d"/tp-$kernel-$n.*.log | grep -c '"ok":false')
      echo "$mode $kernel N=$n: ${total:-?} launches/s (failed processes: $failed, bad counts: $bad)"
      if [[ $failed == 0 && $bad == 0 && -n $total ]]; then
        emit "$mode" "throughput_$kernel" "$n" "$total" launches/s
      else
        emit "$mode" "throughput_$kernel" "$n" null launches/s ",\"failed\":$failed"
      fi
    done
  done

  # shellcheck disable=SC2086
  start_ns=$(capped "$mode" startup s $START_NS)
  # shellcheck disable=SC2086
  capped "$mode" idle_memory MiB $START_NS >/dev/null
  for n in $start_ns; do
    # (c) start-up: N processes attach and finish a first kernel (funnel: a fresh server)
    export FUNNEL_JOB_ID=kernels-$mode-first-$n-$$
    t0=$(date +%s%N)
    failed=$(group "$mode" "$n" "$d/first-$n" first)
    t1=$(date +%s%N)
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", (b - a) / 1e9}')
    echo "$mode start-up of $n: $secs s (failed $failed)"
    [[ $failed == 0 ]] && emit "$mode" startup "$n" "$secs" s

    # (d) GPU memory of N idle clients
    export FUNNEL_JOB_ID=kernels-$mode-idle-$n-$$
    # The baseline must not include a server still idling out from the runs above.
    for _ in $(seq 150); do pgrep -x funnel-server >/dev/null || break; sleep 0.1; done
    sleep 1
    base=$(gpu_mem_used)
    bar=$(mktemp -d /tmp/funnel-kb.XXXXXX)
    pids=()
    for ((i = 0; i < n; i++)); do
      run_one "$mode" idle --barrier "$bar" --clients "$n" >"$d/idle-$n.$i.log" 2>&1 &
      pids+=($!)
    done
    for _ in $(seq 600); do
      (($(find "$bar" -maxdepth 1 -name 'ready.*' | wc -l) >= n)) && break
      sleep 0.1
    done
    sleep 1
    used=$(gpu_mem_used)
    touch "$bar/stop"
    for p in "${pids[@]}"; do wait "$p"; done
    rm -rf "$bar"
    mib=$((used - base))
    echo "$mode GPU memory of $n idle clients: $mib MiB (before $base MiB)"
    emit "$mode" idle_memory "$n" "$mib" MiB
  done

  [[ $mode == mps ]] && mps_stop
done

python3 - "$RESULTS" <<'PY' | tee "$OUT_DIR/table.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
val = {(r["mode"], r["bench"], r["n"]): r["value"] for r in rows}
keys = sorted({(r["bench"], r["n"]) for r in rows}, key=lambda k: (k[0], k[1]))
higher_better = lambda b: b.startswith("throughput")
pooled = sorted({r["mode"] for r in rows if r["mode"].startswith("funnel-")})
print(f'{"bench":22} {"N":>4} {"native":>12} {"mps":>12} {"funnel":>12} {"1 proc":>12} {"funnel/native":>14} {"funnel/mps":>11} {"funnel/1proc":>12}'
      + "".join(f" {m + '/mps':>16}" for m in pooled))
for b, n in keys:
    nat, mps, fun, thr = (val.get((m, b, n)) for m in ("native", "mps", "funnel", "threads"))
    f = lambda v: "-" if v is None else f"{v:.4g}"
    r = lambda a, c: "-" if a is None or c in (None, 0) else f"{a / c:.3f}"
    extra = "".join(f" {r(val.get((m, b, n)), mps):>16}" for m in pooled)
    print(f"{b:22} {n:>4} {f(nat):>12} {f(mps):>12} {f(fun):>12} {f(thr):>12} {r(fun, nat):>14} {r(fun, mps):>11} {r(fun, thr):>12}{extra}")
print("throughput: funnel/x > 1 is better; issue, startup, idle_memory: funnel/x < 1 is better")
print("1 proc: one native process, N threads on N streams in one context (the single-process ceiling)")
PY
