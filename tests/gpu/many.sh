#!/usr/bin/env bash
# Issue 6 on the GPU (called by tests/gpu/run.sh; runs alone as well):
#   tests/gpu/many.sh BUILD_DIR OUT_DIR [N]
# N (default 128) clients attach to one cuda funnel-server (--max-clients N) and each runs a
# kernel and checks its result, all attached at once; client N+1 is refused with a clear
# error (cudaErrorMpsMaxClientsReached and the --max-clients message); then all N finish.
# Prints "RESULT many name PASS|FAIL detail" lines; exit 1 if any failed.
set -u -o pipefail
N=${3:-128}
# shellcheck source=tests/gpu/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
gpu_step "$1" "$2"
prog=$BUILD/many
if ! gpu_compile "$prog" "$ROOT/tests/gpu/many.cu"; then
  result many clients FAIL "does not compile ($prog.nvcc.log)"
  exit 1
fi
export FUNNEL_RUN_DIR=/dev/shm/funnel-gpu-many-$$ FUNNEL_LOG_DIR=$OUT_DIR/logs MANY_GO=$OUT_DIR/go
rm -f "$MANY_GO"
cleanup() { touch "$MANY_GO"; timeout 20 "$BIN/funnelctl" shutdown --force >/dev/null 2>&1; }
trap cleanup EXIT
"$BIN/funnel-server" --backend cuda --max-clients "$N" --idle-exit-ms 60000 2>"$OUT_DIR/server.err" ||
  { result many clients FAIL "the server did not start: $(head -c 200 "$OUT_DIR/server.err")"; exit 1; }
t0=$SECONDS
for i in $(seq "$N"); do
  timeout 300 "$BIN/funnel-run" "$prog" >"$OUT_DIR/c$i.out" 2>"$OUT_DIR/c$i.err" &
done
attached=0
for _ in $(seq 1200); do
  attached=$(grep -l '^ready' "$OUT_DIR"/c*.out 2>/dev/null | wc -l)
  [[ $attached -ge $N ]] && break
  sleep 0.1
done
clients=$("$BIN/funnelctl" stats --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["server"]["clients"])')
if [[ $attached -eq $N && $clients -eq $N ]]; then
  result many attached PASS "$N clients attached at once and each ran its kernel right, in $((SECONDS - t0)) s"
else
  result many attached FAIL "$attached of $N ran their kernel; the server counts $clients clients"
fi
timeout 60 "$BIN/funnel-run" "$prog" >"$OUT_DIR/extra.out" 2>"$OUT_DIR/extra.err"
rc=$?
if [[ $rc -ne 0 ]] && grep -q 'cudaErrorMpsMaxClientsReached' "$OUT_DIR/extra.out" &&
  grep -q -- '--max-clients' "$OUT_DIR/extra.err"; then
  result many past-max PASS "client $((N + 1)) refused: $(grep -m1 -o 'refused this client: [^(]*' "$OUT_DIR/extra.err")"
else
  result many past-max FAIL "client $((N + 1)): exit $rc, $(head -c 200 "$OUT_DIR/extra.out") / $(head -c 300 "$OUT_DIR/extra.err")"
fi
touch "$MANY_GO"
wait
ok=$(grep -l '^ok' "$OUT_DIR"/c*.out | wc -l)
if [[ $ok -eq $N ]]; then
  result many finished PASS "all $N clients finished ok"
else
  result many finished FAIL "$ok of $N finished ok (c*.out)"
fi
exit $FAILED
