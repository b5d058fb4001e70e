#!/usr/bin/env bash
# CUDA graph replays of N processes at once: natively (time-sliced contexts), under NVIDIA MPS
# (started here with a private pipe/log directory and always stopped) and through funnel-run, in
# the same run on the same GPU.  apps/graphbench/graphbench.cu is the program: each process
# captures a graph of KERNELS small kernels (1 block of 128 threads adding 1), warms it up, waits
# at a barrier until all N are ready, replays it REPLAYS times and synchronises once.  The issue's
# case: 100 kernels, 1000 replays, 1 and 16 clients, funnel >= MPS.
#   bench/graphs.sh
# Environment:
#   BUILD_DIR  build with bin/graphbench and bin/funnel-run (default build-gpu, else build)
#   OUT        logs and results (default $PWD/bench-out/graphs)
#   MODES      default "native mps funnel"; funnel variants "funnel-wK" etc. (bench/modes.sh)
#   NS         client counts (default "1 16")
#   KERNELS    kernels per graph (default 100); REPLAYS timed replays (default 1000);
#   WARMUP     untimed replays before the barrier (default 10); SPIN_NS GPU spin per kernel
#              (default 0: the kernel only adds)
#   MPS_MAX_CLIENTS (default 48), NATIVE_MAX_N (default: no limit): larger N recorded, not run
# The figure per mode and N is the group's graphs/s over its common window: all processes'
# replays divided by the time from the first process's first timed launch to the last one's
# final synchronisation (each process prints its own t0/t1 on the host's monotonic clock).
# Writes OUT/results.jsonl ({"mode","bench":"graph_replay","n","value","unit":"graphs/s",...}
# per mode and N) and OUT/table.txt (printed last: graphs/s and kernels/s, funnel/native,
# funnel/MPS and the target funnel/MPS >= 1 as PASS / MISS).  Exit 1 if a process failed or
# counted wrong.
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ -z ${BUILD_DIR:-} ]]; then
  if [[ -x $ROOT/build-gpu/bin/graphbench ]]; then BUILD_DIR=$ROOT/build-gpu; else BUILD_DIR=$ROOT/build; fi
fi
OUT_DIR=${OUT:-$PWD/bench-out/graphs}
MODES=${MODES:-native mps funnel}
NS=${NS:-1 16}
KERNELS=${KERNELS:-100}
REPLAYS=${REPLAYS:-1000}
WARMUP=${WARMUP:-10}
SPIN_NS=${SPIN_NS:-0}
MPS_MAX_CLIENTS=${MPS_MAX_CLIENTS:-48}
NATIVE_MAX_N=${NATIVE_MAX_N:-0}
GB=$BUILD_DIR/bin/graphbench
FR=$BUILD_DIR/bin/funnel-run
for f in "$GB" "$FR"; do
  [[ -x $f ]] || { echo "graphs.sh: $f not found: build funnel first (BUILD_DIR=$BUILD_DIR)" >&2; exit 2; }
done
mkdir -p "$OUT_DIR"
RESULTS=$OUT_DIR/results.jsonl
: >"$RESULTS"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# shellcheck source=bench/mps.sh
source "$ROOT/bench/mps.sh"
# shellcheck source=bench/modes.sh
source "$ROOT/bench/modes.sh"

# run_one MODE ARGS...: one graphbench process in MODE (at most 2.5 minutes)
run_one() {
  local mode=$1 setting
  shift
  if [[ $mode == funnel ]]; then
    timeout 150 "$FR" --backend cuda "$GB" "$@"
  elif setting=$(funnel_variant_env "$mode"); then
    # shellcheck disable=SC2086  # one word per setting
    env $setting timeout 150 "$FR" --backend cuda "$GB" "$@"
  else
    timeout 150 "$GB" "$@"
  fi
}

emit() {  # emit MODE N VALUE [EXTRA_JSON]
  printf '{"mode":"%s","bench":"graph_replay","n":%s,"value":%s,"unit":"graphs/s"%s}\n' "$1" "$2" "$3" "${4:-}" >>"$RESULTS"
}

bad_any=0
for mode in $MODES; do
  if [[ $mode == mps ]]; then
    if [[ -z $MPS_CONTROL ]]; then
      echo "graphs.sh: nvidia-cuda-mps-control not found: MPS skipped" | tee "$OUT_DIR/mps-skipped.txt"
      continue
    fi
    mps_start || { echo "graphs.sh: MPS did not start: skipped"; continue; }
  fi
  export FUNNEL_JOB_ID=graphs-$mode-$$
  d=$OUT_DIR/$mode
  mkdir -p "$d"
  cap=0
  [[ $mode == mps ]] && cap=$MPS_MAX_CLIENTS
  [[ $mode == native ]] && cap=$NATIVE_MAX_N
  for n in $NS; do
    if ((cap > 0 && n > cap)); then
      emit "$mode" "$n" null ",\"note\":\"over the $mode limit ($cap)\""
      continue
    fi
    rm -f "$d"/n"$n".*.log
    bar=$(mktemp -d /tmp/funnel-graphs.XXXXXX)
    pids=()
    for ((i = 0; i < n; i++)); do
      run_one "$mode" --kernels "$KERNELS" --replays "$REPLAYS" --warmup "$WARMUP" --spin-ns "$SPIN_NS" \
        --barrier "$bar" --clients "$n" >"$d/n$n.$i.log" 2>&1 &
      pids+=($!)
    done
    failed=0
    for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
    rm -rf "$bar"
    # the group's figures from every process's JSON line: graphs/s over the common window
    # (first t0 to last t1), the sum of the processes' own rates, and how many lines there were
    read -r total summed lines < <(cat "$d"/n"$n".*.log | grep '^{"bench":"graph_replay"' | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
if not rows:
    print("- - 0")
else:
    span = (max(r["t1_ns"] for r in rows) - min(r["t0_ns"] for r in rows)) / 1e9
    graphs = sum(r["replays"] for r in rows)
    rates = sum(r["graphs_per_s"] for r in rows)
    print(f"{graphs / span:.1f} {rates:.1f} {len(rows)}")
')
    bad=$(cat "$d"/n"$n".*.log | grep -c '"ok":false')
    echo "$mode graphs N=$n: ${total:-?} graphs/s in all, $KERNELS kernels each (sum of the processes' rates: ${summed:-?}; failed processes: $failed, wrong counts: $bad)"
    if [[ $failed == 0 && $bad == 0 && ${lines:-0} == "$n" && $total != - ]]; then
      emit "$mode" "$n" "$total" ",\"kernels\":$KERNELS,\"replays\":$REPLAYS,\"sum_of_rates\":$summed"
    else
      emit "$mode" "$n" null ",\"failed\":$failed,\"bad\":$bad"
      bad_any=1
    fi
  done
  [[ $mode == mps ]] && mps_stop
done

python3 - "$RESULTS" "$KERNELS" <<'PY' | tee "$OUT_DIR/table.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
kernels = int(sys.argv[2])
val = {(r["mode"], r["n"]): r["value"] for r in rows}
ns = sorted({r["n"] for r in rows})
variants = sorted({r["mode"] for r in rows if r["mode"].startswith("funnel-")})
f = lambda v: "-" if v is None else f"{v:.0f}"
r = lambda a, b: None if a is None or not b else a / b
rs = lambda x: "-" if x is None else f"{x:.3f}"
print(f'{"clients":>7} {"native graphs/s":>16} {"MPS graphs/s":>13} {"funnel graphs/s":>16} {"funnel kernels/s":>17}'
      f' {"funnel/native":>14} {"funnel/MPS":>11} {"target":>7}' + "".join(f" {m + '/MPS':>16}" for m in variants))
for n in ns:
    nat, mps, fun = (val.get((m, n)) for m in ("native", "mps", "funnel"))
    q = r(fun, mps)
    verdict = "N/A" if q is None else ("PASS" if q >= 1.0 else "MISS")
    extra = "".join(f" {rs(r(val.get((m, n)), mps)):>16}" for m in variants)
    print(f"{n:>7} {f(nat):>16} {f(mps):>13} {f(fun):>16} {f(None if fun is None else fun * kernels):>17}"
          f" {rs(r(fun, nat)):>14} {rs(q):>11} {verdict:>7}{extra}")
print(f"graphs/s: the clients' replays of a captured graph of {kernels} kernels over their common window; higher is better")
print("target (issue): funnel/MPS >= 1 at 1 and 16 clients")
PY
exit $bad_any
