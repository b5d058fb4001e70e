#!/usr/bin/env bash
# busy.sh BIN_DIR BUSY_PROGRAM [MODE [SLACK_MS [PRELOAD]]]
# GPU busy accounting (doc/accounting.md): tests/client/programs/busy.cu keeps one stream busy
# twice for BUSY_MS (300) with IDLE_MS (300) of nothing queued after each, then holds.  While
# it holds, `funnelctl clients --json` must give it a gpu_busy_s of at least the busy time the
# program measured with events and at most that plus SLACK_MS: the idle time is not counted,
# and a span closes when the synchronize that ends it is answered.  MODE: hostfunc (default;
# the sim backend) or kernel (a GPU: tests/gpu/run.sh runs it with the cuda backend).
set -u
bin=$1 prog=$2 mode=${3:-hostfunc} slack_ms=${4:-150} preload=${5:-}
# shellcheck source=tests/client/sim_env.sh
. "$(dirname "$0")/sim_env.sh"
sim_env "$bin" "$preload"
# BUSY_BACKEND=cuda (tests/gpu): the real GPU; the run directory must be on a tmpfs.
if [ "${BUSY_BACKEND:-sim}" = cuda ]; then
  export FUNNEL_BACKEND=cuda FUNNEL_RUN_DIR=/dev/shm/funnel-busy-$$
  trap 'timeout 5 "$bin/funnelctl" shutdown >/dev/null 2>&1; rm -rf "$dir" "$FUNNEL_RUN_DIR"' EXIT
fi
fail() {
  echo "FAIL: $*"
  for f in "$dir"/*.out "$dir"/*.json "$dir"/log/*; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done
  echo "FAIL: $*"  # again last: CI shows the end of a failing test's output
  exit 1
}
"$bin/funnel-server" ${FUNNEL_BACKEND:+--backend "$FUNNEL_BACKEND"} --idle-exit-ms 60000 || fail "the server did not start"
# funnel-run execs the program: $! is its pid (ctest's timeout is the watchdog).
HOLD_MS=10000 "$bin/funnel-run" "$prog" "$mode" >"$dir/busy.out" 2>&1 &
pid=$!
for _ in $(seq 1000); do grep -q '^hold$' "$dir/busy.out" && break; sleep 0.02; done
grep -q '^hold$' "$dir/busy.out" || fail "the program did not reach its hold"
measured=$(sed -n 's/^measured \([0-9.]*\)$/\1/p' "$dir/busy.out")
"$bin/funnelctl" clients --json >"$dir/clients.json" || fail "funnelctl clients --json exited $?"
busy=$(python3 -c '
import json, sys
for c in json.load(open(sys.argv[1])):
    if c["pid"] == int(sys.argv[2]): print(c["gpu_busy_s"])' "$dir/clients.json" "$pid")
[ -n "$busy" ] || fail "clients --json does not list pid $pid"
echo "measured by the program: $measured ms busy (of about $((2 * ${BUSY_MS:-300} + 2 * ${IDLE_MS:-300})) ms);" \
  "funnelctl: gpu_busy_s $busy"
python3 -c '
import sys
m, b, slack = float(sys.argv[1]) / 1000, float(sys.argv[2]), float(sys.argv[3]) / 1000
sys.exit(0 if m * 0.99 <= b <= m + slack else 1)' "$measured" "$busy" "$slack_ms" ||
  fail "gpu_busy_s $busy is not within [$measured ms, $measured + $slack_ms ms]"
"$bin/funnelctl" clients | grep -qE "^[0-9]+ +$pid .* [0-9]+\.[0-9]{3}s +running" || fail "the clients table has no BUSY seconds for $pid"
kill "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
echo "PASS: gpu_busy_s $busy s for $measured ms measured, within $slack_ms ms"
