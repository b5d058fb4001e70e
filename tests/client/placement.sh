#!/usr/bin/env bash
# placement.sh BIN_DIR PROGRAM TOPOLOGY_DIR
# The server's threads where the plan puts them (doc/placement.md), read back from
# /proc/<pid>/task/*/status, on the sim backend:
#  - on topologies/two_cpus_two_gpus.xml (HWLOC_XMLFILE: CPUs 0 and 1, the sim's devices 0
#    and 1 beside them): a server started on CPU 1 moves to CPU 0; a client bound to CPU 0
#    on GPU 0 and an unbound one on GPU 1 put every server thread, both workers included, on
#    CPU 1; once they left, the server is back on CPU 0; `funnelctl plan` and
#    FUNNEL_PRINT_PLAN=1 show the plan with both clients;
#  - two clients bound to CPU 0 and CPU 1 (every core): each worker on its own client's CPU,
#    and with FUNNEL_SERVER_AFFINITY=gpu both on the GPU's CPUs 0-1;
#  - FUNNEL_SERVER_AFFINITY=off: the server stays on CPU 1, and the plan says it is not applied;
#  - on this machine (no GPU found): a server started on CPU 0 is widened to every CPU the
#    test may use, not left on the core of the rank that started it.
# PROGRAM is tests/gpu/fraction.cu (FRACTION_HOLD_MS keeps it attached).  Exit 77: skipped.
set -u
bin=$1 prog=$2 topo=$3
# shellcheck source=tests/client/sim_env.sh
. "$(dirname "$0")/sim_env.sh"
sim_env "$bin"
unset FUNNEL_SIM_LAUNCH_LOG
fail() {
  echo "FAIL: $*"
  for f in "$dir"/out "$dir"/err* "$dir"/log/*.log; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done
  echo "FAIL: $*"  # again last: CI shows the end of a failing test's output
  exit 1
}
mine=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
if ! taskset -c 0,1 true 2>/dev/null; then
  echo "SKIP: this test needs CPUs 0 and 1; it may use $mine"
  exit 77
fi

server_pid() { cat "$dir/pid"; }
# cpus_of NAME_REGEX: the distinct Cpus_allowed_list of the server's threads named so.
cpus_of() {
  local t out=""
  for t in /proc/"$(server_pid)"/task/*; do
    grep -qE "^($1)\$" "$t/comm" 2>/dev/null || continue
    out+="$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "$t/status")"$'\n'
  done
  printf '%s' "$out" | sort -u | paste -sd' '
}
# expect_cpus NAME_REGEX WANT WHAT: polls up to 5 s (a re-plan follows an attach or a leave).
expect_cpus() {
  local got
  for _ in $(seq 100); do
    got=$(cpus_of "$1")
    [ "$got" = "$2" ] && { echo "ok: $3: CPUs $got"; return; }
    sleep 0.05
  done
  fail "$3: threads '$1' on CPUs '$got', expected '$2'"
}
start_server() {  # start_server CPU [ARGS...]
  local cpu=$1
  shift
  taskset -c "$cpu" "$bin/funnel-server" --sim-devices 2 --idle-exit-ms 60000 "$@" || fail "the server did not start"
  "$bin/funnelctl" stats --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["server"]["pid"])' >"$dir/pid" ||
    fail "no stats"
}
# wait_attached N: polls up to 10 s until the server serves N clients (the client ids below
# follow the order of attaching; a loaded machine may start a process late).
wait_attached() {
  local n=""
  for _ in $(seq 200); do
    n=$("$bin/funnelctl" stats --json 2>/dev/null | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["clients"]))' 2>/dev/null)
    [ "$n" = "$1" ] && return
    sleep 0.05
  done
  fail "$1 client(s) did not attach within 10 s (the server serves '$n')"
}
stop_server() {
  "$bin/funnelctl" shutdown >/dev/null || fail "shutdown"
  for _ in $(seq 100); do [ -d "/proc/$(server_pid)" ] || return; sleep 0.05; done
  fail "the server did not stop"
}

export HWLOC_XMLFILE=$topo/two_cpus_two_gpus.xml HWLOC_THISSYSTEM=1
start_server 1
expect_cpus 'funnel-server' 0 "a server started on CPU 1, no clients: the plan's server CPU"
"$bin/funnelctl" plan >"$dir/out" 2>&1 || fail "funnelctl plan exited $?"
grep -q '^GPU 0 0000:00:00.0: Package P#0.*workers on CPUs 0' "$dir/out" || fail "GPU 0's workers should get CPU 0"
grep -q '^GPU 1 0000:01:00.0: Package P#0.*workers on CPUs 1' "$dir/out" || fail "GPU 1's workers should get CPU 1"

FRACTION_HOLD_MS=4000 taskset -c 0 timeout 60 "$bin/funnel-run" "$prog" >/dev/null 2>"$dir/err1" &
c1=$!
wait_attached 1  # client 1 first: the ids in the names below
FRACTION_HOLD_MS=4000 FUNNEL_GPU_MAP=1 FUNNEL_GPU_FRACTION=0.25 FUNNEL_PRINT_PLAN=1 timeout 60 "$bin/funnel-run" "$prog" \
  >/dev/null 2>"$dir/err2" &
c2=$!
expect_cpus 'funnel-w1' 1 "the worker of the client on GPU 0, away from its rank's CPU 0"
expect_cpus 'funnel-w2' 1 "the worker of the unbound client on GPU 1: the only free CPU"
expect_cpus 'funnel-server' 1 "the server's main thread with a rank bound to CPU 0"
"$bin/funnelctl" plan >"$dir/out" 2>&1 || fail "funnelctl plan exited $?"
grep -qE '^client 1 \(pid [0-9]+\): GPU 0, the whole GPU, bound to CPUs 0$' "$dir/out" || fail "client 1 in the plan"
grep -qE '^client 2 \(pid [0-9]+\): GPU 1, 25% of its SMs, shared, not bound$' "$dir/out" || fail "client 2 in the plan"
"$bin/funnelctl" plan --json | python3 -c '
import json, sys
j = json.load(sys.stdin)
assert j["applied"] is True and j["affinity"] == "auto", j
assert [g["worker_cpus"] for g in j["gpus"]] == ["1", "1"], j["gpus"]
assert sorted(c["binding"] for c in j["clients"]) == ["0", "0-1"], j["clients"]' || fail "plan --json"
wait $c1 || fail "client 1 exited $?"
wait $c2 || fail "client 2 exited $?"
grep -q '^funnel: placement plan of funnel-server in ' "$dir/err2" || fail "FUNNEL_PRINT_PLAN=1 printed no plan"
grep -qE '^client 2 \(pid [0-9]+\): GPU 1' "$dir/err2" || fail "the printed plan lacks the process itself"
grep -q 'placement plan' "$dir/err1" && fail "a process without FUNNEL_PRINT_PLAN printed the plan"
expect_cpus 'funnel-server' 0 "the server once both clients left"
grep -q 'placement plan (1 client(s), 1 of them bound)' "$dir"/log/*.log || fail "the log lacks the plan for the bound client"
grep -q 'placement plan (1 client(s), 0 of them bound)' "$dir"/log/*.log || fail "the log lacks the plan once it left"
stop_server

# Ranks bound to every core (one on CPU 0, one on CPU 1, both on GPU 0): the workers must share
# cores with ranks; each shares its own rank's CPU (auto), or both share the GPU's (gpu).
for mode in auto gpu; do
  FUNNEL_SERVER_AFFINITY=$mode start_server 1
  FRACTION_HOLD_MS=3000 taskset -c 0 timeout 60 "$bin/funnel-run" "$prog" >/dev/null 2>"$dir/err1" &
  c1=$!
  wait_attached 1  # client 1 first
  FRACTION_HOLD_MS=3000 taskset -c 1 timeout 60 "$bin/funnel-run" "$prog" >/dev/null 2>"$dir/err2" &
  c2=$!
  if [ $mode = auto ]; then
    expect_cpus 'funnel-w1' 0 "auto, every core bound: the worker of the rank on CPU 0 shares its CPU"
    expect_cpus 'funnel-w2' 1 "auto, every core bound: the worker of the rank on CPU 1 shares its CPU"
    "$bin/funnelctl" plan >"$dir/out" 2>&1 || fail "funnelctl plan exited $?"
    grep -qE '^client 1 \(pid [0-9]+\): GPU 0, the whole GPU, bound to CPUs 0, its worker shares them$' "$dir/out" ||
      fail "the plan does not say that client 1's worker shares its CPUs"
    "$bin/funnelctl" plan --json | python3 -c '
import json, sys
assert [c["worker_shares_binding"] for c in json.load(sys.stdin)["clients"]] == [True, True]' ||
      fail "plan --json: worker_shares_binding"
  else
    expect_cpus 'funnel-w1|funnel-w2' 0-1 "gpu, every core bound: both workers share the GPU's cores"
    "$bin/funnelctl" plan --json | python3 -c '
import json, sys
j = json.load(sys.stdin)
assert j["affinity"] == "gpu" and not any(c["worker_shares_binding"] for c in j["clients"]), j' ||
      fail "plan --json does not say gpu, or says a worker shares its client's CPUs"
  fi
  wait $c1 || fail "client 1 exited $?"
  wait $c2 || fail "client 2 exited $?"
  stop_server
done

FUNNEL_SERVER_AFFINITY=off start_server 1
FRACTION_HOLD_MS=1500 taskset -c 0 timeout 60 "$bin/funnel-run" "$prog" >/dev/null 2>"$dir/err1" &
c1=$!
sleep 0.7
expect_cpus 'funnel-server|funnel-w.*' 1 "FUNNEL_SERVER_AFFINITY=off: every thread where the server started"
"$bin/funnelctl" plan >"$dir/out" 2>&1 || fail "funnelctl plan exited $?"
grep -q '^FUNNEL_SERVER_AFFINITY=off: this plan is not applied' "$dir/out" || fail "the plan does not say it is not applied"
wait $c1 || fail "client exited $?"
stop_server

unset HWLOC_XMLFILE HWLOC_THISSYSTEM
start_server 0
expect_cpus 'funnel-server' "$mine" "this machine, no GPU found: a server started on CPU 0 may use every CPU"
stop_server
echo PASS
