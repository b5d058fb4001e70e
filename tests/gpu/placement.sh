#!/usr/bin/env bash
# Issue 5 on the GPU (called by tests/gpu/run.sh after its build; runs alone as well):
#   tests/gpu/placement.sh BUILD_DIR OUT_DIR
# `mpirun --bind-to core -np 4 stencil_funnel` with FUNNEL_PRINT_PLAN=1: while the job runs,
# every thread of the cuda funnel-server (read from /proc/<pid>/task/*/status) is on the CPUs
# the server's plan gives it (funnelctl plan --json; a worker alone on the core the plan gives
# it, worker_own_core, where it has one) and on none of the CPUs a rank is bound to
# (/proc/<rank pid>/status); the first rank printed the plan with the 4 ranks; and a server started
# by hand on the last CPU moves its main thread to the plan's server CPUs at once.
# Prints one "RESULT placement name PASS|FAIL|SKIP detail" line per check; exit 1 if any failed.
set -u -o pipefail
BUILD=$1
OUT_DIR=$2
BIN=$BUILD/bin
mkdir -p "$OUT_DIR"
FAILED=0
result() {
  echo "RESULT placement $1 $2 $3"
  [[ $2 == FAIL ]] && FAILED=1
  return 0
}
uid=$(id -u)
MPI=(mpirun --oversubscribe --bind-to core)
[[ $uid == 0 ]] && MPI+=(--allow-run-as-root)
cpus_of_task() { sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "$1/status" 2>/dev/null; }
# expand "0-2,5" -> "0 1 2 5"
expand() {
  local part out=()
  IFS=, read -ra parts <<<"$1"
  for part in "${parts[@]}"; do
    if [[ $part == *-* ]]; then mapfile -t -O "${#out[@]}" out < <(seq "${part%-*}" "${part#*-}"); else out+=("$part"); fi
  done
  echo "${out[@]}"
}

# ---- 1. a hand-started server moves to its planned CPUs ------------------------------------
last=$(($(nproc) - 1))
run=/dev/shm/funnel-gpu-place-$$
if FUNNEL_RUN_DIR=$run FUNNEL_LOG_DIR=$OUT_DIR/logs-hand taskset -c "$last" "$BIN/funnel-server" --backend cuda \
  --idle-exit-ms 30000 2>"$OUT_DIR/hand.err"; then
  plan=$(FUNNEL_RUN_DIR=$run "$BIN/funnelctl" plan --json)
  pid=$(FUNNEL_RUN_DIR=$run "$BIN/funnelctl" stats --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["server"]["pid"])')
  want=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["server_cpus"])' "$plan")
  got=$(cpus_of_task "/proc/$pid/task/$pid")
  FUNNEL_RUN_DIR=$run "$BIN/funnelctl" plan >"$OUT_DIR/hand-plan.txt" 2>&1
  if [[ -n $want && $got == "$want" ]]; then
    result hand-started PASS "started on CPU $last, main thread now on CPUs $got as planned"
  else
    result hand-started FAIL "main thread on '$got', plan says '$want' (hand-plan.txt)"
  fi
  FUNNEL_RUN_DIR=$run "$BIN/funnelctl" shutdown >/dev/null 2>&1
else
  result hand-started FAIL "the cuda server did not start: $(head -c 300 "$OUT_DIR/hand.err")"
fi

# ---- 2. ranks bound to cores, the server's threads beside them -----------------------------
if [[ ! -x $BIN/stencil_funnel ]]; then
  result mpi-bound SKIP "stencil_funnel not built"
  exit $FAILED
fi
job=gpu-place-$$
run=/dev/shm/funnel-$uid-$job
env -u LD_LIBRARY_PATH FUNNEL_JOB_ID=$job FUNNEL_LOG_DIR="$OUT_DIR/logs-mpi" FUNNEL_PRINT_PLAN=1 \
  timeout 300 "${MPI[@]}" -x FUNNEL_JOB_ID -x FUNNEL_LOG_DIR -x FUNNEL_PRINT_PLAN -np 4 \
  "$BIN/stencil_funnel" --n 128 --steps 20000 --warmup 2 >"$OUT_DIR/mpi.out" 2>&1 &
mpirun_pid=$!
stats=
for _ in $(seq 300); do
  stats=$(FUNNEL_RUN_DIR=$run "$BIN/funnelctl" stats --json 2>/dev/null) &&
    [[ $(python3 -c 'import json,sys; print(len(json.loads(sys.argv[1])["clients"]))' "$stats") == 4 ]] && break
  stats=
  sleep 0.1
done
if [[ -z $stats ]]; then
  result mpi-bound FAIL "4 ranks never attached (mpi.out)"
else
  sleep 0.5  # the plan follows the last attach
  FUNNEL_RUN_DIR=$run "$BIN/funnelctl" plan --json >"$OUT_DIR/plan.json" 2>&1
  FUNNEL_RUN_DIR=$run "$BIN/funnelctl" plan >"$OUT_DIR/plan.txt" 2>&1
  spid=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["server"]["pid"])' "$stats")
  {
    echo "ranks:"
    for rp in $(python3 -c 'import json,sys; print(" ".join(str(c["pid"]) for c in json.loads(sys.argv[1])["clients"]))' "$stats"); do
      echo "  pid $rp CPUs $(cpus_of_task "/proc/$rp")"
    done
    echo "server $spid threads:"
    for t in /proc/"$spid"/task/*; do echo "  $(cat "$t/comm") CPUs $(cpus_of_task "$t")"; done
  } >"$OUT_DIR/threads.txt"
  rank_cpus=" "
  while read -r _ _ _ list; do rank_cpus+="$(expand "$list") "; done < <(grep '^  pid' "$OUT_DIR/threads.txt")
  workers=$(python3 -c 'import json; print(json.load(open("'"$OUT_DIR/plan.json"'"))["gpus"][0]["worker_cpus"])')
  server=$(python3 -c 'import json; print(json.load(open("'"$OUT_DIR/plan.json"'"))["server_cpus"])')
  # Each worker alone on a core of the set where the plan gives it one (worker_own_core).
  own_core() {
    python3 -c 'import json,sys; c=[c for c in json.load(open(sys.argv[1]))["clients"] if "funnel-w%d" % c["id"] == sys.argv[2]]; print(c[0].get("worker_own_core", "") if c else "")' \
      "$OUT_DIR/plan.json" "$1"
  }
  bad=""
  nw=0
  owned=" "
  while read -r name _ list; do
    if [[ $name == funnel-w* ]]; then
      nw=$((nw + 1))
      want=$(own_core "$name")
      if [[ -n $want ]]; then
        [[ $list == "$want" ]] || bad+=" $name on $list (its own core $want);"
        [[ $owned == *" $want "* ]] && bad+=" $name shares core $want with another worker;"
        owned+="$want "
      else
        [[ $list == "$workers" ]] || bad+=" $name on $list (plan $workers);"
      fi
    fi
    [[ $name != funnel-w* && $list != "$server" ]] && bad+=" $name on $list (plan $server);"
    for c in $(expand "$list"); do [[ $rank_cpus == *" $c "* ]] && bad+=" $name on rank CPU $c;"; done
  done < <(sed -n 's/^  \(.*\) CPUs \(.*\)$/\1 x \2/p' "$OUT_DIR/threads.txt" | grep -v '^pid ')
  if [[ $nw -ne 4 ]]; then
    result mpi-bound FAIL "expected 4 worker threads, found $nw (threads.txt)"
  elif [[ -n $bad ]]; then
    result mpi-bound FAIL "${bad:0:300} (threads.txt, plan.txt)"
  else
    result mpi-bound PASS "ranks on CPUs$(echo "$rank_cpus" | tr -s ' ' ',' | sed 's/,$//'); 4 workers on CPUs $workers (each alone on:$owned), the server's other threads on $server; none on a rank's CPU"
  fi
fi
wait "$mpirun_pid"
rc=$?
if [[ $rc == 0 ]] && [[ $(grep -c 'placement plan of funnel-server' "$OUT_DIR/mpi.out") == 1 ]] &&
  [[ $(grep -cE '^rank [0-3] \(client' "$OUT_DIR/mpi.out") == 4 ]]; then
  result print-plan PASS "FUNNEL_PRINT_PLAN=1: the first rank printed the plan once with the 4 ranks; mpirun exit 0"
else
  result print-plan FAIL "mpirun exit $rc or no plan with 4 ranks in mpi.out"
fi
exit $FAILED
