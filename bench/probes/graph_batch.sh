#!/usr/bin/env bash
# Runs bench/probes/graph_batch.cu over threads, kernels, modes and batch sizes (one GPU node).
#   bench/probes/graph_batch.sh [OUT_FILE]    (default graph_batch.jsonl)
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUTF=${1:-graph_batch.jsonl}
export PATH=/usr/local/cuda/bin:$PATH
BIN=$(mktemp -d)/graph_batch
nvcc -arch=sm_90 -O2 -std=c++17 -I "$ROOT/apps/common" -o "$BIN" "$ROOT/bench/probes/graph_batch.cu" || exit 2
: >"$OUTF"
for conn in ${CONNS:-8 32}; do
  for kernel in small empty; do
    for t in ${THREADS:-1 8 16}; do
      for m in ${MODES:-launch:1 graph:8 graph:32 graph-same:8 graph-same:32}; do
        mode=${m%%:*} batch=${m#*:}
        r=$(CUDA_DEVICE_MAX_CONNECTIONS=$conn timeout 60 "$BIN" --mode "$mode" --batch "$batch" --threads "$t" \
          --kernel "$kernel" --seconds "${SECONDS_PER_RUN:-1}")
        echo "{\"connections\":$conn,${r#\{}" | tee -a "$OUTF"
      done
    done
  done
done
