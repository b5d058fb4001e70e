#!/usr/bin/env bash
# Issue 7's benchmark run: ONE command on a GPU node runs every benchmark natively (time-sliced
# contexts), under NVIDIA MPS (private pipe/log directory, always quit; skipped with a note when
# nvidia-cuda-mps-control is absent) and through funnel-run, in the same run on the same GPU.
#   bench/run.sh [--quick] [--no-build] [--build-only]
# Steps (each prints its elapsed time; each has a hard time limit, so nothing hangs):
#   build    cmake -S . -B build-gpu (Release, FUNNEL_BUILD_CUDA_PROGRAMS=ON, no tests), as
#            tests/gpu/run.sh does; incremental when build-gpu/ exists (--no-build skips it)
#   kernels  bench/kernels.sh: launch issue cost and launch+sync round trip (one client),
#            aggregate throughput of empty and small kernels at NS clients, start-up and GPU
#            memory of START_NS idle clients
#   membench bench/membench.sh (native, funnel) and membench under MPS: copies pinned/pageable
#            both directions, synchronisation round trips
#   stencil  bench/stencil.sh: apps/stencil ms/step at RANKS ranks under mpirun
#   nbody    apps/nbody: NBODY_NS copies of a compute-bound n-body simulation at once,
#            aggregate steps/s
#   graphs   bench/graphs.sh: apps/graphbench at GRAPH_NS clients, each replaying a captured
#            graph of GRAPH_KERNELS small kernels GRAPH_REPLAYS times; aggregate graphs/s
#   managed  bench/managed.sh: apps/managedbench, one process, over managed, mapped pinned
#            (zero-copy) and device memory; seconds of MANAGED_ELEMS floats, MANAGED_ITERS
#            kernels, median of MANAGED_ROUNDS runs (no target: reported figures)
# Each benchmark runs REPS times (repetition r: every mode, then the next repetition).
# --quick: REPS=1, NS="1 4 16 32", START_NS=16, RANKS="1 16", NBODY_NS="1 4 16", shorter
#          windows (GRAPH_NS stays "1 16", the issue's case): about 5 minutes on an H100 after
#          the build (the full run: about 25).
# Environment (defaults: full / --quick):
#   OUT          output directory (default $PWD/bench-out)
#   REPS         repetitions (3 / 1)          MODES     default "native mps funnel"; funnel-wK,
#                funnel-bN, funnel-cN, funnel-sN, funnel-iN, funnel-yN (bench/modes.sh: funnel with one server
#                setting changed) run in kernels and stencil only
#   NS           "1 2 4 8 16 32 48 64 128" / "1 4 16 32"   (kernel throughput clients)
#   START_NS     "1 16 32 48" / "16"           (start-up and idle GPU memory)
#   RANKS        "1 2 4 8 16" / "1 16"         (stencil ranks; STENCIL_MODES adds "hooks")
#   NBODY_NS     "1 2 4 8 16" / "1 4 16"       (nbody copies; NBODY_BODIES 16384)
#   GRAPH_NS     "1 16" / "1 16"               (graph replay clients; GRAPH_KERNELS 100,
#                GRAPH_REPLAYS 1000 per client)
#   MANAGED_ELEMS 16777216 (64 MiB)  MANAGED_ITERS 20  MANAGED_SAMPLE_EVERY 5  MANAGED_ROUNDS 3
#   SECONDS_PER_RUN 1.5 / 1.0 (throughput window)   NBODY_SECONDS 2 / 1.5
#   STEPS, WARMUP  stencil steps 200 / 100, warm-up 20 / 10 (grid N^3, N default 256)
#   MEMBENCH_ARGS  "--reps 20" / "--reps 5 --max-bytes 67108864 --sync-iters 3000"
#   MPS_MAX_CLIENTS 48 (larger N are not run under MPS, recorded with a note)
#   NATIVE_MAX_N  64 (larger N are not run natively: 128 contexts would not fit in time)
#   BENCHES      which steps, default "kernels membench stencil nbody graphs managed"
#   T_KERNELS, T_MEMBENCH, T_STENCIL, T_NBODY, T_GRAPHS, T_MANAGED  hard limit (s) per step
#                and repetition (quick 300/150/200/150/150/200, full 900/400/600/400/300/300)
#   BUNDLE       a folder that gets only OUT's essentials, kept current after every step:
#                results.json, table.txt and bench-out.tgz (all of OUT), at the end also
#                throughput.png and stencil.png; for machines that return few files (the lent
#                GPU machine: BUNDLE=$OUT OUT=/tmp/bench-out)
#   BUILD_DIR    default build-gpu; JOBS build parallelism (default nproc); BUILD_ALL=1 builds
#                every target (default: only funnel and the benchmarks' programs)
# Writes OUT/results.json (every figure: benchmark, mode, N, values of every repetition,
# median, min, max, unit; the GPU, driver, CUDA version, date, host and commit), OUT/table.txt
# (ratios funnel/native and funnel/MPS, and the issue's targets with PASS/MISS; printed last),
# OUT/*.png (plots, where python3-matplotlib is installed; else render them elsewhere with
# `bench/report.py OUT/results.json`), and each step's logs under OUT/<step>/.
set -u -o pipefail

usage() { sed -n '2,56p' "$0" | sed 's/^# \{0,1\}//'; }
QUICK=0
DO_BUILD=1
BUILD_ONLY=0
for a in "$@"; do
  case "$a" in
    --quick) QUICK=1 ;;
    --no-build) DO_BUILD=0 ;;
    --build-only) BUILD_ONLY=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "bench/run.sh: unknown argument '$a'" >&2; usage >&2; exit 2 ;;
  esac
done

OUT_DIR=${OUT:-$PWD/bench-out}
mkdir -p "$OUT_DIR" || exit 2
OUT_DIR=$(cd "$OUT_DIR" && pwd)
if [[ -n ${BUNDLE:-} ]]; then
  mkdir -p "$BUNDLE" || exit 2
  BUNDLE=$(cd "$BUNDLE" && pwd)
  [[ $BUNDLE/ == "$OUT_DIR"/* || $OUT_DIR/ == "$BUNDLE"/* ]] &&
    { echo "bench/run.sh: BUNDLE ($BUNDLE) and OUT ($OUT_DIR) must be apart (neither inside the other)" >&2; exit 2; }
fi
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/modes.sh
source "$ROOT/bench/modes.sh"
cd "$ROOT" || exit 2
export PATH=/usr/local/cuda/bin:$PATH
BUILD_DIR=${BUILD_DIR:-$ROOT/build-gpu}
BIN=$BUILD_DIR/bin
JOBS=${JOBS:-$(nproc)}

if [[ $QUICK == 1 ]]; then
  REPS=${REPS:-1}
  NS=${NS:-1 4 16 32}
  START_NS=${START_NS:-16}
  RANKS=${RANKS:-1 16}
  NBODY_NS=${NBODY_NS:-1 4 16}
  SECONDS_PER_RUN=${SECONDS_PER_RUN:-1.0}
  NBODY_SECONDS=${NBODY_SECONDS:-1.5}
  STEPS=${STEPS:-100}
  WARMUP=${WARMUP:-10}
  MEMBENCH_ARGS=${MEMBENCH_ARGS:---reps 5 --max-bytes 67108864 --sync-iters 3000}
  # hard limits per step and repetition (seconds); the expected times are far below them
  T_KERNELS=${T_KERNELS:-300} T_MEMBENCH=${T_MEMBENCH:-150} T_STENCIL=${T_STENCIL:-200} T_NBODY=${T_NBODY:-150}
  T_GRAPHS=${T_GRAPHS:-150} T_MANAGED=${T_MANAGED:-200}
else
  REPS=${REPS:-3}
  NS=${NS:-1 2 4 8 16 32 48 64 128}
  START_NS=${START_NS:-1 16 32 48}
  RANKS=${RANKS:-1 2 4 8 16}
  NBODY_NS=${NBODY_NS:-1 2 4 8 16}
  SECONDS_PER_RUN=${SECONDS_PER_RUN:-1.5}
  NBODY_SECONDS=${NBODY_SECONDS:-2}
  STEPS=${STEPS:-200}
  WARMUP=${WARMUP:-20}
  MEMBENCH_ARGS=${MEMBENCH_ARGS:---reps 20}
  T_KERNELS=${T_KERNELS:-900} T_MEMBENCH=${T_MEMBENCH:-400} T_STENCIL=${T_STENCIL:-600} T_NBODY=${T_NBODY:-400}
  T_GRAPHS=${T_GRAPHS:-300} T_MANAGED=${T_MANAGED:-300}
fi
MODES=${MODES:-native mps funnel}
STENCIL_MODES=${STENCIL_MODES:-$MODES}
BENCHES=${BENCHES:-kernels membench stencil nbody graphs managed}
MPS_MAX_CLIENTS=${MPS_MAX_CLIENTS:-48}
NATIVE_MAX_N=${NATIVE_MAX_N:-64}
NBODY_BODIES=${NBODY_BODIES:-16384}
GRAPH_NS=${GRAPH_NS:-1 16}
GRAPH_KERNELS=${GRAPH_KERNELS:-100}
GRAPH_REPLAYS=${GRAPH_REPLAYS:-1000}
MANAGED_ELEMS=${MANAGED_ELEMS:-16777216}
MANAGED_ITERS=${MANAGED_ITERS:-20}
MANAGED_SAMPLE_EVERY=${MANAGED_SAMPLE_EVERY:-5}
MANAGED_ROUNDS=${MANAGED_ROUNDS:-3}
export MPS_MAX_CLIENTS NATIVE_MAX_N
[[ $REPS =~ ^[1-9][0-9]*$ ]] || { echo "bench/run.sh: REPS must be a positive integer, not '$REPS'" >&2; exit 2; }
for v in NS START_NS RANKS NBODY_NS GRAPH_NS; do
  [[ ${!v} =~ ^[[:space:]]*[1-9][0-9]*([[:space:]]+[1-9][0-9]*)*[[:space:]]*$ ]] ||
    { echo "bench/run.sh: $v must be a list of positive integers, not '${!v}'" >&2; exit 2; }
done
for v in MANAGED_ELEMS MANAGED_ITERS MANAGED_SAMPLE_EVERY MANAGED_ROUNDS; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "bench/run.sh: $v must be a positive integer, not '${!v}'" >&2; exit 2; }
done
for b in $BENCHES; do
  case $b in kernels | membench | stencil | nbody | graphs | managed) ;; *) echo "bench/run.sh: unknown benchmark '$b' in BENCHES" >&2; exit 2 ;; esac
done
for m in $MODES $STENCIL_MODES; do
  case $m in native | mps | funnel | hooks | threads) ;;
    *)
      funnel_variant_env "$m" >/dev/null
      case $? in 0) ;; 1) echo "bench/run.sh: unknown mode '$m'" >&2; exit 2 ;; *) exit 2 ;; esac ;;
  esac
done

# MPS: bench/mps.sh's helpers.  Every daemon of this run lives under MPS_TMPDIR, so that the
# exit trap can quit one left behind by a step that hit its time limit.
export MPS_TMPDIR=/tmp/funnel-bench-mps.$$
# shellcheck source=bench/mps.sh
source "$ROOT/bench/mps.sh"
# sweep_mps: quits an MPS daemon that a killed step left behind
sweep_mps() {
  local d
  for d in "$MPS_TMPDIR"/funnel-mps.*; do
    [[ -d $d/pipe && $d != "$MPS_DIR" ]] || continue
    echo "bench/run.sh: quitting an MPS daemon left by a step ($d)"
    echo quit | CUDA_MPS_PIPE_DIRECTORY=$d/pipe timeout 20 "$MPS_CONTROL" >/dev/null 2>&1
    rm -rf "$d"
  done
}
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  mps_stop
  sweep_mps
  rm -rf "$MPS_TMPDIR"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
HAVE_MPS=1
if [[ -z $MPS_CONTROL ]]; then
  HAVE_MPS=0
  echo "nvidia-cuda-mps-control not found (PATH, /usr/local/nvidia/bin, /usr/bin): MPS skipped" |
    tee "$OUT_DIR/mps-skipped.txt"
fi
has_mode() { [[ " $MODES " == *" $1 "* ]]; }

T_ALL=$SECONDS
STEPS_TSV=$OUT_DIR/steps.tsv
: >"$STEPS_TSV"
# step_done NAME T0 RC NOTE: one line per step in steps.tsv and on stdout
step_done() {
  local secs=$((SECONDS - $2))
  printf '%s\t%s\t%s\t%s\n' "$1" "$secs" "$3" "${4:-}" >>"$STEPS_TSV"
  printf '=== %-22s %4d s (rc %s)%s   [total %d s]\n' "$1" "$secs" "$3" "${4:+ $4}" $((SECONDS - T_ALL))
}

# ---- environment -----------------------------------------------------------------------
{
  date -u
  uname -a
  nvidia-smi 2>&1
  nvcc --version 2>&1
  git log -1 --oneline 2>&1
  git status --short 2>&1
} >"$OUT_DIR/env.txt"
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "bench/run.sh: no GPU visible (nvidia-smi -L failed); see $OUT_DIR/env.txt" >&2
  exit 1
fi
gpu_q() { nvidia-smi --query-gpu="$1" --format=csv,noheader -i 0 2>/dev/null | head -1; }
# every value goes to python as an argument (no quoting trouble); numbers stay numbers
python3 - "$OUT_DIR/env.json" \
  gpu="$(gpu_q name)" gpu_memory="$(gpu_q memory.total)" driver="$(gpu_q driver_version)" \
  cuda_driver="$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -1)" \
  cuda_toolkit="$(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')" \
  date="$(date -u +%FT%TZ)" hostname="$(hostname 2>/dev/null || cat /proc/sys/kernel/hostname)" cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)" \
  cores="$(nproc)" commit="$(git rev-parse HEAD 2>/dev/null)" commit_subject="$(git log -1 --format=%s 2>/dev/null)" \
  dirty_files="$(git status --porcelain 2>/dev/null | grep -vc '^??')" quick="$QUICK" reps="$REPS" \
  mps="$([[ $HAVE_MPS == 1 ]] && echo "$MPS_CONTROL" || echo "absent: skipped")" \
  modes="$MODES" stencil_modes="$STENCIL_MODES" ns="$NS" start_ns="$START_NS" ranks="$RANKS" \
  nbody_ns="$NBODY_NS" nbody_bodies="$NBODY_BODIES" graph_ns="$GRAPH_NS" graph_kernels="$GRAPH_KERNELS" \
  graph_replays="$GRAPH_REPLAYS" managed_elems="$MANAGED_ELEMS" managed_iters="$MANAGED_ITERS" \
  managed_sample_every="$MANAGED_SAMPLE_EVERY" managed_rounds="$MANAGED_ROUNDS" seconds_per_run="$SECONDS_PER_RUN" \
  nbody_seconds="$NBODY_SECONDS" stencil_steps="$STEPS" stencil_warmup="$WARMUP" stencil_n="${N:-256}" \
  membench_args="$MEMBENCH_ARGS" mps_max_clients="$MPS_MAX_CLIENTS" native_max_n="$NATIVE_MAX_N" <<'PY'
import json, sys
env = {}
for kv in sys.argv[2:]:
    k, _, v = kv.partition("=")
    v = v.strip()
    if k in ("cores", "dirty_files", "reps", "nbody_bodies", "stencil_steps", "stencil_warmup", "stencil_n",
             "mps_max_clients", "native_max_n", "graph_kernels", "graph_replays", "managed_elems", "managed_iters",
             "managed_sample_every", "managed_rounds"):
        try:
            v = int(v)
        except ValueError:
            pass
    env[k] = v
env["quick"] = env.get("quick") == "1"
json.dump(env, open(sys.argv[1], "w"), indent=1)
PY
echo "=== GPU: $(gpu_q name), driver $(gpu_q driver_version); $([[ $QUICK == 1 ]] && echo quick || echo full) run, REPS=$REPS; output in $OUT_DIR"

# ---- build -----------------------------------------------------------------------------
if [[ $DO_BUILD == 1 ]]; then
  t0=$SECONDS
  mkdir -p "$OUT_DIR/build"
  # Only what the benchmarks run (the 34 compatibility programs would take minutes with nvcc);
  # BUILD_ALL=1 builds everything, as tests/gpu/run.sh does.
  targets=()
  if [[ ${BUILD_ALL:-0} != 1 ]]; then
    targets=(--target funnel-server funnel-run funnel_client funnelctl funnel_driver kernelbench graphbench managedbench membench nbody gemmbench)
  fi
  if cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFUNNEL_BUILD_CUDA_PROGRAMS=ON \
    -DFUNNEL_BUILD_TESTS=OFF >"$OUT_DIR/build/configure.log" 2>&1 &&
    cmake --build "$BUILD_DIR" -j "$JOBS" "${targets[@]}" -- -k 0 >"$OUT_DIR/build/build.log" 2>&1; then
    # apps/stencil exists only where CMake found MPI
    if [[ ${#targets[@]} -gt 0 ]]; then
      # (the list in a variable: `ninja | grep -q` under pipefail fails when grep stops
      # reading early and ninja gets SIGPIPE, and stencil was then skipped)
      all_targets=$(ninja -C "$BUILD_DIR" -t targets all 2>/dev/null)
      for t in stencil stencil_funnel pingpong pingpong_funnel; do
        if grep -q "^$t: " <<<"$all_targets"; then
          cmake --build "$BUILD_DIR" -j "$JOBS" --target "$t" >>"$OUT_DIR/build/build.log" 2>&1 ||
            echo "bench/run.sh: $t did not build (build/build.log)"
        fi
      done
    fi
    step_done build "$t0" 0
  else
    step_done build "$t0" 1 "see build/build.log (continuing with what was built)"
    grep -E '^FAILED|error:' "$OUT_DIR/build/build.log" | head -20
  fi
fi
[[ $BUILD_ONLY == 1 ]] && exit 0
for f in funnel-server funnel-run; do
  [[ -x $BIN/$f ]] || { echo "bench/run.sh: $BIN/$f not built: nothing to compare" >&2; exit 1; }
done
export BUILD_DIR FUNNEL_BACKEND=cuda
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# bench_modes LIST ALLOWED: the modes of LIST that the step knows (ALLOWED), without mps when
# MPS is absent
bench_modes() {
  local m out=""
  for m in $1; do
    [[ $m == mps && $HAVE_MPS == 0 ]] && continue
    # "funnel-w*" in the list admits every variant mode (bench/modes.sh)
    [[ " $2 " == *" $m "* || (" $2 " == *" funnel-w* "* && $(funnel_variant_env "$m" 2>/dev/null) != "") ]] || continue
    out="$out $m"
  done
  echo "${out:- }"  # never empty: the step scripts take an empty MODES for their defaults
}

# ---- kernels ---------------------------------------------------------------------------
run_kernels() {
  [[ -x $BIN/kernelbench ]] || { step_done kernels "$SECONDS" 2 "SKIPPED: $BIN/kernelbench not built"; return; }
  local r t0 rc
  for ((r = 1; r <= REPS; r++)); do
    t0=$SECONDS
    mkdir -p "$OUT_DIR/kernels/rep$r"
    OUT=$OUT_DIR/kernels/rep$r MODES="$(bench_modes "$MODES" "native mps funnel threads funnel-w*")" NS=$NS START_NS=$START_NS \
      SECONDS_PER_RUN=$SECONDS_PER_RUN MAX_N_FUNNEL=0 \
      timeout -k 20 "$T_KERNELS" bench/kernels.sh >"$OUT_DIR/kernels/rep$r.log" 2>&1
    rc=$?
    step_done "kernels rep $r/$REPS" "$t0" "$rc" "$([[ $rc == 124 ]] && echo "TIME LIMIT ${T_KERNELS}s")"
  done
}

# ---- membench (native and funnel by membench.sh; MPS here) ------------------------------
run_membench() {
  [[ -x $BIN/membench ]] || { step_done membench "$SECONDS" 2 "SKIPPED: $BIN/membench not built"; return; }
  local r t0 rc d args
  read -r -a args <<<"$MEMBENCH_ARGS"
  for ((r = 1; r <= REPS; r++)); do
    t0=$SECONDS
    d=$OUT_DIR/membench/rep$r
    mkdir -p "$d"
    rc=0
    if has_mode native || has_mode funnel; then
      OUT=$d ROUNDS=1 TIMEOUT=$((T_MEMBENCH / 3)) timeout -k 20 "$T_MEMBENCH" \
        bench/membench.sh "${args[@]}" >"$d/membench.log" 2>&1 || rc=$?
    fi
    if has_mode mps && [[ $HAVE_MPS == 1 ]]; then
      if OUT_DIR=$d mps_start; then
        timeout -k 10 $((T_MEMBENCH / 3)) "$BIN/membench" "${args[@]}" >"$d/mps.log" 2>&1 || rc=$?
        grep '^{' "$d/mps.log" >"$d/mps.jsonl"
        OUT_DIR=$d mps_stop
      else
        echo "MPS did not start: membench under MPS skipped" | tee "$d/mps-skipped.txt"
      fi
    fi
    step_done "membench rep $r/$REPS" "$t0" "$rc"
  done
}

# ---- stencil ---------------------------------------------------------------------------
run_stencil() {
  [[ -x $BIN/stencil ]] || { step_done stencil "$SECONDS" 2 "SKIPPED: $BIN/stencil not built (MPI not found?)"; return; }
  command -v "${MPIRUN:-mpirun}" >/dev/null || { step_done stencil "$SECONDS" 2 "SKIPPED: ${MPIRUN:-mpirun} not found"; return; }
  local r t0 rc
  for ((r = 1; r <= REPS; r++)); do
    t0=$SECONDS
    mkdir -p "$OUT_DIR/stencil/rep$r"
    OUT=$OUT_DIR/stencil/rep$r MODES="$(bench_modes "$STENCIL_MODES" "native mps funnel hooks funnel-w*")" RANKS=$RANKS STEPS=$STEPS WARMUP=$WARMUP \
      timeout -k 20 "$T_STENCIL" bench/stencil.sh >"$OUT_DIR/stencil/rep$r.log" 2>&1
    rc=$?
    step_done "stencil rep $r/$REPS" "$t0" "$rc" "$([[ $rc == 124 ]] && echo "TIME LIMIT ${T_STENCIL}s")"
  done
}

# ---- nbody: N copies at once, aggregate steps/s (bench/nbody.sh) -------------------------
run_nbody() {
  [[ -x $BIN/nbody ]] || { step_done nbody "$SECONDS" 2 "SKIPPED: $BIN/nbody not built"; return; }
  local r t0 rc
  for ((r = 1; r <= REPS; r++)); do
    t0=$SECONDS
    mkdir -p "$OUT_DIR/nbody/rep$r"
    OUT=$OUT_DIR/nbody/rep$r MODES="$(bench_modes "$MODES" "native mps funnel")" NS=$NBODY_NS SECONDS_PER_RUN=$NBODY_SECONDS \
      BODIES=$NBODY_BODIES timeout -k 20 "$T_NBODY" bench/nbody.sh >"$OUT_DIR/nbody/rep$r.log" 2>&1
    rc=$?
    step_done "nbody rep $r/$REPS" "$t0" "$rc" "$([[ $rc == 124 ]] && echo "TIME LIMIT ${T_NBODY}s")"
  done
}

# ---- graphs: N clients replaying a captured graph, aggregate graphs/s (bench/graphs.sh) ----
run_graphs() {
  [[ -x $BIN/graphbench ]] || { step_done graphs "$SECONDS" 2 "SKIPPED: $BIN/graphbench not built"; return; }
  local r t0 rc
  for ((r = 1; r <= REPS; r++)); do
    t0=$SECONDS
    mkdir -p "$OUT_DIR/graphs/rep$r"
    OUT=$OUT_DIR/graphs/rep$r MODES="$(bench_modes "$MODES" "native mps funnel funnel-w*")" NS=$GRAPH_NS \
      KERNELS=$GRAPH_KERNELS REPLAYS=$GRAPH_REPLAYS timeout -k 20 "$T_GRAPHS" bench/graphs.sh >"$OUT_DIR/graphs/rep$r.log" 2>&1
    rc=$?
    step_done "graphs rep $r/$REPS" "$t0" "$rc" "$([[ $rc == 124 ]] && echo "TIME LIMIT ${T_GRAPHS}s")"
  done
}

# ---- managed: a managed-memory program over managed, mapped and device memory (bench/managed.sh) ----
run_managed() {
  [[ -x $BIN/managedbench ]] || { step_done managed "$SECONDS" 2 "SKIPPED: $BIN/managedbench not built"; return; }
  local r t0 rc
  for ((r = 1; r <= REPS; r++)); do
    t0=$SECONDS
    mkdir -p "$OUT_DIR/managed/rep$r"
    OUT=$OUT_DIR/managed/rep$r MODES="$(bench_modes "$MODES" "native mps funnel funnel-w*")" ELEMS=$MANAGED_ELEMS \
      ITERS=$MANAGED_ITERS SAMPLE_EVERY=$MANAGED_SAMPLE_EVERY ROUNDS=$MANAGED_ROUNDS \
      timeout -k 20 "$T_MANAGED" bench/managed.sh >"$OUT_DIR/managed/rep$r.log" 2>&1
    rc=$?
    step_done "managed rep $r/$REPS" "$t0" "$rc" "$([[ $rc == 124 ]] && echo "TIME LIMIT ${T_MANAGED}s")"
  done
}

# snapshot: results.json and table.txt of what has run so far, and BUNDLE brought up to date,
# so that a run cut short still leaves its figures
snapshot() {
  python3 bench/collect.py "$OUT_DIR" >"$OUT_DIR/collect.log" 2>&1
  python3 bench/report.py "$OUT_DIR/results.json" --no-plots >/dev/null 2>&1
  [[ -n ${BUNDLE:-} ]] || return 0
  mkdir -p "$BUNDLE"
  cp "$OUT_DIR/results.json" "$OUT_DIR/table.txt" "$BUNDLE/" 2>/dev/null
  tar -czf "$BUNDLE/bench-out.tgz.tmp" -C "$(dirname "$OUT_DIR")" "$(basename "$OUT_DIR")" 2>/dev/null &&
    mv -f "$BUNDLE/bench-out.tgz.tmp" "$BUNDLE/bench-out.tgz"
}

for b in $BENCHES; do
  t_step=$SECONDS
  case $b in
    kernels) run_kernels ;;
    membench) run_membench ;;
    stencil) run_stencil ;;
    nbody) run_nbody ;;
    graphs) run_graphs ;;
    managed) run_managed ;;
  esac
  sweep_mps
  snapshot
  echo "=== $b: $((SECONDS - t_step)) s"
done

# ---- results.json, table, plots --------------------------------------------------------
t0=$SECONDS
python3 bench/collect.py "$OUT_DIR" >"$OUT_DIR/collect.log" 2>&1
rc=$?
step_done collect "$t0" "$rc" "$(tail -1 "$OUT_DIR/collect.log")"
echo "=== all steps: $((SECONDS - T_ALL)) s; per step in $OUT_DIR/steps.tsv"
python3 bench/report.py "$OUT_DIR/results.json" >"$OUT_DIR/report.log" 2>&1 || rc=1
if [[ -n ${BUNDLE:-} ]]; then
  cp "$OUT_DIR/results.json" "$OUT_DIR/table.txt" "$BUNDLE/" 2>/dev/null
  # the issue's two plots beside them (all plots are in the archive): 5 files in all
  cp "$OUT_DIR/throughput.png" "$OUT_DIR/stencil.png" "$BUNDLE/" 2>/dev/null
  tar -czf "$BUNDLE/bench-out.tgz" -C "$(dirname "$OUT_DIR")" "$(basename "$OUT_DIR")"
  echo "=== BUNDLE $BUNDLE: $(cd "$BUNDLE" && echo *)"
fi
# the table, printed last
cat "$OUT_DIR/table.txt"
exit $rc
