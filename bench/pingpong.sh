#!/usr/bin/env bash
# apps/pingpong (two ranks, one GPU): MPI latency and bandwidth of data that lives in device
# memory, 4 B to 64 MiB, in one job on one GPU (issue 32):
#   native-staged  the program stages through pinned host memory (MPI is not CUDA-aware here)
#   native-host    host buffers only: MPI's own floor
#   mps-staged     the same as native-staged under NVIDIA MPS (private pipe/log directory)
#   funnel-device  pingpong_funnel hands its device buffers to MPI; funnel's hooks move them
#                  (staged through pinned host memory: doc/mpi.md, "Device buffers")
#   funnel-local   pingpong_funnel --mode device under FUNNEL_MPI_LOCAL=1: each message one
#                  device-to-device copy in the server's context (GPU-local messages)
#   funnel-staged  pingpong_funnel staging by itself, through funnel
#   bench/pingpong.sh
# Environment: BUILD_DIR (default build-gpu), OUT (default $PWD/bench-out/pingpong), MODES (the
# list above), MAX (largest message, default 67108864), ROUNDS (default 1; the modes interleave).
# Writes OUT/results.jsonl (the app's lines, "mode" the run's) and OUT/table.txt (printed).
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build-gpu}
OUT_DIR=${OUT:-$PWD/bench-out/pingpong}
MODES=${MODES:-native-staged native-host mps-staged funnel-device funnel-local funnel-staged}
MAX=${MAX:-67108864}
ROUNDS=${ROUNDS:-1}
for f in "$BUILD_DIR/bin/pingpong" "$BUILD_DIR/bin/pingpong_funnel"; do
  [[ -x $f ]] || { echo "pingpong.sh: $f not found: build funnel with MPI found (BUILD_DIR=$BUILD_DIR)" >&2; exit 2; }
done
mkdir -p "$OUT_DIR"
RESULTS=$OUT_DIR/results.jsonl
: >"$RESULTS"
# shellcheck source=bench/mps.sh
source "$ROOT/bench/mps.sh"
MPI_ARGS=(--oversubscribe --bind-to none -np 2)
[[ $(id -u) == 0 ]] && MPI_ARGS+=(--allow-run-as-root)
bad=0
for round in $(seq "$ROUNDS"); do
  for mode in $MODES; do
    log=$OUT_DIR/$mode.$round.log
    case $mode in
      native-*) LD_LIBRARY_PATH=/usr/local/cuda/lib64 timeout 300 mpirun "${MPI_ARGS[@]}" -x LD_LIBRARY_PATH \
                  "$BUILD_DIR/bin/pingpong" --mode "${mode#native-}" --max "$MAX" >"$log" 2>&1 ;;
      mps-*)
        if [[ -z $MPS_CONTROL ]] || ! mps_start; then echo "pingpong.sh: MPS did not start: $mode skipped"; continue; fi
        LD_LIBRARY_PATH=/usr/local/cuda/lib64 timeout 300 mpirun "${MPI_ARGS[@]}" -x LD_LIBRARY_PATH \
          -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY "$BUILD_DIR/bin/pingpong" --mode "${mode#mps-}" \
          --max "$MAX" >"$log" 2>&1
        rc=$?
        mps_stop
        (exit $rc) ;;
      funnel-*)
        how=${mode#funnel-} local=0
        [[ $how == local ]] && how=device local=1
        env -u LD_LIBRARY_PATH FUNNEL_JOB_ID="pingpong-$mode-$round-$$" FUNNEL_LOG_DIR="$OUT_DIR/$mode.$round.server" \
          FUNNEL_MPI_LOCAL=$local timeout 300 mpirun "${MPI_ARGS[@]}" -x FUNNEL_JOB_ID -x FUNNEL_LOG_DIR -x FUNNEL_MPI_LOCAL \
          "$BUILD_DIR/bin/pingpong_funnel" --mode "$how" --max "$MAX" >"$log" 2>&1 ;;
      *) echo "pingpong.sh: unknown mode $mode" >&2; exit 2 ;;
    esac
    rc=$?
    if [[ $rc != 0 ]]; then
      echo "pingpong.sh: $mode (round $round) failed with $rc: $log"; tail -3 "$log"; bad=1; continue
    fi
    grep '^{"mode"' "$log" | sed "s/\"mode\":\"[a-z]*\"/\"mode\":\"$mode\",\"round\":$round/" >>"$RESULTS"
  done
done
python3 - "$RESULTS" "$MODES" >"$OUT_DIR/table.txt" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
modes = sys.argv[2].split()
sizes = sorted({r["bytes"] for r in rows})
def cell(mode, size, key):
    v = [r[key] for r in rows if r["mode"] == mode and r["bytes"] == size]
    return statistics.median(v) if v else None
print("bytes      " + "".join(f"{m:>16}" for m in modes) + "   (half round trip, us; GB/s below)")
for s in sizes:
    print(f"{s:<11}" + "".join(f"{cell(m, s, 'half_rtt_us') or float('nan'):>16.2f}" for m in modes))
for s in sizes:
    if s >= 65536:
        print(f"{s:<11}" + "".join(f"{cell(m, s, 'gbps') or float('nan'):>16.3f}" for m in modes))
PY
cat "$OUT_DIR/table.txt"
exit $bad
