#!/usr/bin/env bash
# The README's first command: install what is missing, build funnel (Release, build/),
# and show an MPI + CUDA job running natively and through funnel.
#   GPU present: apps/stencil under mpirun with DEMO_RANKS (16) ranks on the GPU: natively
#                (time-sliced contexts), linked with funnel::mpi (the job starts and stops
#                its funnel-server) and through funnel-run; ms/step and checksums side by side.
#   no GPU:      runs build/bin/demo on the sim backend (host memory stands in for the GPU).
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
  for f in build/bin/stencil build/bin/stencil_funnel; do
    [[ -x $f ]] || { echo "demo: $f was not built (MPI not found?)" >&2; exit 1; }
  done
  # apps/stencil: a 3-D heat equation on a fixed 256^3 grid split over DEMO_RANKS ranks on
  # this one GPU (the strong-scaling case: at 16 ranks every kernel is small).
  NP=${DEMO_RANKS:-16}
  MPI=(mpirun --oversubscribe --bind-to none)
  [[ $(id -u) == 0 ]] && MPI+=(--allow-run-as-root)
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  ARGS=(--n 256 --steps 200 --warmup 20 --reference "$tmp/reference.txt")
  # The native runs use NVIDIA's libcudart; the linked app finds funnel's through its rpath,
  # which LD_LIBRARY_PATH would override, so it runs without it.
  cuda_lib=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  declare -A ms ok
  run() {  # label, then the command after "mpirun -np N"
    local label=$1 np=$2
    shift 2
    echo "--- $label: mpirun -np $np $*"
    local out
    out=$("$@" 2>&1 | tee /dev/stderr | grep '^{"ranks"' || true)
    ms[$label]=$(sed -n 's/.*"ms_per_step":\([0-9.]*\).*/\1/p' <<<"$out")
    ok[$label]=$(sed -n 's/.*"reference":"\([a-z ]*\)".*/\1/p' <<<"$out")
  }
  echo "=== the reference: 1 rank natively"
  run reference 1 env LD_LIBRARY_PATH="$cuda_lib" "${MPI[@]}" -np 1 build/bin/stencil "${ARGS[@]}"
  echo "=== $NP ranks natively: each rank its own CUDA context, time-sliced by the GPU"
  run native "$NP" env LD_LIBRARY_PATH="$cuda_lib" "${MPI[@]}" -np "$NP" build/bin/stencil "${ARGS[@]}"
  echo "=== $NP ranks through funnel: the app linked with funnel::mpi; MPI_Init starts one funnel-server"
  run funnel "$NP" env -u LD_LIBRARY_PATH "${MPI[@]}" -np "$NP" build/bin/stencil_funnel "${ARGS[@]}"
  echo "=== $NP ranks through funnel-run: the unmodified app"
  run funnel-run "$NP" env LD_LIBRARY_PATH="$cuda_lib" "${MPI[@]}" -np "$NP" build/bin/funnel-run build/bin/stencil "${ARGS[@]}"
  echo
  printf '%-12s %12s  %s\n' mode ms/step "checksum vs 1 rank"
  bad=0
  for m in native funnel funnel-run; do
    printf '%-12s %12s  %s\n' "$m" "${ms[$m]:-?}" "${ok[$m]:-no result}"
    [[ ${ok[$m]:-} == match ]] || bad=1
  done
  if ((bad)); then
    echo "=== a run failed or its checksum differs" >&2
    exit 1
  fi
  echo "=== every run matches the 1-rank checksum (bench/stencil.sh adds NVIDIA MPS and 1-16 ranks)"
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
    To run the tests (CPU-only; 20-30 minutes on a fresh 2-core machine as CI measures it):   sudo scripts/test.sh
    On a machine with a GPU, this script runs apps/stencil under mpirun natively and through funnel.
MSG
fi
