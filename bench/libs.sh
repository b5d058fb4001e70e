#!/usr/bin/env bash
# The driver-level client's benchmarks (issue 29), in one run on one GPU:
#   1. funnel's driver path against its runtime path (through funnel-run, and natively for
#      reference): kernelbench --api driver|runtime: launch issue cost (one client), aggregate
#      small-kernel throughput of NS_DRV clients, copy bandwidth pinned h2d/d2h (COPY_BYTES);
#   2. cuBLAS (apps/gemmbench): aggregate N x N SGEMMs per second of GEMM_NS processes at once,
#      natively, under NVIDIA MPS and through funnel-run, in ROUNDS interleaved rounds;
#   3. start-up of START_N processes that initialise cuBLAS (cublasCreate, one SGEMM, checked,
#      exit): wall time from the launch of the first to the exit of the last, same modes.
#   bench/libs.sh
# Environment: BUILD_DIR (default build-gpu), OUT (default $PWD/bench-out/libs), ROUNDS (3),
# SECONDS_PER_RUN (1.5), NS_DRV (16), GEMM_NS ("1 16"), GEMM_N (256), START_N (16),
# COPY_BYTES ("4096 67108864"), MODES ("native mps funnel").
# Writes OUT/results.jsonl (one line per figure and round) and OUT/table.txt (medians over the
# rounds and the ratios the issue names; printed last).  Exit 1 if a run failed or was wrong.
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build-gpu}
OUT_DIR=${OUT:-$PWD/bench-out/libs}
ROUNDS=${ROUNDS:-3}
SECS=${SECONDS_PER_RUN:-1.5}
NS_DRV=${NS_DRV:-16}
GEMM_NS=${GEMM_NS:-1 16}
GEMM_N=${GEMM_N:-256}
START_N=${START_N:-16}
COPY_BYTES=${COPY_BYTES:-4096 67108864}
MODES=${MODES:-native mps funnel}
KB=$BUILD_DIR/bin/kernelbench
GB=$BUILD_DIR/bin/gemmbench
FR=$BUILD_DIR/bin/funnel-run
for f in "$KB" "$GB" "$FR"; do
  [[ -x $f ]] || { echo "libs.sh: $f not found: build with bench/run.sh --build-only (BUILD_DIR=$BUILD_DIR)" >&2; exit 2; }
done
mkdir -p "$OUT_DIR"
RESULTS=$OUT_DIR/results.jsonl
: >"$RESULTS"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export FUNNEL_BACKEND=${FUNNEL_BACKEND:-cuda}
# shellcheck source=bench/mps.sh
source "$ROOT/bench/mps.sh"
failed=0

emit() {  # emit ROUND MODE BENCH VALUE UNIT
  printf '{"round":%s,"mode":"%s","bench":"%s","value":%s,"unit":"%s"}\n' "$1" "$2" "$3" "${4:-null}" "$5" >>"$RESULTS"
}
# field JSON_LINES KEY: the values of KEY, one per line
field() { grep -o "\"$2\":[0-9.]*" <<<"$1" | cut -d: -f2; }
# run_as MODE CMD...: the command natively / under the running MPS daemon, or through funnel-run
run_as() {
  local mode=$1
  shift
  if [[ $mode == funnel ]]; then timeout 120 "$FR" "$@"; else timeout 120 "$@"; fi
}
# group MODE N LOGPREFIX CMD...: N copies at once behind one barrier; prints their JSON lines
group() {
  local mode=$1 n=$2 log=$3
  shift 3
  local bar pids=() i
  bar=$(mktemp -d /tmp/funnel-libs.XXXXXX)
  for ((i = 0; i < n; i++)); do
    run_as "$mode" "$@" --barrier "$bar" --clients "$n" >"$log.$i.out" 2>"$log.$i.err" &
    pids+=($!)
  done
  local bad=0
  for p in "${pids[@]}"; do wait "$p" || bad=1; done
  rm -rf "$bar"
  cat "$log".*.out
  return $bad
}

for ((r = 1; r <= ROUNDS; r++)); do
  for mode in $MODES; do
    if [[ $mode == mps ]]; then
      [[ -n $MPS_CONTROL ]] && mps_start || { echo "libs.sh: MPS not available: skipped"; continue; }
    fi
    export FUNNEL_JOB_ID=libs-$mode-$r-$$
    d=$OUT_DIR/r$r/$mode
    mkdir -p "$d"
    # 1. driver against runtime (funnel and native only: MPS is not what this compares)
    if [[ $mode != mps ]]; then
      for api in runtime driver; do
        out=$(run_as "$mode" "$KB" issue --api "$api" --launches 20000 2>"$d/issue-$api.err") || failed=1
        emit "$r" "$mode" "issue_us_$api" "$(field "$out" us)" us
        out=$(group "$mode" "$NS_DRV" "$d/small-$api" "$KB" throughput --api "$api" --kernel small --seconds "$SECS") || failed=1
        emit "$r" "$mode" "small_per_s_${api}_n$NS_DRV" "$(field "$out" per_s | awk '{s += $1} END {if (NR) printf "%.1f", s}')" launches/s
        for b in $COPY_BYTES; do
          for dir in h2d d2h; do
            out=$(run_as "$mode" "$KB" copies --api "$api" --bytes "$b" --dir "$dir" --seconds "$SECS" 2>"$d/copy-$api.err") ||
              failed=1
            emit "$r" "$mode" "copy_gbps_${dir}_${b}_$api" "$(field "$out" gbps)" GB/s
          done
        done
      done
    fi
    # 2. cuBLAS SGEMM throughput
    for n in $GEMM_NS; do
      out=$(group "$mode" "$n" "$d/gemm-n$n" "$GB" throughput --n "$GEMM_N" --seconds "$SECS") || failed=1
      grep -q '"ok":false' <<<"$out" && failed=1
      emit "$r" "$mode" "gemm_per_s_n$n" "$(field "$out" per_s | awk '{s += $1} END {if (NR) printf "%.1f", s}')" GEMMs/s
    done
    # 3. start-up of START_N processes that initialise cuBLAS
    t0=$(date +%s.%N)
    pids=()
    for ((i = 0; i < START_N; i++)); do
      run_as "$mode" "$GB" first --n "$GEMM_N" >"$d/first.$i.out" 2>"$d/first.$i.err" &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || failed=1; done
    t1=$(date +%s.%N)
    grep -q '"ok":false' "$d"/first.*.out && failed=1
    emit "$r" "$mode" "start_ms_n$START_N" "$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", (b - a) * 1000}')" ms
    [[ $mode == funnel ]] && timeout 20 "$BUILD_DIR/bin/funnelctl" shutdown >/dev/null 2>&1
    [[ $mode == mps ]] && mps_stop
    echo "round $r $mode done"
  done
done

python3 - "$RESULTS" "$NS_DRV" "$START_N" "$GEMM_NS" "$COPY_BYTES" <<'PY' | tee "$OUT_DIR/table.txt"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ns_drv, start_n = sys.argv[2], sys.argv[3]
gemm_ns, copy_bytes = sys.argv[4].split(), sys.argv[5].split()
med = {}
for r in rows:
    if r["value"] is not None:
        med.setdefault((r["mode"], r["bench"]), []).append(r["value"])
med = {k: statistics.median(v) for k, v in med.items()}
g = lambda m, b: med.get((m, b))
ratio = lambda a, b: "-" if a is None or not b else f"{a / b:.3f}"
fmt = lambda v: "-" if v is None else f"{v:.4g}"
print("funnel's driver path against its runtime path (medians; driver/runtime: 1.0 = the same)")
print(f'{"figure":<28} {"funnel rt":>10} {"funnel drv":>10} {"drv/rt":>7} {"native rt":>10} {"native drv":>10}')
figs = [("issue_us", "launch issue (us)"), (f"small_per_s_{{}}_n{ns_drv}", f"small kernels/s, {ns_drv} clients")]
figs += [(f"copy_gbps_{d}_{b}_{{}}", f"copy {d} {int(b) >> 10} KiB (GB/s)") for b in copy_bytes for d in ("h2d", "d2h")]
for key, label in figs:
    name = (lambda api: f"{key}_{api}") if "{}" not in key else (lambda api: key.format(api))
    fr, fd, nr, nd = g("funnel", name("runtime")), g("funnel", name("driver")), g("native", name("runtime")), g("native", name("driver"))
    print(f"{label:<28} {fmt(fr):>10} {fmt(fd):>10} {ratio(fd, fr):>7} {fmt(nr):>10} {fmt(nd):>10}")
print()
print("cuBLAS (medians): native, MPS, funnel; funnel/MPS (GEMMs/s: higher is better; start-up: lower)")
print(f'{"figure":<28} {"native":>10} {"MPS":>10} {"funnel":>10} {"funnel/MPS":>10} {"funnel/native":>13}')
for b, label in [(f"gemm_per_s_n{n}", f"SGEMM/s, {n} processes") for n in gemm_ns] + [(f"start_ms_n{start_n}", f"start-up of {start_n} (ms)")]:
    nat, mps, fun = g("native", b), g("mps", b), g("funnel", b)
    print(f"{label:<28} {fmt(nat):>10} {fmt(mps):>10} {fmt(fun):>10} {ratio(fun, mps):>10} {ratio(fun, nat):>13}")
PY
exit $failed
