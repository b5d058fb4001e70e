#!/usr/bin/env bash
# apps/nbody (all-pairs n-body, compute-bound) as N copies at once on ONE GPU: natively
# (time-sliced contexts), under NVIDIA MPS (private pipe/log directory, always stopped) and
# through funnel-run, in the same run.  The copies start timing together (a barrier) and run
# for SECONDS; the figure is their summed steps per second.
#   bench/nbody.sh
# Environment:
#   BUILD_DIR  build with bin/nbody and bin/funnel-run (default build-gpu, else build)
#   OUT        logs and results (default $PWD/bench-out/nbody)
#   MODES      default "native mps funnel"
#   NS         copies at once (default "1 2 4 8 16")
#   SECONDS_PER_RUN  timed window per copy (default 2); BODIES (default 16384)
#   MPS_MAX_CLIENTS (default 48), NATIVE_MAX_N (default: no limit): larger N recorded, not run
# Writes OUT/results.jsonl ({"mode","bench":"nbody_aggregate","n","value","unit":"steps/s"}
# per mode and N) and OUT/table.txt (printed last).  Exit 1 if a copy failed or was wrong.
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ -z ${BUILD_DIR:-} ]]; then
  if [[ -x $ROOT/build-gpu/bin/nbody ]]; then BUILD_DIR=$ROOT/build-gpu; else BUILD_DIR=$ROOT/build; fi
fi
OUT_DIR=${OUT:-$PWD/bench-out/nbody}
MODES=${MODES:-native mps funnel}
NS=${NS:-1 2 4 8 16}
SECS=${SECONDS_PER_RUN:-2}
BODIES=${BODIES:-16384}
MPS_MAX_CLIENTS=${MPS_MAX_CLIENTS:-48}
NATIVE_MAX_N=${NATIVE_MAX_N:-0}
NB=$BUILD_DIR/bin/nbody
FR=$BUILD_DIR/bin/funnel-run
for f in "$NB" "$FR"; do
  [[ -x $f ]] || { echo "nbody.sh: $f not found: build funnel first (BUILD_DIR=$BUILD_DIR)" >&2; exit 2; }
done
mkdir -p "$OUT_DIR"
RESULTS=$OUT_DIR/results.jsonl
: >"$RESULTS"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# shellcheck source=bench/mps.sh
source "$ROOT/bench/mps.sh"

emit() {  # emit MODE N VALUE [EXTRA_JSON]
  printf '{"mode":"%s","bench":"nbody_aggregate","n":%s,"value":%s,"unit":"steps/s"%s}\n' "$1" "$2" "$3" "${4:-}" >>"$RESULTS"
}

bad_any=0
for mode in $MODES; do
  if [[ $mode == mps ]]; then
    if [[ -z $MPS_CONTROL ]]; then
      echo "nbody.sh: nvidia-cuda-mps-control not found: MPS skipped" | tee "$OUT_DIR/mps-skipped.txt"
      continue
    fi
    mps_start || { echo "nbody.sh: MPS did not start: skipped"; continue; }
  fi
  export FUNNEL_JOB_ID=nbody-$mode-$$
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
    bar=$(mktemp -d /tmp/funnel-nbody.XXXXXX)
    pids=()
    for ((i = 0; i < n; i++)); do
      if [[ $mode == funnel ]]; then
        timeout 150 "$FR" --backend cuda "$NB" --bodies "$BODIES" --seconds "$SECS" --barrier "$bar" --clients "$n" \
          >"$d/n$n.$i.log" 2>&1 &
      else
        timeout 150 "$NB" --bodies "$BODIES" --seconds "$SECS" --barrier "$bar" --clients "$n" >"$d/n$n.$i.log" 2>&1 &
      fi
      pids+=($!)
    done
    failed=0
    for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
    rm -rf "$bar"
    total=$(cat "$d"/n"$n".*.log | grep -o '"steps_per_s":[0-9.]*' | cut -d: -f2 | awk '{s += $1} END {if (NR) printf "%.3f", s}')
    bad=$(cat "$d"/n"$n".*.log | grep -c '"ok":false')
    echo "$mode nbody N=$n: ${total:-?} steps/s in all (failed copies: $failed, wrong results: $bad)"
    if [[ $failed == 0 && $bad == 0 && -n $total ]]; then
      emit "$mode" "$n" "$total"
    else
      emit "$mode" "$n" null ",\"failed\":$failed,\"bad\":$bad"
      bad_any=1
    fi
  done
  [[ $mode == mps ]] && mps_stop
done

python3 - "$RESULTS" <<'PY' | tee "$OUT_DIR/table.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
val = {(r["mode"], r["n"]): r["value"] for r in rows}
ns = sorted({r["n"] for r in rows})
f = lambda v: "-" if v is None else f"{v:.1f}"
r = lambda a, b: "-" if a is None or not b else f"{a / b:.3f}"
print(f'{"copies":>6} {"native steps/s":>15} {"MPS steps/s":>12} {"funnel steps/s":>15} {"funnel/native":>14} {"funnel/MPS":>11}')
for n in ns:
    nat, mps, fun = (val.get((m, n)) for m in ("native", "mps", "funnel"))
    print(f"{n:>6} {f(nat):>15} {f(mps):>12} {f(fun):>15} {r(fun, nat):>14} {r(fun, mps):>11}")
print("steps/s: the copies' summed steps per second over the common window; higher is better")
PY
exit $bad_any
