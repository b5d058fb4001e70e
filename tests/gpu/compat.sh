#!/usr/bin/env bash
# The CUDA compatibility suite on a GPU machine:  tests/gpu/compat.sh [BUILD_DIR]
# Runs the programs of BUILD_DIR/bin/compat/programs.txt (tests/programs/compat, built with
# FUNNEL_BUILD_CUDA_PROGRAMS=ON; BUILD_DIR defaults to build-gpu) in five phases:
#   alone           each natively (the real libcudart) and through funnel-run (one server each)
#   concurrent-8    waves of 8 different programs at once through ONE funnel-server
#   concurrent-32   waves of 32 at once through one server (the list cycled to fill a wave)
#   twins           two copies of dynamic_smem at once, then of occupancy (shared module state)
#   fault-isolation illegal_address faults while 4 other clients use the same server; the
#                   server must survive and a new client must then succeed
# Programs marked `fault` in programs.txt run only alone and in fault-isolation. A program
# passes when its native run exits 0 with a last line PASS and every funnel run prints the same
# stdout, byte for byte, and exits with the same code. Prints `PASS name` / `FAIL name: reason`
# / `SKIP name: reason` per program and for fault-isolation, one `phase ...` line per phase,
# then `compat: passed N, failed M, skipped K` last; exits 1 if anything failed.
# Without a GPU (nvidia-smi absent or failing) everything is skipped and it exits 0.
# Environment: FUNNEL_GPU_LOG_DIR (logs go to its compat/ folder; default /tmp/funnel-gpu),
#   TIMEOUT (seconds per run, default 60), COMPAT_ONLY / COMPAT_SKIP (space-separated program
#   names, or fault-isolation, to run only / to skip), COMPAT_NOT_IN_32 (programs left out of
#   concurrent-32, default many_launches), FUNNEL_RUN_OPTS (replace the funnel-run options),
#   CUDA_LIB (the real libcudart's folder, default /usr/local/cuda/lib64).
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
case ${1:-} in -h | --help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
BUILD=$(cd "${1:-$ROOT/build-gpu}" 2>/dev/null && pwd) || { echo "compat.sh: no build directory '${1:-$ROOT/build-gpu}'" >&2; exit 2; }
BIN=$BUILD/bin
PROGDIR=$BIN/compat
LOG=${FUNNEL_GPU_LOG_DIR:-/tmp/funnel-gpu}/compat
TIMEOUT=${TIMEOUT:-60}
CUDA_LIB=${CUDA_LIB:-/usr/local/cuda/lib64}
# many_launches: its 100 000 launches measure the server's launch path rather than
# compatibility, and 31 other clients sharing that server would make it the phase's long pole
# (it still runs alone and in the waves of 8).
NOT_IN_32=${COMPAT_NOT_IN_32-many_launches}
TWINS=(dynamic_smem occupancy)
# fault-isolation: the programs running beside the fault. vector_add and reduction are short;
# jacobi2d and nbody get arguments that keep them busy on the GPU for about a second on an H100
# (10 000 sweeps of 4096x4096, which skips the CPU check; 1000 steps of 32 768 bodies, whose
# CPU check stays 64 bodies) so that the fault, 300 ms after illegal_address starts, lands
# while they run.
FAULT_PROG=illegal_address FAULT_DELAY_MS=300
FAULT_NEIGHBOURS=("vector_add" "reduction" "jacobi2d 10000 4096" "nbody 1000 32768")
rm -rf "$LOG"
mkdir -p "$LOG"/{native,funnel,concurrent-8,concurrent-32,twins,fault-isolation,server-logs} || exit 2

declare -A RESULT REASON FAULT  # name -> PASS|FAIL|SKIP, reason; name -> 1 for `fault` programs
declare -A PHASE_RUNS PHASE_FAILED PHASE_NOTE  # phase -> runs, failed runs (names), remark
PHASES=(alone concurrent-8 concurrent-32 twins fault-isolation)
for ph in "${PHASES[@]}"; do PHASE_RUNS[$ph]=0 PHASE_FAILED[$ph]="" PHASE_NOTE[$ph]=""; done
PROGS=()
SCENARIO=fault-isolation
fail() {  # name reason: the first reason is kept
  [[ ${RESULT[$1]} == FAIL ]] && return
  RESULT[$1]=FAIL
  REASON[$1]=$2
}
FAULT_DETAILS=()  # fault-isolation: one line per client
report() {
  local pass=0 failed=0 skip=0 name ph line
  for name in "${PROGS[@]}" "$SCENARIO"; do
    [[ $name == "$SCENARIO" ]] && for line in "${FAULT_DETAILS[@]}"; do echo "$SCENARIO: $line"; done
    case ${RESULT[$name]} in
      PASS) echo "PASS $name"; pass=$((pass + 1)) ;;
      SKIP) echo "SKIP $name: ${REASON[$name]}"; skip=$((skip + 1)) ;;
      *) echo "FAIL $name: ${REASON[$name]}"; failed=$((failed + 1)) ;;
    esac
  done
  for ph in "${PHASES[@]}"; do
    line="phase $ph: ${PHASE_RUNS[$ph]} funnel runs"
    if [[ -n ${PHASE_FAILED[$ph]} ]]; then
      line+=", failed:${PHASE_FAILED[$ph]}"
    else
      line+=", none failed"
    fi
    echo "$line${PHASE_NOTE[$ph]:+ (${PHASE_NOTE[$ph]})}"
  done
  echo "compat: passed $pass, failed $failed, skipped $skip (logs in $LOG)"
  [[ $failed == 0 ]]
}
selected() {  # name: chosen by COMPAT_ONLY / COMPAT_SKIP
  [[ -z ${COMPAT_ONLY:-} || " $COMPAT_ONLY " == *" $1 "* ]] && [[ " ${COMPAT_SKIP:-} " != *" $1 "* ]]
}

RESULT[$SCENARIO]=PASS
if [[ ! -f $PROGDIR/programs.txt ]]; then
  echo "FAIL programs: $PROGDIR/programs.txt missing (build with -DFUNNEL_BUILD_CUDA_PROGRAMS=ON)"
  echo "compat: passed 0, failed 1, skipped 0"
  exit 1
fi
# A line of programs.txt: the name, then marks (`fault`).
while read -r name marks; do
  [[ -z $name ]] && continue
  PROGS+=("$name")
  [[ " $marks " == *" fault "* ]] && FAULT[$name]=1
  RESULT[$name]=PASS
  if ! selected "$name"; then
    RESULT[$name]=SKIP REASON[$name]="not selected (COMPAT_ONLY / COMPAT_SKIP)"
  elif [[ ! -x $PROGDIR/$name ]]; then
    fail "$name" "not built ($PROGDIR/$name)"
  fi
done <"$PROGDIR/programs.txt"
selected "$SCENARIO" || RESULT[$SCENARIO]=SKIP REASON[$SCENARIO]="not selected (COMPAT_ONLY / COMPAT_SKIP)"
if ! nvidia-smi -L >/dev/null 2>&1; then
  for name in "${PROGS[@]}" "$SCENARIO"; do RESULT[$name]=SKIP REASON[$name]="no GPU (nvidia-smi absent or failing)"; done
  report
  exit 0
fi
HAVE_FUNNEL=1
if [[ ! -x $BIN/funnel-run || ! -x $BIN/funnel-server ]]; then
  HAVE_FUNNEL=0
  for name in "${PROGS[@]}" "$SCENARIO"; do
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
run_funnel() {  # name outfile errfile run_dir [program arguments...]
  local name=$1 out=$2 err=$3 dir=$4
  shift 4
  FUNNEL_RUN_DIR=$dir timeout "$TIMEOUT" "$BIN/funnel-run" "${FUNNEL_OPTS[@]}" "$PROGDIR/$name" "$@" >"$out" 2>"$err"
}
compare() {  # phase name how native_rc funnel_rc funnel_out diff_file
  local phase=$1 name=$2 how=$3 nrc=$4 frc=$5 fout=$6 dfile=$7 why=""
  PHASE_RUNS[$phase]=$((PHASE_RUNS[$phase] + 1))
  if [[ $frc == 124 || $frc == 137 ]]; then
    why="timed out after ${TIMEOUT}s $how"
  elif ! diff -u "$LOG/native/$name.out" "$fout" >"$dfile" 2>&1; then
    why="stdout differs $how: $dfile"
  elif [[ $nrc != "$frc" ]]; then
    why="exit code native $nrc, $how $frc"
  elif grep -qs "opened the GPU itself" "${fout%.out}.err"; then
    why="the client opened the GPU itself $how (funnel's exit warning in ${fout%.out}.err)"
  fi
  if [[ -z $why ]]; then
    rm -f "$dfile"
    return 0
  fi
  fail "$name" "$why"
  [[ " ${PHASE_FAILED[$phase]} " == *" $name "* ]] || PHASE_FAILED[$phase]+=" $name"
  return 1
}

# One funnel-server shared by the clients of a phase (tests/gpu/server.sh).
# shellcheck source=tests/gpu/server.sh
. "$(dirname "${BASH_SOURCE[0]}")/server.sh"
start_server() { gpu_start_server "$@"; }
stop_server() {  # run_dir
  [[ -n $SERVER_PID ]] || return
  gpu_stop_server
  [[ $? -eq 137 ]] && echo "compat: the shared funnel-server still ran 10 s after SIGTERM; killed" >&2
  rm -rf "$1"
}

# ---- alone: natively, then through funnel with a server of its own --------------------------
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
  compare alone "$name" "through funnel" "$rc" "$frc" "$LOG/funnel/$name.out" "$LOG/funnel/$name.diff"
  echo "... $name: native $rc, funnel $frc" >&2
done

# ---- concurrent-8 and concurrent-32: waves of SIZE programs through one server ---------------
# The programs that passed alone (no `fault` ones); a short wave is filled up by cycling
# through the list from the start, different programs first, then second copies.
waves() {  # phase size candidates...
  local phase=$1 size=$2 w k i n name frc tag
  shift 2
  local cand=("$@") wave pids outs
  local dir=$LOG/$phase rundir=/dev/shm/funnel-compat-$$-$phase
  if [[ ${#cand[@]} == 0 ]]; then
    PHASE_NOTE[$phase]="no candidates"
    return
  fi
  if ! start_server "$rundir" "$dir/server.log"; then
    for name in "${cand[@]}"; do fail "$name" "shared funnel-server of $phase did not come up ($dir/server.log)"; done
    PHASE_NOTE[$phase]="server did not come up"
    stop_server "$rundir"
    return
  fi
  n=0
  for ((w = 0; w < ${#cand[@]}; w += size)); do
    wave=("${cand[@]:w:size}")
    for ((k = 0; ${#wave[@]} < size && k < ${#cand[@]}; k++)); do
      [[ " ${wave[*]} " == *" ${cand[k]} "* ]] || wave+=("${cand[k]}")
    done
    for ((k = 0; ${#wave[@]} < size; k = (k + 1) % ${#cand[@]})); do wave+=("${cand[k]}"); done
    pids=() outs=()
    declare -A copies=()
    for name in "${wave[@]}"; do
      copies[$name]=$((${copies[$name]:-0} + 1))
      tag=$name.${copies[$name]}
      outs+=("$tag")
      run_funnel "$name" "$dir/$tag.out" "$dir/$tag.err" "$rundir" &
      pids+=($!)
    done
    for i in "${!wave[@]}"; do
      wait "${pids[$i]}"
      frc=$?
      name=${wave[$i]}
      compare "$phase" "$name" "with $((size - 1)) others through one server" "${NATIVE_RC[$name]}" "$frc" \
        "$dir/${outs[$i]}.out" "$dir/${outs[$i]}.diff"
    done
    n=$((n + 1))
    echo "... $phase wave $n: ${wave[*]}" >&2
  done
  PHASE_NOTE[$phase]="$n waves of $size"
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then PHASE_NOTE[$phase]+=", the server exited during the phase"; fi
  stop_server "$rundir"
}
CANDIDATES=() CANDIDATES_32=()
declare -A PASSED_ALONE
for name in "${PROGS[@]}"; do
  [[ ${RESULT[$name]} == PASS ]] && PASSED_ALONE[$name]=1
  [[ ${RESULT[$name]} == PASS && -z ${FAULT[$name]:-} ]] || continue
  CANDIDATES+=("$name")
  [[ " $NOT_IN_32 " == *" $name "* ]] || CANDIDATES_32+=("$name")
done
waves concurrent-8 8 "${CANDIDATES[@]}"
waves concurrent-32 32 "${CANDIDATES_32[@]}"
[[ -n $NOT_IN_32 ]] && PHASE_NOTE[concurrent-32]+="${PHASE_NOTE[concurrent-32]:+; }left out: $NOT_IN_32"

# ---- twins: two copies of one program at once through one server -----------------------------
# dynamic_smem and occupancy set function attributes; funnel shares one loaded module between
# clients when it has no __device__ variables, so one copy's attributes apply to the other's
# functions. The comparison with the native output shows whether that changes what they see.
twin_names=()
for name in "${TWINS[@]}"; do
  [[ -n ${PASSED_ALONE[$name]:-} ]] && twin_names+=("$name")
done
if [[ ${#twin_names[@]} -gt 0 ]]; then
  rundir=/dev/shm/funnel-compat-$$-twins
  if ! start_server "$rundir" "$LOG/twins/server.log"; then
    for name in "${twin_names[@]}"; do fail "$name" "shared funnel-server of twins did not come up ($LOG/twins/server.log)"; done
    PHASE_NOTE[twins]="server did not come up"
  else
    for name in "${twin_names[@]}"; do
      pids=()
      for c in 1 2; do
        run_funnel "$name" "$LOG/twins/$name.$c.out" "$LOG/twins/$name.$c.err" "$rundir" &
        pids[c]=$!
      done
      for c in 1 2; do
        wait "${pids[c]}"
        frc=$?
        compare twins "$name" "with a second copy of itself through one server" "${NATIVE_RC[$name]}" "$frc" \
          "$LOG/twins/$name.$c.out" "$LOG/twins/$name.$c.diff"
      done
      echo "... twins: $name" >&2
    done
    PHASE_NOTE[twins]="${twin_names[*]}"
  fi
  stop_server "$rundir"
else
  PHASE_NOTE[twins]="none of ${TWINS[*]} passed alone"
fi

# ---- fault-isolation: a kernel fault beside other clients of the same server ----------------
# illegal_address must see its error as natively; the other clients' outcomes are reported but
# not judged (a fault poisons the CUDA context they share, so they may get errors too), except
# that they must end; then the server must re-execute itself (same pid: the driver cannot
# recreate the context in a live process, doc/design/faults.md) and a NEW client (vector_add)
# must succeed on the restarted server.
fault_isolation() {
  local dir=$LOG/fault-isolation rundir=/dev/shm/funnel-compat-$$-fault
  local specs=("$FAULT_PROG $FAULT_DELAY_MS" "${FAULT_NEIGHBOURS[@]}") spec name args pids=() i rc last
  for spec in "${specs[@]}" vector_add; do
    name=${spec%% *}
    if [[ ! -x $PROGDIR/$name ]]; then
      fail "$SCENARIO" "$name not built"
      return
    fi
  done
  if [[ -z ${NATIVE_RC[vector_add]:-} ]]; then  # not selected for the other phases
    run_native vector_add
    NATIVE_RC[vector_add]=$?
  fi
  if [[ ${NATIVE_RC[vector_add]} != 0 ]]; then
    fail "$SCENARIO" "vector_add did not pass natively in the alone phase (its output is the reference)"
    return
  fi
  if ! start_server "$rundir" "$dir/server.log"; then
    fail "$SCENARIO" "funnel-server did not come up ($dir/server.log)"
    stop_server "$rundir"
    return
  fi
  for spec in "${specs[@]}"; do
    read -r name args <<<"$spec"
    # shellcheck disable=SC2086  # the arguments are words
    run_funnel "$name" "$dir/$name.out" "$dir/$name.err" "$rundir" $args &
    pids+=($!)
  done
  for i in "${!specs[@]}"; do
    wait "${pids[$i]}"
    rc=$?
    read -r name args <<<"${specs[$i]}"
    PHASE_RUNS[$SCENARIO]=$((PHASE_RUNS[$SCENARIO] + 1))
    last=$(grep -v '^$' "$dir/$name.out" | tail -n 1)
    if [[ $rc == 124 || $rc == 137 ]]; then
      FAULT_DETAILS+=("$name${args:+ $args}: timed out after ${TIMEOUT}s")
      fail "$SCENARIO" "$name did not end within ${TIMEOUT}s"
      PHASE_FAILED[$SCENARIO]+=" $name"
      continue
    fi
    FAULT_DETAILS+=("$name${args:+ $args}: exit $rc, last line: ${last:-(none)}")
    if [[ $name == "$FAULT_PROG" && ($rc != 0 || $last != PASS) ]]; then
      fail "$SCENARIO" "$name did not see its fault as expected (exit $rc, $dir/$name.out)"
      PHASE_FAILED[$SCENARIO]+=" $name"
    fi
  done
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    wait "$SERVER_PID"
    FAULT_DETAILS+=("the server exited (status $?) during the scenario")
    fail "$SCENARIO" "the funnel-server exited after the fault ($dir/server.log)"
    PHASE_FAILED[$SCENARIO]+=" funnel-server"
    SERVER_PID=""
    return
  fi
  FAULT_DETAILS+=("the server still runs after the fault")
  # The new client may connect before the restart: it waits in the socket's backlog.
  run_funnel vector_add "$dir/new-vector_add.out" "$dir/new-vector_add.err" "$rundir"
  rc=$?
  if grep -q "funnel-server $SERVER_PID restarted after a GPU fault" "$dir/server.log"; then
    FAULT_DETAILS+=("the server restarted (same pid $SERVER_PID): $(grep -o 'restarting to recover device [0-9]*' "$dir/server.log" | head -n 1)")
  else
    FAULT_DETAILS+=("the server did not log its restart after the fault")
    fail "$SCENARIO" "the funnel-server did not restart after the fault ($dir/server.log)"
    PHASE_FAILED[$SCENARIO]+=" restart"
  fi
  PHASE_RUNS[$SCENARIO]=$((PHASE_RUNS[$SCENARIO] + 1))
  if [[ $rc == 0 ]] && diff -u "$LOG/native/vector_add.out" "$dir/new-vector_add.out" >"$dir/new-vector_add.diff" 2>&1; then
    FAULT_DETAILS+=("a new client (vector_add) afterwards: exit 0, stdout as native")
    rm -f "$dir/new-vector_add.diff"
  else
    FAULT_DETAILS+=("a new client (vector_add) afterwards: exit $rc, last line: $(grep -v '^$' "$dir/new-vector_add.out" | tail -n 1)")
    fail "$SCENARIO" "a new client (vector_add) after the fault failed (exit $rc, $dir/new-vector_add.out)"
    PHASE_FAILED[$SCENARIO]+=" new-vector_add"
  fi
  stop_server "$rundir"
}
if [[ ${RESULT[$SCENARIO]} == PASS ]]; then
  fault_isolation
  echo "... fault-isolation: ${RESULT[$SCENARIO]}" >&2
else
  PHASE_NOTE[$SCENARIO]=${REASON[$SCENARIO]}
fi
rm -rf /dev/shm/funnel-compat-$$-*  # the one-program servers' run directories
report
