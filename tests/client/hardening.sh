#!/usr/bin/env bash
# hardening.sh SCENARIO BIN_DIR PROGRAMS_DIR [PRELOAD]
# What no client, user or bad setting may do to the node's funnel-server (doc/reliability.md,
# "Hostile and careless peers"), with the real funnel-server on the sim backend:
#   descriptors       under `ulimit -n 1024`, a client holding 1100 pinned buffers while another
#                     client runs; the server's descriptors and log stay small; a soft limit
#                     below the hard one is raised
#   idle-connections  a server limited to 48 descriptors and 80 connections that say nothing:
#                     no busy loop, a short log, the refused ones told why (RLIMIT_NOFILE), the
#                     idle ones closed after the hello timeout, a client runs afterwards
#   planted-log-dir   a log directory another user (uid 65534) can write, full of links to the
#                     victim's files: refused with the fix, the files intact
#   run-dir-files     FUNNEL_RUN_DIR at a directory of the user's files: refused, nothing removed
#   failed-start      a server that cannot start leaves no start lock and no directory
#   killed-server     a SIGKILLed server's run directory is removed by its client
#   max-clients       the refusal names FUNNEL_MAX_CLIENTS
#   mem-limit-device  FUNNEL_DEVICE_MEM_LIMIT for a device the process cannot see is an error
#   pinned-full       cudaMallocHost on a full run directory says why on stderr
set -u
scenario=$1 bin=$2 progs=$3 preload=${4:-}
# shellcheck source=tests/client/sim_env.sh
. "$(dirname "$0")/sim_env.sh"
sim_env "$bin" "$preload"
fail() {
  echo "FAIL: $*"
  for f in "$dir"/*.out "$dir"/*.err "$dir"/log/*.log; do [ -f "$f" ] && { echo "--- $f"; tail -40 "$f"; }; done
  echo "FAIL: $*"  # again last: CI shows the end of a failing test's output
  exit 1
}
server_pid() { pgrep -f "funnel-server --run-dir $FUNNEL_RUN_DIR " | head -1; }
wait_for() {  # wait_for FILE PATTERN: until the file has a matching line (20 s)
  for _ in $(seq 200); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

case $scenario in
descriptors)
  # A soft limit below the hard one: the server raises it.
  hard=$(ulimit -Hn)
  (ulimit -Sn 256 && "$bin/funnel-run" true) || fail "funnel-run true under ulimit -Sn 256"
  pid=$(server_pid)
  [ -n "$pid" ] || fail "no server"
  soft=$(awk '/Max open files/ {print $4}' "/proc/$pid/limits")
  [ "$soft" = "$hard" ] || [ "$hard" = unlimited ] || fail "the server's soft limit is $soft, the hard one $hard"
  timeout 5 "$bin/funnelctl" shutdown --force >/dev/null 2>&1
  for _ in $(seq 50); do [ -z "$(server_pid)" ] && break; sleep 0.1; done
  # Both limits 1024: 1100 pinned buffers in one client, another client beside it.
  (
    ulimit -n 1024
    mkfifo "$dir/hold.in"
    "$bin/funnel-run" "$progs/pinned_hold" 1100 4096 <"$dir/hold.in" >"$dir/hold.out" 2>"$dir/hold.err" &
    exec 3>"$dir/hold.in"
    wait_for "$dir/hold.out" '^held 1100' || { grep error "$dir/hold.out"; exit 1; }
    "$bin/funnel-run" "$progs/memory" >"$dir/memory.out" 2>"$dir/memory.err" || exit 2
    find "/proc/$(server_pid)/fd" -mindepth 1 | wc -l >"$dir/server_fds"
    exec 3>&-
    wait
  ) || fail "under ulimit -n 1024 (1: the holder, 2: the second client)"
  grep -q '^freed' "$dir/hold.out" || fail "the holder did not free its buffers"
  diff -q "$progs/memory.expected" "$dir/memory.out" >/dev/null || fail "the second client's output differs"
  fds=$(cat "$dir/server_fds")
  ((fds < 100)) || fail "the server held $fds descriptors for 1100 pinned buffers"
  lines=$(cat "$dir"/log/*.log | wc -l)
  ((lines < 200)) || fail "the server's log has $lines lines" ;;
idle-connections)
  (ulimit -n 48 && exec "$bin/funnel-server" --run-dir "$FUNNEL_RUN_DIR" --backend sim --idle-exit-ms 60000 \
    --hello-timeout-ms 1500) || fail "the server did not start"
  pid=$(server_pid)
  python3 - "$FUNNEL_RUN_DIR/server.sock" >"$dir/idle.out" 2>"$dir/idle.err" <<'PY' &
import socket, sys, time
conns = []
for _ in range(80):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(sys.argv[1])
    conns.append(s)
print("connected", len(conns), flush=True)
told, closed = 0, 0
deadline = time.time() + 15
for s in conns:
    s.settimeout(max(0.1, deadline - time.time()))
    try:
        data = s.recv(4096)
    except socket.timeout:
        continue
    if not data:
        closed += 1
    elif b"RLIMIT_NOFILE" in data:
        told += 1
print("told", told, "closed", closed, flush=True)
PY
  py=$!
  wait_for "$dir/idle.out" '^connected 80' || fail "could not connect 80 times"
  t0=$(cpu_ticks "$pid")
  sleep 1
  t1=$(cpu_ticks "$pid")
  (((t1 - t0) < 30)) || fail "the server used $((t1 - t0)) ticks of CPU in 1 s out of descriptors (busy loop)"
  wait $py
  read -r _ told _ closed < <(grep '^told' "$dir/idle.out")
  ((told > 0)) || fail "no refused connection was told why"
  ((told + closed == 80)) || fail "$told told + $closed closed of 80 connections"
  lines=$(cat "$dir"/log/*.log | wc -l)
  ((lines < 150)) || fail "the server's log has $lines lines"
  grep -q 'RLIMIT_NOFILE' "$dir"/log/*.log || fail "the log does not name the limit"
  "$bin/funnel-run" "$progs/memory" >"$dir/memory.out" 2>"$dir/memory.err" || fail "a client after the storm"
  diff -q "$progs/memory.expected" "$dir/memory.out" >/dev/null || fail "the client's output differs" ;;
planted-log-dir)
  [ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root to plant a directory as another user"; exit 77; }
  planted=$dir/planted
  mkdir -m 0777 "$planted"
  chmod 0777 "$planted"
  chown 65534:65534 "$planted"
  echo precious >"$dir/victim"
  chmod 600 "$dir/victim"
  for p in $(seq 1 400); do ln -s "$dir/victim" "$planted/funnel-server-nojob-$p.log"; done
  ln -s "$dir/victim" "$planted/funnel-report-$(hostname)-1.txt.tmp"
  if FUNNEL_LOG_DIR=$planted "$bin/funnel-server" --run-dir "$FUNNEL_RUN_DIR" --backend sim 2>"$dir/server.err"; then
    fail "the server started with a planted log directory"
  fi
  if ! grep -q "$planted" "$dir/server.err" || ! grep -q 'FUNNEL_LOG_DIR' "$dir/server.err"; then
    fail "the refusal does not name the directory and the variable: $(cat "$dir/server.err")"
  fi
  [ "$(cat "$dir/victim")" = precious ] || fail "the victim's file was written"
  [ ! -e "$FUNNEL_RUN_DIR/server.sock" ] || fail "a socket was left" ;;
run-dir-files)
  project=$dir/project
  mkdir -m 0700 "$project"
  for f in channel.1 pinned.1.1 start.lock notes.txt; do echo mine >"$project/$f"; done
  if FUNNEL_RUN_DIR=$project "$bin/funnel-run" "$progs/memory" >"$dir/memory.out" 2>"$dir/memory.err"; then
    fail "a program ran with FUNNEL_RUN_DIR at a directory of the user's files"
  fi
  grep -q 'funnel did not make' "$dir/memory.err" || fail "the refusal does not say why"
  for f in channel.1 pinned.1.1 start.lock notes.txt; do
    [ "$(cat "$project/$f")" = mine ] || fail "$f was changed or removed"
  done ;;
failed-start)
  if FUNNEL_SERVER=/bin/false "$bin/funnel-run" "$progs/memory" >"$dir/memory.out" 2>"$dir/memory.err"; then
    fail "a program ran without a server"
  fi
  grep -q 'funnel-server' "$dir/memory.err" || fail "no message: $(cat "$dir/memory.err")"
  [ ! -e "$FUNNEL_RUN_DIR" ] || fail "the failed start left $(ls -A "$FUNNEL_RUN_DIR")" ;;
killed-server)
  timeout 30 "$bin/funnel-run" "$progs/survive" >"$dir/c.out" 2>"$dir/c.err" &
  client=$!
  wait_for "$dir/c.out" ready || fail "the client did not start"
  pid=$(server_pid)
  kill -9 "$pid"
  wait $client
  for _ in $(seq 150); do [ -e "$FUNNEL_RUN_DIR" ] || break; sleep 0.1; done  # 15 s: a loaded CI machine
  [ ! -e "$FUNNEL_RUN_DIR" ] || fail "the dead server's run directory stays: $(ls -A "$FUNNEL_RUN_DIR")" ;;
max-clients)
  mkfifo "$dir/hold.in"
  FUNNEL_MAX_CLIENTS=1 "$bin/funnel-run" "$progs/pinned_hold" 1 4096 <"$dir/hold.in" >"$dir/hold.out" 2>"$dir/hold.err" &
  exec 3>"$dir/hold.in"
  wait_for "$dir/hold.out" '^held 1' || fail "the first client did not start"
  if "$bin/funnel-run" "$progs/memory" >"$dir/memory.out" 2>"$dir/memory.err"; then fail "a second client ran"; fi
  grep -q 'FUNNEL_MAX_CLIENTS' "$dir/memory.err" || fail "the refusal does not name FUNNEL_MAX_CLIENTS"
  exec 3>&-
  wait ;;
mem-limit-device)
  if FUNNEL_DEVICE_MEM_LIMIT=7=1G "$bin/funnel-run" "$progs/memory" >"$dir/memory.out" 2>"$dir/memory.err"; then
    fail "a limit for device 7 of a one-device server was accepted"
  fi
  grep -q "FUNNEL_DEVICE_MEM_LIMIT='7=1G' is not valid here: it limits device 7, but this process sees 1 device" \
    "$dir/memory.err" || fail "the message does not say why" ;;
pinned-full)
  [ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root to mount a small tmpfs"; exit 77; }
  mkdir "$dir/tiny"
  mount -t tmpfs -o size=24m,mode=0700 tmpfs "$dir/tiny" || { echo "SKIP: cannot mount a tmpfs here"; exit 77; }
  trap 'FUNNEL_RUN_DIR=$dir/tiny/run timeout 5 "$bin/funnelctl" shutdown >/dev/null 2>&1; umount -l "$dir/tiny"; rm -rf "$dir"' EXIT
  if FUNNEL_RUN_DIR=$dir/tiny/run "$bin/funnel-run" "$progs/pinned_hold" 1 67108864 </dev/null >"$dir/hold.out" 2>"$dir/hold.err"; then
    fail "a 64 MiB pinned buffer fit in a 24 MiB tmpfs"
  fi
  grep -q 'cudaErrorMemoryAllocation' "$dir/hold.out" || fail "not cudaErrorMemoryAllocation: $(cat "$dir/hold.out")"
  grep -q 'cudaMallocHost(67108864 bytes) failed: pinned buffers live in the run directory .* MiB free' "$dir/hold.err" ||
    fail "stderr does not say why" ;;
*)
  echo "unknown scenario $scenario" >&2
  exit 2 ;;
esac
echo "PASS: $scenario"
