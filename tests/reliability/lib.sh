# shellcheck shell=bash disable=SC2154,SC2034  # the caller sets bin, progs, dir, steady_progs; base* are its
# Sourced by the reliability scripts (kill_storm.sh, soak.sh): the server's figures, the
# clients that keep running checked programs, and a failure report.  The caller sets bin
# (BIN_DIR), progs (PROGRAMS_DIR with NAME.expected beside each program), dir (a private
# folder), steady_progs (the programs the steady clients cycle through); spid is set by
# start_server.
# At exit: the clients stop, the server goes, the folder too.
cleanup() {
  touch "$dir/stop"
  timeout 10 "$bin/funnelctl" shutdown --force >/dev/null 2>&1
  wait
  rm -rf "$dir"
}
trap cleanup EXIT
threads() {  # threads [PID]: where each thread of the server (or of PID) waits (a hang's first clue)
  local t
  for t in /proc/"${1:-$spid}"/task/*; do
    echo "thread $(basename "$t") $(cat "$t/comm" 2>/dev/null): wchan $(cat "$t/wchan" 2>/dev/null)," \
      "syscall $(cut -d' ' -f1 "$t/syscall" 2>/dev/null), state $(cut -d' ' -f3 "$t/stat" 2>/dev/null)"
  done
}
fail() {  # the reason comes last: CI shows the end of the output
  for f in "$dir"/steady.*.fail; do [ -f "$f" ] && { echo "--- $f"; head -40 "$f"; }; done
  for f in "$dir"/steady.*.hang; do [ -f "$f" ] && { echo "--- $f"; head -160 "$f"; }; done
  tail -30 "$dir"/log/*.log 2>/dev/null
  if [ -n "${spid:-}" ] && [ -d "/proc/$spid" ]; then threads; fi
  echo "FAIL: $*"
  exit 1
}
# totals: clients allocations pinned_allocations streams events device_memory_bytes
totals() {
  timeout 10 "$bin/funnelctl" stats --json | python3 -c '
import json, sys
j = json.load(sys.stdin); t = j["totals"]
print(j["server"]["clients"], t["allocations"], t["pinned_allocations"], t["streams"], t["events"], t["device_memory_bytes"])'
}
rss_kb() { sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$spid/status"; }
fds() { find "/proc/$spid/fd" -mindepth 1 -maxdepth 1 | wc -l; }

start_server() {  # starts the server, warms its caches up, takes the baseline (base, base_fds, base_rss)
  "$bin/funnel-server" --sim-devices 1 --idle-exit-ms 600000 || fail "the server did not start"
  spid=$(timeout 10 "$bin/funnelctl" stats --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["server"]["pid"])')
  # One run of each program first: the server's caches (modules, event pools) reach their
  # steady size before the baseline is taken.
  local p
  for p in "${steady_progs[@]}"; do timeout 60 "$bin/funnel-run" "$progs/$p" >/dev/null 2>&1 || fail "warm-up run of $p failed"; done
  base=$(totals) || fail "no stats"
  base_fds=$(fds)
  base_rss=$(rss_kb)
}

steady() {  # steady I: runs the programs in turn until $dir/stop, checking each output
  local i=$1 n=0 bad=0 p rc
  while [ ! -e "$dir/stop" ]; do
    p=${steady_progs[$(((n + i) % ${#steady_progs[@]}))]}
    timeout 60 "$bin/funnel-run" "$progs/$p" >"$dir/steady.$i.out" 2>"$dir/steady.$i.err" &
    local runner=$!
    # A run still going after 50 s hangs: where its threads wait, and what the server says
    # of it, while it still exists (its stacks too where gdb is installed).
    ( sleep 50; hung=$(pgrep -P "$runner"); [ -n "$hung" ] || exit 0
      { echo "run $n of $p (pid $hung) hangs at $(date +%T.%N); its threads:"; threads "$hung"
        command -v gdb >/dev/null && timeout 20 gdb -batch -p "$hung" -ex 'thread apply all bt' 2>&1 | grep -E '^(Thread|#)' | head -120
        timeout 5 "$bin/funnelctl" clients --json | python3 -c 'import json,sys; [print(c) for c in json.load(sys.stdin) if c.get("pid") == '"$hung"']'
      } >>"$dir/steady.$i.hang" 2>&1 ) &
    local watcher=$!
    wait "$runner"
    rc=$?
    kill "$watcher" 2>/dev/null
    if [ "$rc" -ne 0 ] || ! diff -q "$progs/$p.expected" "$dir/steady.$i.out" >/dev/null; then
      bad=$((bad + 1))
      { echo "run $n of $p: exit $rc at $(date +%T.%N)"; diff "$progs/$p.expected" "$dir/steady.$i.out"
        cat "$dir/steady.$i.err"; [ "$rc" -eq 124 ] && threads
        [ "$rc" -eq 124 ] && timeout 5 "$bin/funnelctl" clients; } >>"$dir/steady.$i.fail" 2>&1
    fi
    n=$((n + 1))
  done
  echo "$n $bad" >"$dir/steady.$i.count"
}

# steady_report: the runs of every steady client (runs, bad), after they stopped.
steady_report() {
  local i nr b
  runs=0 bad=0
  for i in $(seq "$1"); do
    [ -f "$dir/steady.$i.count" ] || fail "steady client $i did not report"
    read -r nr b <"$dir/steady.$i.count"
    [ "$nr" -ge 1 ] || fail "steady client $i never ran"
    runs=$((runs + nr)) bad=$((bad + b))
  done
}
# check_baseline LABEL: once every client left, the server's totals (within 10 s) and its
# descriptors are what they were at the baseline; sets now and now_fds.
check_baseline() {
  now=
  for _ in $(seq 100); do
    now=$(totals) && [ "$now" = "$base" ] && break
    sleep 0.1
  done
  [ "$now" = "$base" ] || fail "$1: the server's totals did not return to baseline: '$base' -> '$now'"
  now_fds=$(fds)
  [ "$now_fds" -eq "$base_fds" ] || fail "$1: the server holds $now_fds descriptors, $base_fds before: $(ls -l "/proc/$spid/fd")"
}
