#!/usr/bin/env bash
# idle_sync.sh BIN_DIR PROGRAMS_DIR [PRELOAD]
# Calls answered in the client:
# cudaStreamSynchronize and cudaStreamQuery of a stream found idle, with nothing queued on it
# since, are answered in the client (doc/design/channel.md, "Idle streams"):
#   - 20000 of each on an idle stream add (almost) no command at the server (funnelctl
#     clients --json: the client's command count; at most 20 more, for whatever else runs);
#     nor do 40000 records of an event without timing on that stream, with 20000
#     synchronizes and 20000 queries of it, and 20000 records and synchronizes of one on an
#     idle blocking stream while the legacy stream has nothing ("Records on idle streams");
#   - 2000 sets of a kernel's dynamic shared memory limit to the value it has, each with
#     occupancy questions (cudaOccupancyMaxActiveBlocksPerMultiprocessor,
#     cudaOccupancyMaxPotentialBlockSize) and a launch, send neither sets nor questions about the
#     kernel after the first answers (at most a command a launch);
#     a set that lowers it refuses a launch above it at once;
#   - work queued afterwards, on that stream or on one sharing its bucket, is waited for
#     (tests/client/programs/idle_sync.cu checks the data).
set -u
bin=$1 progs=$2 preload=${3:-}
# shellcheck source=tests/client/sim_env.sh
. "$(dirname "$0")/sim_env.sh"
sim_env "$bin" "$preload"
ctl=$bin/funnelctl
fail() {
  echo "FAIL: $*"
  for f in "$dir"/*.out "$dir"/*.err "$dir"/log/*.log; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done
  echo "FAIL: $*"  # again last: CI shows the end of a failing test's output
  exit 1
}
wait_for() {
  for _ in $(seq 1000); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.02; done
  fail "no '$2' in $1"
}
# commands PID: the server's count of commands from that client.
commands() {
  "$ctl" clients --json | python3 -c '
import json, sys
pid = int(sys.argv[1])
for c in json.load(sys.stdin):
    if c["pid"] == pid:
        print(c["commands"])
' "$1"
}
"$bin/funnel-server" --sim-devices 1 --idle-exit-ms 60000 || fail "the server did not start"
mkfifo "$dir/in"
"$bin/funnel-run" "$progs/idle_sync" <"$dir/in" >"$dir/prog.out" 2>"$dir/prog.err" &
pid=$!
exec 3>"$dir/in"
wait_for "$dir/prog.out" '^ready$'
before=$(commands $pid)
[ -n "$before" ] || fail "funnelctl clients lists no client with pid $pid"
echo >&3
wait_for "$dir/prog.out" '^idle done$'
after=$(commands $pid)
echo "commands before the idle calls: $before, after 20000 synchronizes and 20000 queries, 60000 event records, 40000 event synchronizes and 20000 event queries: $after"
[ $((after - before)) -le 20 ] || fail "the idle stream's calls went to the server ($before -> $after commands)"
echo >&3
wait_for "$dir/prog.out" '^sets done$'
sets=$(commands $pid)
echo "commands after 2000 sets of a kernel's dynamic shared memory limit to its value, each with occupancy questions and a launch: $sets"
# The launches may take a command each; a set, a question about the kernel's limits or an
# occupancy question each time would add 2000 or more each.
[ $((sets - after)) -le 2040 ] || fail "sets that change nothing went to the server ($after -> $sets commands)"
# and the server's count of waited calls by command (funnelctl clients --json, waited_calls):
# the kernel's attributes asked for once, not before each launch
asked=$("$ctl" clients --json | python3 -c '
import json, sys
for c in json.load(sys.stdin):
    if c["pid"] == int(sys.argv[1]):
        w = c["waited_calls"]
        print(w.get("FuncGetAttributes", 0), w.get("Occupancy", 0))
' $pid)
read -r attributes occupancy <<<"$asked"
echo "waited FuncGetAttributes calls: $attributes, Occupancy calls: $occupancy"
[ -n "$attributes" ] && [ "$attributes" -le 2 ] || fail "the kernel's attributes were asked for $attributes times"
# cudaOccupancyMaxPotentialBlockSize asks once per block size (32 of them), then never again
[ -n "$occupancy" ] && [ "$occupancy" -le 40 ] || fail "occupancy was asked for $occupancy times"
echo >&3
exec 3>&-
wait $pid || fail "idle_sync exited $?"
grep -q '^ok$' "$dir/prog.out" || fail "idle_sync did not print ok"
echo "PASS: idle synchronizes and queries, event records on an idle stream and attribute sets that change nothing answered in the client; later work waited for"
