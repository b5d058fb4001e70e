#!/usr/bin/env bash
# shellcheck disable=SC2154  # pid_NAME: set by eval in client()
# funnelctl_server.sh SCENARIO BIN_DIR CTL_HOLD [PRELOAD]
# funnelctl against a sim funnel-server with real clients (tests/client/programs/ctl_hold.cu,
# which prints "ready", keeps calling the runtime for CTL_HOLD_MS, then prints "done"):
#   status-clients  status (table, --json, a stale run directory, --job, --all) and clients
#                   (memory in use and peak, launches, bytes each way, SM share, GPU)
#   terminate       one of two clients is terminated: it fails with a message that says so,
#                   the other finishes normally, clients no longer lists it, the server logs it
#   shutdown        graceful (waits for the client, refuses new ones), --timeout (stops the
#                   client at the deadline), --force and no client (at once), a server left a
#                   zombie by a parent that does not reap it (stopped all the same)
#   defaults        defaults for new clients: shown, set, applied to a client that set none,
#                   not to one that set its own; bad values exit 2
set -u
scenario=$1 bin=$2 prog=$3 preload=${4:-}
# shellcheck source=tests/client/sim_env.sh
. "$(dirname "$0")/sim_env.sh"
sim_env "$bin" "$preload"
ctl=$bin/funnelctl
fail() {
  echo "FAIL: $*"
  for f in "$dir"/*.out "$dir"/*.err "$dir"/log/*; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done
  echo "FAIL: $*"  # again last: CI shows the end of a failing test's output
  exit 1
}
start_server() { "$bin/funnel-server" --sim-devices 2 --idle-exit-ms 60000 || fail "the server did not start"; }
# client NAME [VAR=value...]: ctl_hold in the background through funnel-run; its pid in $pid_NAME.
client() {
  local name=$1
  shift
  # Emptied here, not by the background job's redirection: that runs in the child, which may
  # start after the caller's wait_for has read the previous client's "ready" from the old file.
  : >"$dir/$name.out"
  : >"$dir/$name.err"
  env "$@" "$bin/funnel-run" "$prog" >>"$dir/$name.out" 2>>"$dir/$name.err" &
  eval "pid_$name=$!"
}
# wait_for FILE PATTERN: until the file has a line matching it (10 s).
wait_for() {
  for _ in $(seq 500); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.02; done
  fail "no '$2' in $1"
}
clients_json() { "$ctl" clients --json >"$dir/clients.json" 2>"$dir/ctl.err" || fail "clients --json exited $?"; }
server_pid() { "$ctl" status --json | sed -n 's/^ *"pid": \([0-9]*\),*$/\1/p' | head -1; }

case $scenario in
status-clients)
  "$ctl" status >"$dir/status.out" 2>&1 && fail "status without a server exited 0"
  grep -q "$FUNNEL_RUN_DIR .*stale (no server answers)" "$dir/status.out" || fail "no stale line"
  start_server
  "$ctl" status >"$dir/status.out" 2>&1 || fail "status exited $?"
  grep -qE "^$FUNNEL_RUN_DIR +[0-9]+ +root +sim +running +0 +[0-9]+s +0 0000:00:00.0 ok, 1 0000:01:00.0 ok$" \
    "$dir/status.out" || fail "status row"
  "$ctl" status --json >"$dir/status.json" || fail "status --json exited $?"
  for k in '"run_dir": "'"$FUNNEL_RUN_DIR"'"' '"backend": "sim"' '"user": "root"' '"uid": 0' '"uptime_s":' \
    '"pci_bus_id": "0000:01:00.0"' '"state": "ok"'; do
    grep -qF "$k" "$dir/status.json" || fail "status --json has no $k"
  done
  client a CTL_HOLD_MS=20000 FUNNEL_GPU_FRACTION=0.25
  wait_for "$dir/a.out" '^ready$'
  "$ctl" clients >"$dir/clients.out" 2>&1 || fail "clients exited $?"
  # ID PID RANK GPU SM MEM PEAK LAUNCHES H2D D2H ERRORS PICKUP BUSY STATE COMMAND
  grep -qE "^1 +$pid_a +- +0 +25% +64.0 MiB +64.0 MiB +1 +1\.[0-9] MiB +1.0 MiB +0 +[0-9]+/[0-9]+ +[0-9]+\.[0-9]{3}s +running +.*ctl_hold" \
    "$dir/clients.out" || fail "clients row"
  clients_json
  for k in '"device_memory_peak_bytes": 67108864' '"gpu_fraction": 0.25' '"home_device": 0' '"launches": 1' \
    "\"run_dir\": \"$FUNNEL_RUN_DIR\""; do
    grep -qF "$k" "$dir/clients.json" || fail "clients --json has no $k"
  done
  # --job and --all find run directories under /dev/shm by name; stale ones are listed as such.
  job=ctltest$$
  live=/dev/shm/funnel-$(id -u)-$job stale=/dev/shm/funnel-$(id -u)-${job}x stale2=/dev/shm/funnel-$(id -u)-${job}y
  # Two stale ones: `--all shutdown` below must find several directories even once the live
  # server has removed its own (with one, it would name that one and exit 1).
  mkdir -m 700 "$stale" "$stale2" || fail "mkdir $stale $stale2"
  trap 'FUNNEL_RUN_DIR=$live timeout 5 "$ctl" shutdown --force >/dev/null 2>&1; rm -rf "$stale" "$stale2" "$dir"; kill $pid_a 2>/dev/null' EXIT
  FUNNEL_RUN_DIR=$live "$bin/funnel-server" --sim-devices 1 --idle-exit-ms 60000 || fail "the /dev/shm server did not start"
  "$ctl" --job "$job" status >"$dir/job.out" 2>&1 || fail "--job status exited $?"
  grep -qE "^$live +[0-9]+ +root +sim +running" "$dir/job.out" || fail "--job did not find $live"
  grep -q "${job}x" "$dir/job.out" && fail "--job listed another job"
  "$ctl" --all status >"$dir/all.out" 2>&1 || fail "--all status exited $?"
  grep -qE "^$live +[0-9]+ " "$dir/all.out" || fail "--all did not find $live"
  grep -qE "^$stale +- +- +- +stale \(no server answers\)" "$dir/all.out" || fail "--all: $stale not stale"
  "$ctl" --job "$job" shutdown >/dev/null 2>&1 || fail "--job shutdown exited $?"
  "$ctl" --job nosuchjob$$ status >"$dir/none.out" 2>&1
  [ $? -eq 1 ] || fail "--job of no run directory: not exit 1"
  grep -qF "no run directory /dev/shm/funnel-*-nosuchjob$$" "$dir/none.out" || fail "--job: no clear message"
  "$ctl" --all shutdown >"$dir/many.out" 2>&1
  [ $? -eq 2 ] || fail "shutdown of several servers: not exit 2"
  grep -q "run directories found; name one with --run-dir" "$dir/many.out" || fail "shutdown of several: message"
  kill $pid_a
  # root (an admin) finds and asks another user's server of a job, which refuses root as a
  # client; only where this runs as root and setpriv can start a server as nobody.
  if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null; then
    other=/dev/shm/funnel-65534-$job
    trap 'FUNNEL_RUN_DIR=$other timeout 5 "$ctl" shutdown --force >/dev/null 2>&1; rm -rf "$stale" "$stale2" "$dir"' EXIT
    # nobody's own log directory: a server refuses one that another user owns or can write.
    chmod 711 "$dir" && mkdir -m 700 "$dir/nobody-log" && chown 65534:65534 "$dir/nobody-log"
    FUNNEL_RUN_DIR=$other FUNNEL_LOG_DIR=$dir/nobody-log setpriv --reuid=65534 --regid=65534 --clear-groups \
      env -u FUNNEL_SIM_LAUNCH_LOG "$bin/funnel-server" --sim-devices 1 --idle-exit-ms 60000 || fail "no server as nobody"
    "$ctl" --job "$job" status >"$dir/root.out" 2>&1 || fail "root's --job status exited $?"
    grep -qE "^$other +[0-9]+ +nobody +sim +running" "$dir/root.out" || fail "root did not see nobody's server"
    FUNNEL_RUN_DIR=$other FUNNEL_ATTACH_TIMEOUT_MS=2000 "$bin/funnel-run" "$prog" >"$dir/root-client.out" \
      2>"$dir/root-client.err" && fail "root attached to nobody's server as a client"
    grep -qE 'serves uid 65534 only|belongs to uid 65534' "$dir/root-client.err" || fail "root's attach: no reason"
    grep -q 'control connection of pid [0-9]* of uid 0 (root) accepted' "$dir"/nobody-log/* || fail "not logged"
    "$ctl" --run-dir "$other" shutdown >/dev/null 2>&1 || fail "root's shutdown of nobody's server exited $?"
  else
    echo "not root or no setpriv: root's access to another user's server not tested"
  fi
  ;;
terminate)
  start_server
  client a CTL_HOLD_MS=30000
  client b CTL_HOLD_MS=1500
  wait_for "$dir/a.out" '^ready$'
  wait_for "$dir/b.out" '^ready$'
  "$ctl" terminate 999 >"$dir/t.out" 2>&1
  [ $? -eq 1 ] || fail "terminate of no such client: not exit 1"
  grep -q "funnel-server in $FUNNEL_RUN_DIR: no client with id or pid 999" "$dir/t.out" || fail "no such client: message"
  "$ctl" terminate --pid "$pid_a" >"$dir/t.out" 2>&1 || fail "terminate exited $?"
  grep -qE "^client [0-9]+ \(pid $pid_a\) terminated; its resources are freed$" "$dir/t.out" || fail "terminate: output"
  wait $pid_a
  rc=$?
  [ $rc -eq 3 ] || fail "the terminated client exited $rc, not 3"
  grep -q '^error cudaErrorDevicesUnavailable' "$dir/a.out" || fail "the terminated client's call did not fail"
  grep -q 'this process was terminated by funnelctl terminate' "$dir/a.err" || fail "no message that it was terminated"
  grep -q '^done$' "$dir/a.out" && fail "the terminated client finished"
  wait $pid_b || fail "the other client exited $?"
  grep -q '^done$' "$dir/b.out" || fail "the other client did not finish"
  clients_json
  grep -q "\"pid\": $pid_a," "$dir/clients.json" && fail "clients still lists the terminated client"
  grep -q "\"clients_terminated\": 1" <("$ctl" stats --json | tr ',' '\n' | sed 's/:/: /') ||
    fail "stats: clients_terminated is not 1"
  grep -qE "client [0-9]+ terminated by pid [0-9]+ \(funnelctl\): pid $pid_a " "$dir"/log/* || fail "the server did not log it"
  ;;
shutdown)
  # Graceful: the server takes no new client and stops once the attached one has left.
  start_server
  client a CTL_HOLD_MS=4000
  wait_for "$dir/a.out" '^ready$'
  spid=$(server_pid)
  "$ctl" shutdown --timeout 30 >"$dir/s.out" 2>&1 &
  sh_pid=$!
  wait_for "$dir/s.out" 'waiting up to 30 s for 1 client(s) to detach'
  "$ctl" status >"$dir/st.out" 2>&1
  grep -q 'draining' "$dir/st.out" || { "$ctl" status --json; fail "status during a graceful shutdown: not draining"; }
  FUNNEL_ATTACH_TIMEOUT_MS=2000 "$bin/funnel-run" "$prog" >"$dir/late.out" 2>"$dir/late.err" && fail "a new client attached"
  grep -q 'shutting down' "$dir/late.err" || fail "the new client was not told why"
  wait $pid_a || fail "the attached client exited $?"
  grep -q '^done$' "$dir/a.out" || fail "the attached client did not finish"
  wait $sh_pid || fail "shutdown exited $?"
  grep -q "^funnel-server $spid ($FUNNEL_RUN_DIR) stopped$" "$dir/s.out" || fail "shutdown: no 'stopped'"
  [ -e "$FUNNEL_RUN_DIR" ] && fail "the run directory is left"
  # --timeout: the client still attached at the deadline is stopped (its calls fail).
  start_server
  client a CTL_HOLD_MS=30000
  wait_for "$dir/a.out" '^ready$'
  start=$(date +%s)
  "$ctl" shutdown --timeout 1 >"$dir/s.out" 2>&1 || fail "shutdown --timeout 1 exited $?"
  wait $pid_a
  [ $? -eq 3 ] || fail "the client stopped at the deadline did not fail"
  [ $(($(date +%s) - start)) -lt 10 ] || fail "shutdown --timeout 1 took too long"
  # --force: at once, with a client attached; no client: at once too.
  start_server
  client a CTL_HOLD_MS=30000
  wait_for "$dir/a.out" '^ready$'
  "$ctl" shutdown --force >"$dir/s.out" 2>&1 || fail "shutdown --force exited $?"
  wait $pid_a
  [ $? -eq 3 ] || fail "the client of a forced shutdown did not fail"
  grep -q 'is gone' "$dir/a.err" || fail "the client of a forced shutdown: no message"
  start_server
  start=$(date +%s%N)
  "$ctl" shutdown >"$dir/s.out" 2>&1 || fail "shutdown of an idle server exited $?"
  [ $((($(date +%s%N) - start) / 1000000)) -lt 10000 ] || fail "shutdown without clients was not immediate (it waits for no client: far below the 60 s drain)"
  # A server whose parent does not reap it (a container's init that reaps late or never; here
  # `sleep`, which the server's shell became) stays a zombie after it stopped: that is stopped.
  bash -c '"$0" --sim-devices 2 --idle-exit-ms 60000 --foreground >/dev/null 2>&1 & exec sleep 120' \
    "$bin/funnel-server" &
  reaper=$!
  for _ in $(seq 500); do "$ctl" status --json >/dev/null 2>&1 && break; sleep 0.02; done
  spid=$(server_pid)
  [ -n "$spid" ] || { kill $reaper; fail "the foreground server did not answer"; }
  timeout 30 "$ctl" shutdown >"$dir/s.out" 2>&1
  rc=$?
  state=$(sed 's/.*) //' /proc/"$spid"/stat 2>/dev/null | cut -c1)
  kill $reaper
  [ $rc -eq 0 ] || fail "shutdown of a server left a zombie by its parent exited $rc (state '${state:-gone}')"
  grep -q "^funnel-server $spid ($FUNNEL_RUN_DIR) stopped$" "$dir/s.out" || fail "shutdown of an unreaped server: no 'stopped'"
  "$ctl" shutdown >"$dir/s.out" 2>&1
  [ $? -eq 1 ] || fail "shutdown without a server: not exit 1"
  grep -q "no funnel-server answers in $FUNNEL_RUN_DIR" "$dir/s.out" || fail "shutdown without a server: message"
  ;;
defaults)
  start_server
  "$ctl" defaults >"$dir/d.out" 2>&1 || fail "defaults exited $?"
  grep -qE '^  fraction +\(the whole GPU\)$' "$dir/d.out" || fail "defaults: fraction"
  "$ctl" defaults --fraction 2 >"$dir/d.out" 2>&1
  [ $? -eq 2 ] || fail "defaults --fraction 2: not exit 2"
  grep -qF "FUNNEL_GPU_FRACTION='2' is not valid" "$dir/d.out" || fail "defaults --fraction 2: message"
  "$ctl" defaults --fraction 0.5 --mem-limit 1G --priority below-normal --json >"$dir/d.json" || fail "defaults set: $?"
  for k in '"fraction": 0.5' '"mem_limit_bytes": 1073741824' '"priority": "below-normal"'; do
    grep -qF "$k" "$dir/d.json" || fail "defaults --json has no $k"
  done
  client a CTL_HOLD_MS=20000
  client b CTL_HOLD_MS=20000 FUNNEL_GPU_FRACTION=0.25 FUNNEL_DEVICE_MEM_LIMIT=2G
  wait_for "$dir/a.out" '^ready$'
  wait_for "$dir/b.out" '^ready$'
  clients_json
  # One line per client, then every key of the client with that pid.
  tr -d ' \n' <"$dir/clients.json" | sed 's/},{/}\n{/g' >"$dir/clients.lines"
  has() {
    local pid=$1
    shift
    for k in "$@"; do grep "\"pid\":$pid," "$dir/clients.lines" | grep -qF "$k" || return 1; done
  }
  has "$pid_a" '"gpu_fraction":0.5,' '"priority":"below-normal"' '"device_mem_limit_bytes":1073741824,' ||
    fail "the defaults were not applied to the client that set none"
  has "$pid_b" '"gpu_fraction":0.25,' '"priority":"below-normal"' '"device_mem_limit_bytes":2147483648,' ||
    fail "the defaults overrode the client's own"
  kill $pid_a $pid_b
  ;;
*)
  fail "unknown scenario $scenario"
  ;;
esac
echo PASS
