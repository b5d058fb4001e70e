#!/usr/bin/env bash
# Do the copies of several processes overlap?  N processes (or one process with N threads, one
# stream each: "threads", one context) copy B bytes between pinned host and device memory in a
# loop (kernelbench copies: cudaMemcpyAsync + cudaStreamSynchronize) for SECONDS; natively
# (time-sliced contexts), under NVIDIA MPS and through funnel-run, in one job on one GPU.
#   bench/probes/copies.sh [OUT_DIR]     (default bench-out/copies)
# Environment: BUILD_DIR (default build-gpu), NS (default "1 8 16"), BYTES (default "131072
#   393216"), DIRS (default "h2d d2h"), MODES (default "native mps funnel threads"),
#   SECONDS_PER_RUN (default 1), BACKEND (funnel-run --backend, default cuda; sim to try the script).
# Writes OUT_DIR/results.jsonl (one line per run: the summed GB/s of the N) and prints a table.
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build-gpu}
OUT_DIR=${1:-bench-out/copies}
KB=$BUILD_DIR/bin/kernelbench FR=$BUILD_DIR/bin/funnel-run
for f in "$KB" "$FR"; do [[ -x $f ]] || { echo "copies.sh: $f not found" >&2; exit 2; }; done
mkdir -p "$OUT_DIR"
RESULTS=$OUT_DIR/results.jsonl
: >"$RESULTS"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# shellcheck source=bench/mps.sh
source "$ROOT/bench/mps.sh"

# group MODE N BYTES DIR: N processes at once (or one with N threads); one JSON line
group() {
  local mode=$1 n=$2 bytes=$3 dir=$4 d i procs=$2 threads=1 wrap=()
  d=$(mktemp -d)
  [[ $mode == threads ]] && procs=1 threads=$n
  [[ $mode == funnel ]] && wrap=("$FR" --backend "${BACKEND:-cuda}") && export FUNNEL_JOB_ID=copies-$$
  for ((i = 0; i < procs; i++)); do
    timeout 120 "${wrap[@]}" "$KB" copies --bytes "$bytes" --dir "$dir" --seconds "${SECONDS_PER_RUN:-1}" \
      --barrier "$d" --clients "$procs" --threads "$threads" >"$d/out.$i" 2>"$d/err.$i" &
  done
  wait
  python3 - "$d" "$mode" "$n" "$bytes" "$dir" <<'PY' | tee -a "$RESULTS"
import glob, json, sys
d, mode, n, nbytes, direction = sys.argv[1:]
rows = []
for f in glob.glob(d + "/out.*"):
    for line in open(f):
        if line.startswith("{"):
            rows.append(json.loads(line))
ok = len(rows) > 0 and all(r["ok"] for r in rows) and len(rows) == (1 if mode == "threads" else int(n))
gbps = sum(r["gbps"] for r in rows) if ok else None
us = sorted(r["us_per_copy"] for r in rows)
print(json.dumps({"mode": mode, "n": int(n), "bytes": int(nbytes), "dir": direction, "gbps": gbps,
                  "us_per_copy_median": us[len(us) // 2] if us else None, "ok": ok}))
PY
  rm -rf "$d"
}

for mode in ${MODES:-native mps funnel threads}; do
  if [[ $mode == mps ]]; then
    [[ -n $MPS_CONTROL ]] || { echo "copies.sh: no nvidia-cuda-mps-control: MPS skipped"; continue; }
    mps_start || { echo "copies.sh: MPS did not start: skipped"; continue; }
  fi
  for dir in ${DIRS:-h2d d2h}; do
    for bytes in ${BYTES:-131072 393216}; do
      for n in ${NS:-1 8 16}; do group "$mode" "$n" "$bytes" "$dir"; done
    done
  done
  [[ $mode == mps ]] && mps_stop
done

python3 - "$RESULTS" <<'PY' | tee "$OUT_DIR/table.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {(r["mode"], r["dir"], r["bytes"], r["n"]): r for r in rows}
modes = [m for m in ("native", "mps", "funnel", "threads") if any(r["mode"] == m for r in rows)]
keys = sorted({(r["dir"], r["bytes"], r["n"]) for r in rows})
print(f'{"dir":>4} {"bytes":>8} {"N":>3}' + "".join(f' {m + " GB/s":>13}' for m in modes) + f' {"funnel/mps":>11}')
for k in keys:
    v = {m: (by.get((m,) + k) or {}).get("gbps") for m in modes}
    f = lambda x: "-" if x is None else f"{x:.2f}"
    ratio = "-" if not v.get("funnel") or not v.get("mps") else f'{v["funnel"] / v["mps"]:.3f}'
    print(f"{k[0]:>4} {k[1]:>8} {k[2]:>3}" + "".join(f" {f(v[m]):>13}" for m in modes) + f" {ratio:>11}")
print("summed GB/s of N processes (threads: one process, N threads, one stream each), kernelbench copies")
PY
