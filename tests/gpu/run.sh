#!/usr/bin/env bash
# The GPU test run: ONE command on a machine with an NVIDIA GPU (H100, sm_90).
#   tests/gpu/run.sh [--quick]
# 1. configures + builds funnel (Release, ninja, build-gpu/, FUNNEL_BUILD_CUDA_PROGRAMS=ON)
# 2. builds and runs the cuda backend smoke test (tests/gpu/backend_smoke.cpp, no server)
# 3. compiles every tests/programs/*.cu (nvcc -arch=sm_90 -cudart shared -O2); with apps/demo
#    runs each natively and through funnel-run (cuda backend), diffs stdout and exit codes
# 4. runs 8 programs at once through ONE funnel-server and checks each against native
# 4b. tests/gpu/compat.sh: the compatibility programs (tests/programs/compat), the same way
# 4c. tests/gpu/mpi.sh: memory limit, the linked MPI app under mpirun, GPU fraction (issue 4)
# 4d. tests/gpu/placement.sh: the server's threads on the planned cores, away from bound ranks
# 4e. tests/gpu/many.sh: 128 clients attached at once, each runs a kernel; client 129 refused
# 4f. tests/gpu/reliability.sh: GPU busy time against event time; the kill storm on the GPU; the
#     soak (SOAK_SECONDS, default 300, with --quick too; 0 leaves it out)
# 4g. tests/gpu/libs.sh: tests/programs/libs (cuBLAS ... cuDNN, NVRTC, driver-API, static runtime,
#     PyTorch) natively and through funnel's client driver; no client opens the GPU itself
# 5. (not with --quick) bench/membench.sh: membench natively and through funnel, ratio table
# Logs: "${OUT:-$PWD/gpu-out}"/<step>/<file>.  Summary table last; exit 1 if anything failed.
# Environment: JOBS (build parallelism), TIMEOUT (seconds per program run, default 120),
#   NVCC_FLAGS (extra nvcc flags), FUNNEL_RUN_OPTS (replace the funnel-run options).
set -u -o pipefail

usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; }
QUICK=0
for a in "$@"; do
  case "$a" in
    --quick) QUICK=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "run.sh: unknown argument '$a'" >&2; usage >&2; exit 2 ;;
  esac
done

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 2
OUT_DIR=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT_DIR" || exit 2
OUT_DIR=$(cd "$OUT_DIR" && pwd)
mkdir -p "$OUT_DIR"/{build,smoke,native,funnel,concurrent,bench,server-logs}
export PATH=/usr/local/cuda/bin:$PATH
CUDA_LIB=/usr/local/cuda/lib64
JOBS=${JOBS:-$(nproc)}
TIMEOUT=${TIMEOUT:-120}
BUILD=$ROOT/build-gpu
BIN=$BUILD/bin
PROGDIR=$BUILD/gpu-programs

SUMMARY=()  # "step|name|result|detail"
FAILED=0
note() { printf '=== %s\n' "$*"; }
result() {  # step name PASS|FAIL|SKIP detail
  SUMMARY+=("$1|$2|$3|$4")
  [[ $3 == FAIL ]] && FAILED=1
  printf '%-10s %-28s %-4s %s\n' "$1" "$2" "$3" "$4"
}
summary() {
  {
    echo
    echo "================ GPU test summary ($(date -u +%FT%TZ)) ================"
    printf '%-10s %-28s %-4s %s\n' STEP NAME RES DETAIL
    for row in "${SUMMARY[@]}"; do
      IFS='|' read -r s n r d <<<"$row"
      printf '%-10s %-28s %-4s %s\n' "$s" "$n" "$r" "$d"
    done
    local pass fail skip
    pass=$(printf '%s\n' "${SUMMARY[@]}" | grep -c '|PASS|')
    fail=$(printf '%s\n' "${SUMMARY[@]}" | grep -c '|FAIL|')
    skip=$(printf '%s\n' "${SUMMARY[@]}" | grep -c '|SKIP|')
    echo "passed $pass, failed $fail, skipped $skip; logs in $OUT_DIR"
    [[ $FAILED == 0 ]] && echo "RESULT: PASS" || echo "RESULT: FAIL"
  } | tee "$OUT_DIR/summary.txt"
}

# ---- environment ---------------------------------------------------------------------
{
  date -u
  uname -a
  nvidia-smi 2>&1
  nvcc --version 2>&1
  git -C "$ROOT" log -1 --oneline 2>&1
} >"$OUT_DIR/env.txt"
if ! nvidia-smi -L >/dev/null 2>&1; then
  result env nvidia-smi FAIL "no GPU visible (nvidia-smi failed); see env.txt"
  summary
  exit 1
fi
note "GPU: $(nvidia-smi -L | head -1)"

# ---- 1. build ------------------------------------------------------------------------
note "configure + build (Release, $BUILD)"
if cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFUNNEL_BUILD_CUDA_PROGRAMS=ON \
  -DFUNNEL_BUILD_TESTS=OFF >"$OUT_DIR/build/configure.log" 2>&1 &&
  cmake --build "$BUILD" -j "$JOBS" -- -k 0 >"$OUT_DIR/build/build.log" 2>&1; then
  result build funnel PASS "build-gpu/"
else
  result build funnel FAIL "see build/configure.log, build/build.log"
  grep -E '^FAILED|error:' "$OUT_DIR/build/build.log" | head -20
fi
for f in funnel-server funnel-run; do
  [[ -x $BIN/$f ]] || result build "$f" FAIL "$BIN/$f was not built"
done
HAVE_FUNNEL=0
[[ -x $BIN/funnel-server && -x $BIN/funnel-run ]] && HAVE_FUNNEL=1

# ---- 2. backend smoke test (the cuda backend alone) ----------------------------------
note "cuda backend smoke test"
# -Wno-error=...: the warnings the project's build does not make errors either
# (cmake/FunnelWarnings.cmake): GCC's false positives in the fmt headers.
if nvcc -fatbin -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=[sm_80,compute_80] \
  -Itests/fatbin -o "$BUILD/smoke_kernels.fatbin" tests/fatbin/kernels.cu >"$OUT_DIR/smoke/compile.log" 2>&1 &&
  g++ -std=c++20 -O2 -Wall -Wextra -Wconversion -Wold-style-cast -Wshadow -Werror \
  -Wno-error=array-bounds -Wno-error=stringop-overflow -Wno-error=null-dereference \
  -Iruntime/server/include -Iruntime/server/src -Iruntime/ipc/include -Iruntime/common/include -Iruntime/fatbin/include \
  -I/usr/local/cuda/include runtime/server/src/backend/*.cpp runtime/server/src/backend/cuda/*.cpp runtime/fatbin/src/*.cpp \
  tests/gpu/backend_smoke.cpp \
  -o "$BUILD/backend_smoke" -lspdlog -lfmt -ldl -pthread >>"$OUT_DIR/smoke/compile.log" 2>&1; then
  if FUNNEL_SMOKE_FATBIN="$BUILD/smoke_kernels.fatbin" timeout "$TIMEOUT" "$BUILD/backend_smoke" \
    >"$OUT_DIR/smoke/backend_smoke.log" 2>&1; then
    result smoke backend_smoke PASS "$(grep -m1 '^H2D' "$OUT_DIR/smoke/backend_smoke.log")"
  else
    result smoke backend_smoke FAIL "see smoke/backend_smoke.log"
  fi
else
  result smoke backend_smoke FAIL "does not compile: smoke/compile.log"
fi

# ---- 3. programs: native vs funnel ---------------------------------------------------
mkdir -p "$PROGDIR"
PROGS=()  # names; binaries in $PROGDIR
shopt -s nullglob
note "compile tests/programs/*.cu"
for src in tests/programs/*.cu; do
  name=$(basename "$src" .cu)
  # Only programs with a NAME.expected are deterministic native-vs-funnel programs (others,
  # e.g. survive.cu, need a server to be killed under them: tests/client runs those).
  if [[ ! -f tests/programs/$name.expected ]]; then
    result compile "$name" SKIP "no tests/programs/$name.expected: not a native-vs-funnel program"
    continue
  fi
  # A program that checks what funnel does not support yet differs from native on purpose.
  if head -1 "$src" | grep -q '^// funnel-only'; then
    result compile "$name" SKIP "funnel-only (checked in CI against $name.expected)"
    continue
  fi
  # shellcheck disable=SC2086
  if nvcc -arch=sm_90 -cudart shared -O2 ${NVCC_FLAGS:-} "$src" -o "$PROGDIR/$name" \
    >"$OUT_DIR/build/nvcc-$name.log" 2>&1; then
    PROGS+=("$name")
  else
    result compile "$name" FAIL "see build/nvcc-$name.log"
  fi
done
if [[ -x $BIN/demo ]]; then
  cp "$BIN/demo" "$PROGDIR/demo" && PROGS+=(demo)
fi
[[ -x $BIN/membench ]] || result build membench FAIL "build-gpu/bin/membench was not built"
[[ ${#PROGS[@]} -gt 0 ]] || result compile programs FAIL "no test program was built (tests/programs/*.cu, apps/demo)"

FUNNEL_OPTS=()
if [[ -n ${FUNNEL_RUN_OPTS+x} ]]; then
  read -r -a FUNNEL_OPTS <<<"$FUNNEL_RUN_OPTS"
elif [[ $HAVE_FUNNEL == 1 ]] && "$BIN/funnel-run" --help 2>&1 | grep -q -- '--backend'; then
  FUNNEL_OPTS=(--backend cuda)
fi
export FUNNEL_BACKEND=cuda
export FUNNEL_LOG_DIR=$OUT_DIR/server-logs
export FUNNEL_SERVER=$BIN/funnel-server

run_native() {  # name outfile errfile
  LD_LIBRARY_PATH=$CUDA_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} timeout "$TIMEOUT" "$PROGDIR/$1" >"$2" 2>"$3"
}
run_funnel() {  # name outfile errfile [env...]
  local name=$1 o=$2 e=$3
  shift 3
  env "$@" timeout "$TIMEOUT" "$BIN/funnel-run" "${FUNNEL_OPTS[@]}" "$PROGDIR/$name" >"$o" 2>"$e"
}
compare() {  # step label name native_rc funnel_rc funnel_out diff_file
  local step=$1 label=$2 name=$3 nrc=$4 frc=$5 fout=$6 dfile=$7
  if [[ $frc == 124 || $frc == 137 ]]; then
    result "$step" "$label" FAIL "timed out after ${TIMEOUT}s through funnel"
  elif ! diff -u "$OUT_DIR/native/$name.out" "$fout" >"$dfile" 2>&1; then
    result "$step" "$label" FAIL "stdout differs from native: $(realpath --relative-to="$OUT_DIR" "$dfile")"
  elif [[ $nrc != "$frc" ]]; then
    result "$step" "$label" FAIL "exit code native $nrc, funnel $frc"
  elif grep -qs "opened the GPU itself" "${fout%.out}.err"; then
    # funnel's exit warning: /dev/nvidia* open or mapped in the client (a context of its own).
    result "$step" "$label" FAIL "the client opened the GPU itself: $(realpath --relative-to="$OUT_DIR" "${fout%.out}.err")"
  else
    rm -f "$dfile"
    result "$step" "$label" PASS "exit $frc, output identical"
  fi
}

declare -A NATIVE_RC
for name in "${PROGS[@]}"; do
  run_native "$name" "$OUT_DIR/native/$name.out" "$OUT_DIR/native/$name.err"
  rc=$?
  NATIVE_RC[$name]=$rc
  if [[ $rc == 124 || $rc == 137 ]]; then
    result native "$name" FAIL "timed out after ${TIMEOUT}s natively"
  elif [[ $rc != 0 ]]; then
    result native "$name" FAIL "exit $rc natively (see native/$name.err)"
  fi
  [[ $HAVE_FUNNEL == 1 ]] || { result funnel "$name" SKIP "funnel not built"; continue; }
  run_funnel "$name" "$OUT_DIR/funnel/$name.out" "$OUT_DIR/funnel/$name.err" FUNNEL_JOB_ID="gpu-$$-$name"
  frc=$?
  compare funnel "$name" "$name" "$rc" "$frc" "$OUT_DIR/funnel/$name.out" "$OUT_DIR/funnel/$name.diff"
done

# ---- 4. 8 clients at once through one server -----------------------------------------
if [[ $HAVE_FUNNEL == 1 && ${#PROGS[@]} -gt 0 ]]; then
  note "8 programs at once through one funnel-server"
  RUN_DIR=/dev/shm/funnel-gpu-test-$$
  # shellcheck source=tests/gpu/server.sh
  . "$ROOT/tests/gpu/server.sh"
  if ! gpu_start_server "$RUN_DIR" "$OUT_DIR/concurrent/server.log"; then
    result concurrent server FAIL "funnel-server did not come up (concurrent/server.log)"
    kill "$SERVER_PID" 2>/dev/null
  else
    pids=()
    names=()
    for i in 0 1 2 3 4 5 6 7; do
      name=${PROGS[$((i % ${#PROGS[@]}))]}
      names+=("$name")
      run_funnel "$name" "$OUT_DIR/concurrent/$i-$name.out" "$OUT_DIR/concurrent/$i-$name.err" \
        FUNNEL_RUN_DIR="$RUN_DIR" &
      pids+=($!)
    done
    for i in 0 1 2 3 4 5 6 7; do
      wait "${pids[$i]}"
      frc=$?
      name=${names[$i]}
      compare concurrent "$i:$name" "$name" "${NATIVE_RC[$name]}" "$frc" "$OUT_DIR/concurrent/$i-$name.out" \
        "$OUT_DIR/concurrent/$i-$name.diff"
    done
    if [[ -x $BIN/funnelctl ]]; then
      FUNNEL_RUN_DIR=$RUN_DIR timeout 10 "$BIN/funnelctl" stats >"$OUT_DIR/concurrent/stats.json" 2>&1 || true
    fi
    gpu_stop_server
    src=$?
    if [[ $src == 137 ]]; then
      result concurrent server-shutdown FAIL "funnel-server still running 10 s after SIGTERM"
    elif [[ $src == 0 ]]; then
      result concurrent server-shutdown PASS "exit 0 on SIGTERM"
    else
      result concurrent server-shutdown FAIL "exit $src on SIGTERM (concurrent/server.log)"
    fi
    if grep -qiE '\[(error|critical)\]' "$OUT_DIR/concurrent/server.log"; then
      result concurrent server-log FAIL "errors in concurrent/server.log"
    fi
  fi
  rm -rf "$RUN_DIR"
fi

# ---- 4b. compatibility suite: tests/programs/compat, natively and through funnel -------
note "compatibility suite (tests/gpu/compat.sh, logs in compat/)"
FUNNEL_GPU_LOG_DIR=$OUT_DIR TIMEOUT=$TIMEOUT tests/gpu/compat.sh "$BUILD" >"$OUT_DIR/compat.log" 2>&1
crc=$?
while read -r res name reason; do
  result compat "${name%:}" "$res" "$reason"
done < <(grep -E '^(FAIL|SKIP) ' "$OUT_DIR/compat.log")
result compat suite "$([[ $crc == 0 ]] && echo PASS || echo FAIL)" "$(tail -n 1 "$OUT_DIR/compat.log")"

# step_script STEP SCRIPT WHAT: runs tests/gpu/SCRIPT BUILD OUT_DIR/STEP, which prints
# "RESULT step name PASS|FAIL|SKIP detail" lines, into the summary.
step_script() {
  local step=$1 script=$2
  note "$3 (tests/gpu/$script, logs in $step/)"
  "tests/gpu/$script" "$BUILD" "$OUT_DIR/$step" >"$OUT_DIR/$step.log" 2>&1
  while read -r _ s name res detail; do
    result "$s" "$name" "$res" "$detail"
  done < <(grep '^RESULT ' "$OUT_DIR/$step.log")
  grep -q '^RESULT ' "$OUT_DIR/$step.log" || result "$step" script FAIL "tests/gpu/$script printed no result ($step.log)"
}
# ---- 4c. issue 4: memory limit, the linked app under mpirun, GPU fraction ---------------
step_script mpi mpi.sh "MPI and per-rank configuration"
# ---- 4d. issue 5: the server's threads on their planned cores, away from bound ranks ------
step_script placement placement.sh "placement"
# ---- 4e. issue 6: 128 clients of one GPU at once, and a clear refusal past --max-clients ---
step_script many many.sh "128 clients on one GPU"
# ---- 4f. issue 6: GPU busy time per client, and the client-kill storm on the GPU ---------
step_script reliability reliability.sh "GPU busy accounting and the kill storm"
# ---- 4g. issue 29: NVIDIA's libraries and driver-API programs through funnel's client driver --
step_script libs libs.sh "NVIDIA libraries, driver-API, NVRTC and static-runtime programs"

# ---- 5. benchmark ---------------------------------------------------------------------
if [[ $QUICK == 1 ]]; then
  result bench membench SKIP "--quick"
elif [[ $HAVE_FUNNEL == 1 && -x $BIN/membench ]]; then
  note "benchmark (bench/membench.sh)"
  if BUILD_DIR=$BUILD OUT=$OUT_DIR/bench TIMEOUT=600 bench/membench.sh >"$OUT_DIR/bench/membench.log" 2>&1; then
    result bench membench PASS "ratios in bench/ratios.txt"
  else
    result bench membench FAIL "see bench/membench.log"
  fi
  cat "$OUT_DIR/bench/ratios.txt" 2>/dev/null
else
  result bench membench SKIP "funnel or membench not built"
fi

summary
exit "$FAILED"
