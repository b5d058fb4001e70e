#!/usr/bin/env bash
# run_program.sh BIN_DIR PROGRAM EXPECTED [PRELOAD]
# Runs PROGRAM through funnel-run on the sim backend with a private run directory and
# compares its stdout with EXPECTED.  PRELOAD (a sanitizer runtime) goes first in LD_PRELOAD.
set -u
bin=$1 prog=$2 expected=$3 preload=${4:-}
dir=$(mktemp -d /tmp/funnel-test.XXXXXX)
trap 'FUNNEL_RUN_DIR=$dir/run timeout 5 "$bin/funnelctl" shutdown >/dev/null 2>&1; rm -rf "$dir"' EXIT
export FUNNEL_RUN_DIR=$dir/run FUNNEL_BACKEND=sim FUNNEL_LOG_DIR=$dir/log FUNNEL_IDLE_EXIT_MS=10000
[ -n "$preload" ] && export LD_PRELOAD=$preload ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
timeout 60 "$bin/funnel-run" "$prog" > "$dir/out" 2> "$dir/err"
rc=$?
if ! diff -u "$expected" "$dir/out"; then
  echo "FAIL: output differs (rc=$rc); stderr:"; cat "$dir/err"; exit 1
fi
[ "$rc" -eq 0 ] || { echo "FAIL: rc=$rc"; cat "$dir/err"; exit 1; }
# EXPECTED.stderr, when present: each of its lines must appear in stderr exactly once.
if [ -f "$expected.stderr" ]; then
  while IFS= read -r line; do
    n=$(grep -cxF -- "$line" "$dir/err")
    [ "$n" -eq 1 ] || { echo "FAIL: stderr has '$line' $n times, expected once; stderr:"; cat "$dir/err"; exit 1; }
  done < "$expected.stderr"
fi
# A normal exit detaches (the client runtime's unload sends Detach): the server's log says
# so rather than that the client died.
for _ in $(seq 100); do
  grep -q "client [0-9]* detached" "$dir"/log/*.log 2>/dev/null && break
  sleep 0.05
done
if ! grep -q "client [0-9]* detached" "$dir"/log/*.log 2>/dev/null || grep -q "client [0-9]* died" "$dir"/log/*.log; then
  echo "FAIL: the server did not log a clean detach for a normal exit:"; cat "$dir"/log/*.log; exit 1
fi
echo PASS
