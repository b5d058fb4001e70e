#!/usr/bin/env bash
# several_at_once.sh BIN_DIR PROGRAM:EXPECTED... [-- PRELOAD]
# Issue 29's "alone and several at once": every PROGRAM twice, all at the same time, through
# funnel-run against one sim server (the first client starts it, the others attach); each run's
# stdout must equal its EXPECTED file, and the server must have seen every client detach.
set -u
bin=$1
shift
pairs=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do pairs+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
# shellcheck source=tests/client/sim_env.sh
. "$(dirname "$0")/sim_env.sh"
sim_env "$bin" "${1:-}"
pids=() names=() i=0
for pair in "${pairs[@]}" "${pairs[@]}"; do
  prog=${pair%%:*}
  timeout 90 "$bin/funnel-run" "$prog" >"$dir/out.$i" 2>"$dir/err.$i" &
  pids+=($!) names+=("$pair")
  i=$((i + 1))
done
fails=0
for j in "${!pids[@]}"; do
  wait "${pids[$j]}"
  rc=$?
  expected=${names[$j]#*:}
  if [ "$rc" -ne 0 ] || ! diff -q "$expected" "$dir/out.$j" >/dev/null; then
    echo "FAIL: ${names[$j]%%:*} (run $j): rc $rc"; diff "$expected" "$dir/out.$j" | head -5; head -5 "$dir/err.$j"
    fails=$((fails + 1))
  fi
done
detached=0
for _ in $(seq 100); do
  detached=$(cat "$dir"/log/*.log 2>/dev/null | grep -c "client [0-9]* detached")
  [ "$detached" -ge "$i" ] && break
  sleep 0.05
done
[ "$detached" -ge "$i" ] || { echo "FAIL: $detached of $i clients detached"; fails=$((fails + 1)); }
servers=$(find "$dir/log" -name "funnel-server*.log" | wc -l)
[ "$servers" -eq 1 ] || { echo "FAIL: $servers server logs, expected one server"; fails=$((fails + 1)); }
[ "$fails" -eq 0 ] && echo "PASS: $i programs at once through one server, each as expected"
exit $((fails != 0))
