#!/usr/bin/env bash
# scenarios.sh SCENARIO BIN_DIR PROGRAMS_DIR [PRELOAD]
# Multi-process and failure scenarios against one sim-backend server:
#   many         eight programs at once; exactly one server starts
#   kill-client  a client SIGKILLed mid-copy: stats return to baseline, others finish
#   kill-server  the server SIGKILLed while a client copies: the client's call fails within 1 s
#   stop-server  the server SIGSTOPped while a client copies: its call fails within 1 s, saying so
#   static       with FUNNEL_CLIENT_DRIVER=0 a static-cudart program is refused with the fix
#   bad-backend  FUNNEL_BACKEND=bogus is a clear error
#   managed-refused  __managed__ variables in a PTX-only build: the first launch fails
#                cudaErrorNotSupported, the variables named once on stderr
set -u
scenario=$1 bin=$2 progs=$3 preload=${4:-}
dir=$(mktemp -d /tmp/funnel-test.XXXXXX)
export FUNNEL_RUN_DIR=$dir/run FUNNEL_BACKEND=sim FUNNEL_LOG_DIR=$dir/log FUNNEL_IDLE_EXIT_MS=10000
[ -n "$preload" ] && export LD_PRELOAD=$preload ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
cleanup() { timeout 5 "$bin/funnelctl" shutdown >/dev/null 2>&1; rm -rf "$dir"; }
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for f in "$dir"/*.err; do [ -s "$f" ] && { echo "--- $f"; cat "$f"; }; done
  echo "FAIL: $*"  # again last: CI shows the end of a failing test's output
  exit 1
}
server_pids() { pgrep -f "funnel-server --run-dir $FUNNEL_RUN_DIR " ; }
stat_clients() { timeout 5 "$bin/funnelctl" stats --json | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["server"]["clients"], j["totals"]["allocations"], j["totals"]["pinned_allocations"])'; }

# survivor_copying: tests/programs/survive copies in a loop through funnel ($client); sets
# $pid to the server's pid and $t0 to now (ns), just before the server is signalled.
survivor_copying() {
  timeout 20 "$bin/funnel-run" "$progs/survive" > "$dir/c.out" 2> "$dir/c.err" &
  client=$!
  for _ in $(seq 100); do grep -q ready "$dir/c.out" 2>/dev/null && break; sleep 0.1; done
  sleep 0.3
  pid=$(server_pids | head -1)
  [ -n "$pid" ] || fail "no server"
  t0=$(date +%s%N)
}

case $scenario in
many)
  for i in 1 2 3 4 5 6 7 8; do
    timeout 60 "$bin/funnel-run" "$progs/threads" > "$dir/$i.out" 2> "$dir/$i.err" &
  done
  wait
  n=$(server_pids | wc -l)
  [ "$n" -eq 1 ] || fail "expected exactly one server, found $n"
  for i in 1 2 3 4 5 6 7 8; do
    diff -q "$progs/threads.expected" "$dir/$i.out" >/dev/null || fail "client $i output differs"
  done ;;
kill-client)
  "$bin/funnel-run" true >/dev/null 2>&1 || true   # start the server
  base=$(stat_clients) || fail "no stats"
  timeout 60 "$bin/funnel-run" "$progs/threads" > "$dir/ok.out" 2> "$dir/ok.err" &
  good=$!
  # No `timeout` wrapper here: funnel-run execs, so $! is the program itself (ctest's
  # TIMEOUT bounds it).
  "$bin/funnel-run" "$progs/survive" > "$dir/victim.out" 2> "$dir/victim.err" &
  victim=$!
  for _ in $(seq 100); do grep -q ready "$dir/victim.out" 2>/dev/null && break; sleep 0.1; done
  sleep 0.3
  kill -9 $victim
  wait $victim 2>/dev/null
  wait $good || fail "the other client failed"
  diff -q "$progs/threads.expected" "$dir/ok.out" >/dev/null || fail "the other client's output differs"
  for _ in $(seq 50); do [ "$(stat_clients)" = "$base" ] && break; sleep 0.1; done
  now=$(stat_clients)
  [ "$now" = "$base" ] || fail "stats did not return to baseline: '$base' -> '$now'" ;;
kill-server)
  survivor_copying
  kill -9 "$pid"
  wait $client || fail "client rc=$?"
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  grep -q "error: cudaErrorDevicesUnavailable" "$dir/c.out" || fail "client output: $(cat "$dir/c.out")"
  grep -q "next call: cudaErrorDevicesUnavailable" "$dir/c.out" || fail "later call did not fail"
  grep -q "$FUNNEL_RUN_DIR" "$dir/c.err" || fail "no message naming the run directory"
  [ "$ms" -lt 1500 ] || fail "client noticed after $ms ms" ;;
stop-server)
  survivor_copying
  kill -STOP "$pid"
  wait $client
  rc=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  kill -CONT "$pid"
  [ "$rc" -eq 0 ] || fail "client rc=$rc"
  grep -q "error: cudaErrorDevicesUnavailable" "$dir/c.out" || fail "client output: $(cat "$dir/c.out")"
  grep -q "next call: cudaErrorDevicesUnavailable" "$dir/c.out" || fail "later call did not fail"
  grep -q "funnel-server of run directory $FUNNEL_RUN_DIR (pid $pid) is stopped" "$dir/c.err" || fail "no message that the server is stopped"
  [ "$ms" -lt 1500 ] || fail "client noticed after $ms ms"
  echo "the client's call failed $ms ms after the server was stopped" ;;
static)
  FUNNEL_CLIENT_DRIVER=0 "$bin/funnel-run" "$progs/memory_static" > "$dir/s.out" 2> "$dir/s.err"
  rc=$?
  [ "$rc" -eq 3 ] || fail "rc=$rc"
  grep -q "static CUDA runtime.*FUNNEL_CLIENT_DRIVER=1.*nvcc -cudart shared" "$dir/s.err" ||
    fail "message: $(cat "$dir/s.err")" ;;
bad-backend)
  FUNNEL_BACKEND=bogus "$bin/funnel-run" "$progs/memory" > "$dir/b.out" 2> "$dir/b.err"
  rc=$?
  [ "$rc" -eq 2 ] || fail "rc=$rc"
  grep -q "FUNNEL_BACKEND='bogus' is not valid" "$dir/b.err" || fail "message: $(cat "$dir/b.err")" ;;
managed-refused)
  p=managed_vars_ptx
  timeout 60 "$bin/funnel-run" "$progs/$p" > "$dir/$p.out" 2> "$dir/$p.err"
  rc=$?
  [ "$rc" -eq 1 ] || fail "$p: rc=$rc"
  grep -q "cudaGetLastError() -> cudaErrorNotSupported" "$dir/$p.out" || fail "$p: output $(cat "$dir/$p.out")"
  n=$(grep -c "__managed__ variables count, table, unset, pair, scratch cannot be served.*PTX" "$dir/$p.err")
  [ "$n" -eq 1 ] || fail "$p: the message $n times" ;;
*) fail "unknown scenario $scenario" ;;
esac
echo PASS
