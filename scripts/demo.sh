#!/usr/bin/env bash
# The README's first command: install what is missing, build funnel (Release, build/),
# and show a CUDA program running natively and through funnel.
#   GPU present: build/bin/demo natively, through funnel-run, and 8 copies at once
#                through one funnel-server; prints the outputs and whether they match.
#   no GPU:      runs the demo on the sim backend (host memory stands in for the GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
JOBS=${JOBS:-$(nproc)}

scripts/install-deps.sh

echo "=== building funnel (Release, build/)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFUNNEL_BUILD_TESTS=OFF >/dev/null
cmake --build build -j "$JOBS"

for f in build/bin/funnel-run build/bin/funnel-server build/bin/demo; do
  if [[ ! -x $f ]]; then
    echo "demo: $f was not built (that part of funnel is not finished yet)" >&2
    exit 1
  fi
done

# Each demo run gets a run directory of its own, so it never meets another job's server.
export FUNNEL_JOB_ID="demo-$$"

if nvidia-smi -L >/dev/null 2>&1 && nvidia-smi -L | grep -q '^GPU'; then
  echo "=== GPU: $(nvidia-smi -L | head -1)"
  native=$(build/bin/demo)
  echo "--- native:"
  echo "$native"
  funneled=$(build/bin/funnel-run build/bin/demo)
  echo "--- through funnel (build/bin/funnel-run build/bin/demo):"
  echo "$funneled"
  if [[ "$native" == "$funneled" ]]; then
    echo "=== outputs match"
  else
    echo "=== outputs DIFFER" >&2
    exit 1
  fi

  echo "=== 8 copies at once through one funnel-server"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  pids=()
  for i in 0 1 2 3 4 5 6 7; do
    build/bin/funnel-run build/bin/demo >"$tmp/out.$i" 2>&1 &
    pids+=($!)
  done
  bad=0
  for i in 0 1 2 3 4 5 6 7; do
    if ! wait "${pids[$i]}"; then
      echo "copy $i failed:" >&2
      cat "$tmp/out.$i" >&2
      bad=1
    elif [[ "$(cat "$tmp/out.$i")" != "$native" ]]; then
      echo "copy $i printed something else:" >&2
      cat "$tmp/out.$i" >&2
      bad=1
    fi
  done
  if ((bad)); then
    echo "=== 8 concurrent copies: FAILED" >&2
    exit 1
  fi
  echo "=== 8 concurrent copies: all 8 outputs match the native run"
else
  cat <<'MSG'
=== No GPU is present (nvidia-smi -L lists none).
    funnel builds and runs without one: the sim backend stands host memory in for a GPU,
    so the whole client -> server path can be exercised.  Running:

      FUNNEL_BACKEND=sim build/bin/funnel-run build/bin/demo

MSG
  FUNNEL_BACKEND=sim build/bin/funnel-run build/bin/demo
  cat <<'MSG'

    On the sim backend the server keeps "device" memory in host memory and does the copies,
    memsets, streams and events itself, so the demo's checksums are the same as on a GPU.
    To run the tests (CPU-only; about 10-20 minutes on 2 cores):   sudo scripts/test.sh
    On a machine with a GPU, this script also runs the demo natively and 8 copies at once.
MSG
fi
