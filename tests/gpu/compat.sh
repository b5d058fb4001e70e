#!/usr/bin/env bash
# The CUDA compatibility suite on a GPU machine:  tests/gpu/compat.sh [BUILD_DIR]
# Runs every program of BUILD_DIR/bin/compat/programs.txt (tests/programs/compat, built with
# FUNNEL_BUILD_CUDA_PROGRAMS=ON; BUILD_DIR defaults to build-gpu) natively (the real
# libcudart) and through funnel-run (CUDA backend, one server per program), then all of them
# again in waves of 8 at once through ONE funnel-server. A program passes when its native run
# exits 0 with a last line PASS and every funnel run prints the same stdout, byte for byte, and
# exits with the same code. Prints `PASS name` / `FAIL name: reason` / `SKIP name: reason`
# per program, then `compat: passed N, failed M, skipped K`; exits 1 if anything failed.
# Without a GPU (nvidia-smi absent or failing) every program is skipped and it exits 0.
# Environment: FUNNEL_GPU_LOG_DIR (logs go to its compat/ folder; default /tmp/funnel-gpu),
#   TIMEOUT (seconds per run, default 60), COMPAT_ONLY / COMPAT_SKIP (space-separated program
#   names to run only / to skip), FUNNEL_RUN_OPTS (replace the funnel-run options),
#   CUDA_LIB (the real libcudart's folder, default /usr/local/cuda/lib64).
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
case ${1:-} in -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
BUILD=$(cd "${1:-$ROOT/build-gpu}" 2>/dev/null && pwd) || { echo "compat.sh: no build directory '${1:-$ROOT/build-gpu}'" >&2; exit 2; }
BIN=$BUILD/bin
PROGDIR=$BIN/compat
LOG=${FUNNEL_GPU_LOG_DIR:-/tmp/funnel-gpu}/compat
TIMEOUT=${TIMEOUT:-60}
CUDA_LIB=${CUDA_LIB:-/usr/local/cuda/lib64}
rm -rf "$LOG"
mkdir -p "$LOG"/{native,funnel,concurrent,server-logs} || exit 2

declare -A RESULT REASON  # name -> PASS|FAIL|SKIP, reason
PROGS=()
fail() {  # name reason: the first reason is kept
  [[ ${RESULT[$1]} == FAIL ]] && return
  RESULT[$1]=FAIL
  REASON[$1]=$2
}
report() {
  local pass=0 failed=0 skip=0 name
  for name in "${PROGS[@]}"; do
    case ${RESULT[$name]} in
      PASS) echo "PASS $name"; pass=$((pass + 1)) ;;
      SKIP) echo "SKIP $name: ${REASON[$name]}"; skip=$((skip + 1)) ;;
      *) echo "FAIL $name: ${REASON[$name]}"; failed=$((failed + 1)) ;;
    esac
  done
  echo "compat: passed $pass, failed $failed, skipped $skip (logs in $LOG)"
  [[ $failed == 0 ]]
}

if [[ ! -f $PROGDIR/programs.txt ]]; then
  echo "FAIL programs: $PROGDIR/programs.txt missing (build with -DFUNNEL_BUILD_CUDA_PROGRAMS=ON)"
  echo "compat: passed 0, failed 1, skipped 0"
  exit 1
fi
mapfile -t PROGS < <(grep -v '^$' "$PROGDIR/programs.txt")
for name in "${PROGS[@]}"; do
  RESULT[$name]=PASS
  if [[ -n ${COMPAT_ONLY:-} && " $COMPAT_ONLY " != *" $name "* ]]; then
    RESULT[$name]=SKIP REASON[$name]="not in COMPAT_ONLY"
  elif [[ " ${COMPAT_SKIP:-} " == *" $name "* ]]; then
    RESULT[$name]=SKIP REASON[$name]="in COMPAT_SKIP"
  elif [[ ! -x $PROGDIR/$name ]]; then
    fail "$name" "not built ($PROGDIR/$name)"
  fi
done
if ! nvidia-smi -L >/dev/null 2>&1; then
  for name in "${PROGS[@]}"; do RESULT[$name]=SKIP REASON[$name]="no GPU (nvidia-smi absent or failing)"; done
  report
  exit 0
fi
HAVE_FUNNEL=1
if [[ ! -x $BIN/funnel-run || ! -x $BIN/funnel-server ]]; then
  HAVE_FUNNEL=0
  for name in "${PROGS[@]}"; do
    [[ ${RESULT[$name]} == PASS ]] && fail "$name" "funnel-run or funnel-server not built in $BIN"
  done
fi

FUNNEL_OPTS=()
if [[ -n ${FUNNEL_RUN_OPTS+x} ]]; then
  read -r -a FUNNEL_OPTS <<<"$FUNNEL_RUN_OPTS"
elif [[ $HAVE_FUNNEL == 1 ]] && "$BIN/funnel-run" --help 2>&1 | grep -q -- '--backend'; then
  FUNNEL_OPTS=(--backend cuda)
fi
export FUNNEL_BACKEND=cuda FUNNEL_SERVER=$BIN/funnel-server FUNNEL_LOG_DIR=$LOG/server-logs FUNNEL_IDLE_EXIT_MS=1000

run_native() {  # name
  LD_LIBRARY_PATH=$CUDA_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} timeout "$TIMEOUT" "$PROGDIR/$1" \
    >"$LOG/native/$1.out" 2>"$LOG/native/$1.err"
}
run_funnel() {  # name outfile errfile run_dir
  FUNNEL_RUN_DIR=$4 timeout "$TIMEOUT" "$BIN/funnel-run" "${FUNNEL_OPTS[@]}" "$PROGDIR/$1" >"$2" 2>"$3"
}
compare() {  # name how native_rc funnel_rc funnel_out diff_file
  local name=$1 how=$2 nrc=$3 frc=$4 fout=$5 dfile=$6
  if [[ $frc == 124 || $frc == 137 ]]; then
    fail "$name" "timed out after ${TIMEOUT}s $how"
  elif ! diff -u "$LOG/native/$name.out" "$fout" >"$dfile" 2>&1; then
    fail "$name" "stdout differs $how: $dfile"
  elif [[ $nrc != "$frc" ]]; then
    fail "$name" "exit code native $nrc, $how $frc"
  else
    rm -f "$dfile"
    return 0
  fi
  return 1
}

declare -A NATIVE_RC
for name in "${PROGS[@]}"; do
  [[ ${RESULT[$name]} == PASS ]] || continue
  run_native "$name"
  rc=$?
  NATIVE_RC[$name]=$rc
  if [[ $rc == 124 || $rc == 137 ]]; then
    fail "$name" "timed out after ${TIMEOUT}s natively"
  elif [[ $rc != 0 || $(tail -n 1 "$LOG/native/$name.out") != PASS ]]; then
    fail "$name" "native run failed (exit $rc, $LOG/native/$name.out)"
  fi
  # Through funnel even when native failed: the diff still tells something.
  rundir=/dev/shm/funnel-compat-$$-$name
  run_funnel "$name" "$LOG/funnel/$name.out" "$LOG/funnel/$name.err" "$rundir"
  frc=$?
  compare "$name" "through funnel" "$rc" "$frc" "$LOG/funnel/$name.out" "$LOG/funnel/$name.diff"
  echo "... $name: native $rc, funnel $frc" >&2
done

# Waves of 8 programs at once through one server (every program that passed so far).
CANDIDATES=()
for name in "${PROGS[@]}"; do [[ ${RESULT[$name]} == PASS ]] && CANDIDATES+=("$name"); done
if [[ ${#CANDIDATES[@]} -gt 0 ]]; then
  RUN_DIR=/dev/shm/funnel-compat-$$-shared
  rm -rf "$RUN_DIR"
  "$BIN/funnel-server" --backend cuda --foreground --run-dir "$RUN_DIR" >"$LOG/concurrent/server.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 300); do
    [[ -S $RUN_DIR/server.sock ]] && break
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  if [[ ! -S $RUN_DIR/server.sock ]]; then
    for name in "${CANDIDATES[@]}"; do fail "$name" "shared funnel-server did not come up ($LOG/concurrent/server.log)"; done
  else
    for ((w = 0; w < ${#CANDIDATES[@]}; w += 8)); do
      wave=("${CANDIDATES[@]:w:8}")
      # A short last wave is filled up from the start so that 8 always run at once.
      for ((k = 0; ${#wave[@]} < 8 && k < ${#CANDIDATES[@]}; k++)); do
        [[ " ${wave[*]} " == *" ${CANDIDATES[k]} "* ]] || wave+=("${CANDIDATES[k]}")
      done
      pids=()
      for name in "${wave[@]}"; do
        run_funnel "$name" "$LOG/concurrent/$name.out" "$LOG/concurrent/$name.err" "$RUN_DIR" &
        pids+=($!)
      done
      for i in "${!wave[@]}"; do
        wait "${pids[$i]}"
        frc=$?
        name=${wave[$i]}
        compare "$name" "with 7 others through one server" "${NATIVE_RC[$name]}" "$frc" \
          "$LOG/concurrent/$name.out" "$LOG/concurrent/$name.diff"
      done
      echo "... wave: ${wave[*]}" >&2
    done
  fi
  kill -TERM "$SERVER_PID" 2>/dev/null
  for _ in $(seq 100); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "compat: the shared funnel-server still ran 10 s after SIGTERM; killed" >&2
    kill -KILL "$SERVER_PID" 2>/dev/null
  fi
  wait "$SERVER_PID" 2>/dev/null
  rm -rf "$RUN_DIR"
fi
rm -rf /dev/shm/funnel-compat-$$-*  # the one-program servers' run directories
report
