#!/usr/bin/env bash
# fault_restart.sh SCENARIO BIN_DIR PROGRAM [PRELOAD]
# A GPU fault recovered by restarting funnel-server (doc/design/faults.md), with real
# processes: a daemonized server with 2 devices whose fault kernel is PROGRAM's fault_here
# (tests/client/fault_restart.cu): the sim's (2 sim devices, FUNNEL_SIM_FAULT_KERNEL), or
# with FAULT_TEST_BACKEND=cuda on a machine with 2 GPUs (1 for exec-fails), a real fault.
#   restart     A faults device 0 and gets the error; B keeps working on device 1
#               throughout; C, started while the restart is due, waits, then runs on
#               device 0 after B left and the server re-executed itself (same pid)
#   exec-fails  the server cannot re-execute (its binary lost its x bit): it logs why,
#               exits non-zero and removes the run directory; nothing hangs
set -u
scenario=$1 bin=$2 prog=$3 preload=${4:-}
dir=$(mktemp -d /tmp/funnel-test.XXXXXX)
export FUNNEL_RUN_DIR=$dir/run FUNNEL_LOG_DIR=$dir/log FUNNEL_ATTACH_TIMEOUT_MS=30000
[ -n "$preload" ] && export LD_PRELOAD=$preload ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
fault_kernel=_Z10fault_herev
backend=${FAULT_TEST_BACKEND:-sim}
export FUNNEL_BACKEND=$backend
cleanup() { timeout 5 "$bin/funnelctl" shutdown >/dev/null 2>&1; rm -rf "$dir"; }
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for f in "$dir"/*.out "$dir"/*.err "$dir"/log/*; do [ -s "$f" ] && { echo "--- $f"; cat "$f"; }; done
  ls -la "$dir" "$dir"/log "$FUNNEL_RUN_DIR" 2>&1
  # Again last: CI shows the end of a failing test's output.
  echo "FAIL: $*"
  exit 1
}
server_pids() { pgrep -f "funnel-server --run-dir $FUNNEL_RUN_DIR " ; }
log() { cat "$dir"/log/*.log 2>/dev/null; }
wait_for() {  # wait_for SECONDS COMMAND...: until COMMAND succeeds
  local end=$(( $(date +%s) + $1 )); shift
  until "$@"; do [ "$(date +%s)" -lt "$end" ] || return 1; sleep 0.1; done
}
in_log() { log | grep -q -- "$1"; }
# Up means answering: the socket file exists a moment before the server listens on it.
answers() { timeout 5 "$bin/funnelctl" stats >/dev/null 2>&1; }

case $scenario in
restart)
  # Daemonized, as funnel-run starts it; the restarted image must keep the pid.
  "$bin/funnel-server" --run-dir "$FUNNEL_RUN_DIR" --backend "$backend" --sim-devices 2 --sim-fault-kernel $fault_kernel \
    --idle-exit-ms 30000 --log-dir "$FUNNEL_LOG_DIR" || fail "the server did not start"
  wait_for 30 answers || fail "the server does not answer"
  pid=$(server_pids)
  [ "$(echo "$pid" | wc -w)" -eq 1 ] || fail "expected one server, found '$pid'"

  timeout 80 "$bin/funnel-run" "$prog" work 1 "$dir/stop-b" > "$dir/b.out" 2> "$dir/b.err" &
  b=$!
  wait_for 20 grep -q ready "$dir/b.out" || fail "B did not start"

  timeout 30 "$bin/funnel-run" "$prog" fault 0 > "$dir/a.out" 2> "$dir/a.err" || fail "A rc=$?"
  grep -q "synchronize: cudaErrorIllegalAddress" "$dir/a.out" || fail "A did not get the fault"
  grep -q "next call: cudaErrorIllegalAddress" "$dir/a.out" || fail "A's fault is not sticky"
  wait_for 10 in_log "re-executes itself" || fail "no restart is due"

  # C connects while B still works: it waits in the backlog; no second server starts.
  timeout 60 "$bin/funnel-run" "$prog" once 0 > "$dir/c.out" 2> "$dir/c.err" &
  c=$!
  sleep 1.5
  kill -0 $c 2>/dev/null || fail "C did not wait (rc: $(wait $c; echo $?))"
  [ ! -s "$dir/c.out" ] || fail "C ran before the restart"
  [ "$(server_pids)" = "$pid" ] || fail "servers: '$(server_pids)', expected only $pid"
  kill -0 $b 2>/dev/null || fail "B stopped"

  touch "$dir/stop-b"
  wait $b || fail "B rc=$?"
  grep -q "ok: device 1, many round trips" "$dir/b.out" || fail "B's output: $(cat "$dir/b.out")"
  wait $c || fail "C rc=$?"
  grep -q "ok: device 0, one round trip" "$dir/c.out" || fail "C's output: $(cat "$dir/c.out")"

  # One server, the same pid, restarted; one log file with both images' lines.
  [ "$(server_pids)" = "$pid" ] || fail "servers after the restart: '$(server_pids)', expected $pid"
  [ "$(ls "$dir/log" | wc -l)" -eq 1 ] || fail "log files: $(ls "$dir/log")"
  in_log "device 0: GPU fault (status 700) observed first by client" || fail "no fault line"
  in_log "restarting to recover device 0" || fail "no restart line"
  in_log "funnel-server $pid restarted after a GPU fault" || fail "no restarted line"
  [ "$(log | grep -c "attached: pid .* command '.*fault_restart once 0'")" -eq 1 ] || fail "C did not attach once"
  log | grep -q "attached: pid .* command '.*fault_restart work 1" || fail "B's attach is not logged"
  [ "$(timeout 5 "$bin/funnelctl" stats --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["server"]["pid"])')" = "$pid" ] \
    || fail "funnelctl does not reach pid $pid" ;;
exec-fails)
  # A copy of the binary whose x bit goes once it runs: execv of /proc/self/exe fails.
  mkdir "$dir/bin"
  cp "$bin/funnel-server" "$dir/bin/funnel-server"
  "$dir/bin/funnel-server" --run-dir "$FUNNEL_RUN_DIR" --backend "$backend" --sim-fault-kernel $fault_kernel \
    --idle-exit-ms 30000 --log-dir "$FUNNEL_LOG_DIR" --foreground 2> "$dir/server.err" &
  server=$!
  wait_for 30 answers || fail "the server does not answer"
  chmod a-x "$dir/bin/funnel-server"
  timeout 30 "$bin/funnel-run" "$prog" fault 0 > "$dir/a.out" 2> "$dir/a.err" || fail "A rc=$?"
  grep -q "synchronize: cudaErrorIllegalAddress" "$dir/a.out" || fail "A did not get the fault"
  timeout 20 tail --pid=$server -f /dev/null || fail "the server did not exit"
  wait $server
  rc=$?
  [ "$rc" -ne 0 ] || fail "the server exited 0"
  in_log "cannot restart: execv .*: Permission denied; stopping instead" || fail "no exec error in the log"
  [ ! -e "$FUNNEL_RUN_DIR" ] || fail "the run directory is left: $(ls -la "$FUNNEL_RUN_DIR")"
  # The next client starts a new server as usual.
  timeout 30 "$bin/funnel-run" "$prog" once 0 > "$dir/c.out" 2> "$dir/c.err" || fail "C rc=$?"
  grep -q "ok: device 0, one round trip" "$dir/c.out" || fail "C's output: $(cat "$dir/c.out")" ;;
*) fail "unknown scenario $scenario" ;;
esac
echo PASS
