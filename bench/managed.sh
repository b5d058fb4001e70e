#!/usr/bin/env bash
# A managed-memory program and a zero-copy program, one process: natively, under NVIDIA MPS
# (started here with a private pipe/log directory and always stopped) and through funnel-run, in
# the same run on the same GPU.  apps/managedbench/managedbench.cu is the program: the host
# initialises ELEMS floats, then ITERS kernels x = fmaf(x, a, b) over all of them, the host
# reading a sample of 64 elements after every SAMPLE_EVERY-th, and the whole result checked at
# the end; over three kinds of memory (KINDS):
#   managed   cudaMallocManaged (natively: pages migrate on demand; funnel: a shared host buffer
#             registered with the driver, kernels read it over the bus, nothing migrates)
#   zerocopy  cudaHostAlloc(cudaHostAllocMapped): kernels reach host memory over the bus (both)
#   device    cudaMalloc + cudaMemcpy: the reference
# No target: the issue asks for the figures and the design's cost explained (reported rows).
#   bench/managed.sh
# Environment:
#   BUILD_DIR  build with bin/managedbench and bin/funnel-run (default build-gpu, else build)
#   OUT        logs and results (default $PWD/bench-out/managed)
#   MODES      default "native mps funnel"; funnel variants "funnel-wK" etc. (bench/modes.sh)
#   KINDS      default "managed zerocopy device"
#   ELEMS      floats (default 16777216: 64 MiB); ITERS kernels (default 20); SAMPLE_EVERY
#              host samples after every K-th kernel (default 5)
#   ROUNDS     runs of every mode and kind (default 3; round r: every kind, then the next
#              round); the figures are the medians
#   TIMEOUT    seconds per process (default 120)
# Writes OUT/runs.jsonl (every run's JSON line with mode, kind, round, exit status),
# OUT/results.jsonl (per mode and kind the medians: {"mode","bench":"managed_prog_<kind>","n":1,
# "value":s,"unit":"s"}, managed_first_<kind> and managed_kernel_<kind> in ms) and
# OUT/table.txt (printed last: seconds native / MPS / funnel, funnel/native, funnel/MPS, then
# the breakdown).  Exit 1 if a run failed or computed a wrong value.
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ -z ${BUILD_DIR:-} ]]; then
  if [[ -x $ROOT/build-gpu/bin/managedbench ]]; then BUILD_DIR=$ROOT/build-gpu; else BUILD_DIR=$ROOT/build; fi
fi
OUT_DIR=${OUT:-$PWD/bench-out/managed}
MODES=${MODES:-native mps funnel}
KINDS=${KINDS:-managed zerocopy device}
ELEMS=${ELEMS:-16777216}
ITERS=${ITERS:-20}
SAMPLE_EVERY=${SAMPLE_EVERY:-5}
ROUNDS=${ROUNDS:-3}
TIMEOUT=${TIMEOUT:-120}
for v in ELEMS ITERS SAMPLE_EVERY ROUNDS TIMEOUT; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "managed.sh: $v must be a positive integer, not '${!v}'" >&2; exit 2; }
done
for k in $KINDS; do
  case $k in managed | zerocopy | device) ;; *) echo "managed.sh: unknown kind '$k' in KINDS" >&2; exit 2 ;; esac
done
MB=$BUILD_DIR/bin/managedbench
FR=$BUILD_DIR/bin/funnel-run
for f in "$MB" "$FR"; do
  [[ -x $f ]] || { echo "managed.sh: $f not found: build funnel first (BUILD_DIR=$BUILD_DIR)" >&2; exit 2; }
done
mkdir -p "$OUT_DIR"
RUNS=$OUT_DIR/runs.jsonl
RESULTS=$OUT_DIR/results.jsonl
: >"$RUNS"
: >"$RESULTS"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# shellcheck source=bench/mps.sh
source "$ROOT/bench/mps.sh"
# shellcheck source=bench/modes.sh
source "$ROOT/bench/modes.sh"

# run_one MODE ARGS...: one managedbench process in MODE (at most TIMEOUT seconds)
run_one() {
  local mode=$1 setting
  shift
  if [[ $mode == funnel ]]; then
    timeout "$TIMEOUT" "$FR" --backend cuda "$MB" "$@"
  elif setting=$(funnel_variant_env "$mode"); then
    # shellcheck disable=SC2086  # one word per setting
    env $setting timeout "$TIMEOUT" "$FR" --backend cuda "$MB" "$@"
  else
    timeout "$TIMEOUT" "$MB" "$@"
  fi
}

for mode in $MODES; do
  if [[ $mode == mps ]]; then
    if [[ -z $MPS_CONTROL ]]; then
      echo "managed.sh: nvidia-cuda-mps-control not found: MPS skipped" | tee "$OUT_DIR/mps-skipped.txt"
      continue
    fi
    mps_start || { echo "managed.sh: MPS did not start: skipped"; continue; }
  fi
  export FUNNEL_JOB_ID=managed-$mode-$$
  d=$OUT_DIR/$mode
  mkdir -p "$d"
  for ((r = 1; r <= ROUNDS; r++)); do
    for kind in $KINDS; do
      log=$d/$kind.r$r.log
      run_one "$mode" --mode "$kind" --elems "$ELEMS" --iters "$ITERS" --sample-every "$SAMPLE_EVERY" >"$log" 2>&1
      rc=$?
      line=$(grep '^{"bench":"managed"' "$log" | tail -1)
      printf '{"mode":"%s","kind":"%s","round":%d,"rc":%d,"run":%s}\n' "$mode" "$kind" "$r" "$rc" "${line:-null}" >>"$RUNS"
      if [[ $rc == 0 && -n $line ]]; then
        echo "$mode $kind round $r: $(sed -n 's/.*"seconds":\([0-9.]*\).*"first_kernel_ms":\([0-9.]*\).*"kernel_ms":\([0-9.]*\).*/\1 s (first kernel \2 ms, later kernels \3 ms)/p' <<<"$line")"
      else
        echo "$mode $kind round $r: FAILED (exit $rc): $(grep -v '^{' "$log" | tail -2 | tr '\n' ' ')"
      fi
    done
  done
  [[ $mode == mps ]] && mps_stop
done

# medians per mode and kind -> results.jsonl; the table
python3 - "$RUNS" "$RESULTS" "$ELEMS" "$ITERS" "$SAMPLE_EVERY" "$ROUNDS" <<'PY' | tee "$OUT_DIR/table.txt"
import json, statistics, sys
runs_path, results_path = sys.argv[1], sys.argv[2]
elems, iters, every, rounds = (int(x) for x in sys.argv[3:7])
runs = [json.loads(l) for l in open(runs_path) if l.strip()]
modes = list(dict.fromkeys(r["mode"] for r in runs))
kinds = list(dict.fromkeys(r["kind"] for r in runs))
FIELDS = ("seconds", "first_kernel_ms", "kernel_ms", "kernel_gbps", "sample_ms", "upload_ms", "readback_ms",
          "alloc_ms", "init_ms")
med, failed = {}, {}
for m in modes:
    for k in kinds:
        good = [r["run"] for r in runs if r["mode"] == m and r["kind"] == k and r["rc"] == 0
                and r["run"] and r["run"].get("ok") is True]
        failed[(m, k)] = sum(1 for r in runs if r["mode"] == m and r["kind"] == k) - len(good)
        med[(m, k)] = None
        if good:
            med[(m, k)] = {f: statistics.median(g[f] for g in good) for f in FIELDS}
            med[(m, k)]["secs_all"] = [g["seconds"] for g in good]
with open(results_path, "a") as out:
    for (m, k), v in med.items():
        extra = {"kind": k, "elems": elems, "iters": iters, "sample_every": every, "rounds": len(v["secs_all"]) if v else 0}
        if failed[(m, k)]:
            extra["failed"] = failed[(m, k)]
        for bench, field, unit in (("managed_prog_", "seconds", "s"), ("managed_first_", "first_kernel_ms", "ms"),
                                   ("managed_kernel_", "kernel_ms", "ms")):
            row = {"mode": m, "bench": bench + k, "n": 1, "value": v[field] if v else None, "unit": unit}
            row.update(extra)
            if field == "seconds" and v:
                row.update({f: v[f] for f in FIELDS if f != "seconds"}, values=v["secs_all"])
            out.write(json.dumps(row) + "\n")
r = lambda a, b: None if a is None or not b else a / b
sec = lambda m, k: med.get((m, k)) and med[(m, k)]["seconds"]
fs = lambda x: "-" if x is None else f"{x:.4f}"
rs = lambda x: "-" if x is None else f"{x:.3f}"
print(f"managed-memory program, 1 process: {elems} floats ({elems * 4 / 2**20:.0f} MiB), {iters} kernels x = x*a + b, "
      f"host sample after every {every}th; medians of up to {rounds} rounds")
print(f'{"memory":<9} {"native s":>9} {"MPS s":>9} {"funnel s":>9} {"funnel/native":>14} {"funnel/MPS":>11}')
for k in kinds:
    nat, mps, fun = sec("native", k), sec("mps", k), sec("funnel", k)
    print(f"{k:<9} {fs(nat):>9} {fs(mps):>9} {fs(fun):>9} {rs(r(fun, nat)):>14} {rs(r(fun, mps)):>11}")
print("s: the timed region (device: the upload too; the kernels, the host's samples, the final sync); lower is better")
print("no target (the issue asks for the figures and the design's cost): reported")
print()
print("breakdown (medians, ms; kernel = mean GPU time of kernels 2..I, GB/s = 2 x bytes / kernel)")
print(f'{"memory":<9} {"mode":<14} {"first kernel":>12} {"kernel":>8} {"GB/s":>7} {"samples":>8} {"upload":>7}'
      f' {"readback":>9} {"alloc":>7} {"init":>7} {"failed":>6}')
for k in kinds:
    for m in modes:
        v = med[(m, k)]
        if v is None:
            print(f"{k:<9} {m:<14}   no successful run ({failed[(m, k)]} failed)")
            continue
        print(f"{k:<9} {m:<14} {v['first_kernel_ms']:>12.3f} {v['kernel_ms']:>8.3f} {v['kernel_gbps']:>7.1f}"
              f" {v['sample_ms']:>8.3f} {v['upload_ms']:>7.2f} {v['readback_ms']:>9.2f} {v['alloc_ms']:>7.2f}"
              f" {v['init_ms']:>7.2f} {failed[(m, k)]:>6}")
PY
bad=$(python3 -c '
import json, sys
print(sum(1 for l in open(sys.argv[1]) if l.strip() and (json.loads(l)["rc"] != 0 or not (json.loads(l)["run"] or {}).get("ok"))))
' "$RUNS")
[[ $bad == 0 ]] || { echo "managed.sh: $bad run(s) failed or computed a wrong value (logs in $OUT_DIR/<mode>/)"; exit 1; }
exit 0
