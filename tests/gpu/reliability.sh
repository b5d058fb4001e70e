#!/usr/bin/env bash
# Issue 6 on the GPU (called by tests/gpu/run.sh; runs alone as well):
#   tests/gpu/reliability.sh BUILD_DIR OUT_DIR
# gpu-busy    tests/client/busy.sh with the cuda backend: a kernel spinning 2 x 300 ms on the
#             GPU timer, with 300 ms idle after each; funnelctl's gpu_busy_s must lie within
#             [the event time, + 5 ms] (doc/accounting.md)
# kill-storm  tests/reliability/kill_storm.sh with the cuda backend: STORM_KILLS (default 40)
#             clients killed at random points while 8 others run and are checked (kernels.cu
#             is not a victim: its made-up pointers fault the device by design)
# soak        tests/reliability/soak.sh with the cuda backend: SOAK_CLIENTS (32) clients of
#             mixed work for SOAK_SECONDS (300; the issue's 30 minutes do not fit the lent
#             machine's 10-minute commands), every run checked, no growth of the server
# Prints "RESULT reliability name PASS|FAIL detail" lines; exit 1 if any failed.
set -u -o pipefail
# shellcheck source=tests/gpu/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
gpu_step "$1" "$2"
P=$OUT_DIR/progs
mkdir -p "$P"
compile() { gpu_compile "$P/$1" "$2"; }  # name source

if compile busy "$ROOT/tests/client/programs/busy.cu"; then
  if BUSY_BACKEND=cuda timeout 120 "$ROOT/tests/client/busy.sh" "$BIN" "$P/busy" kernel 5 >"$OUT_DIR/busy.log" 2>&1; then
    result reliability gpu-busy PASS "$(grep '^measured by' "$OUT_DIR/busy.log")"
  else
    result reliability gpu-busy FAIL "$(grep -E '^(FAIL|measured by)' "$OUT_DIR/busy.log" | tr '\n' ' ') (busy.log)"
  fi
else
  result reliability gpu-busy FAIL "busy.cu does not compile (progs/busy.nvcc.log)"
fi

ok=1
for p in survive memory threads streams hostfunc symbols kernel_api; do
  compile "$p" "$ROOT/tests/programs/$p.cu" || { ok=0; result reliability kill-storm FAIL "$p.cu does not compile (progs/$p.nvcc.log)"; }
  [[ -f $ROOT/tests/programs/$p.expected ]] && cp "$ROOT/tests/programs/$p.expected" "$P/"
done
if [[ $ok == 1 ]]; then
  t0=$SECONDS
  if STORM_BACKEND=cuda STORM_TMP=/dev/shm STORM_VICTIMS="survive memory threads streams hostfunc symbols" \
    timeout 420 "$ROOT/tests/reliability/kill_storm.sh" "$BIN" "$P" "${STORM_KILLS:-40}" >"$OUT_DIR/storm.log" 2>&1; then
    result reliability kill-storm PASS "$(grep '^PASS' "$OUT_DIR/storm.log") in $((SECONDS - t0)) s"
  else
    result reliability kill-storm FAIL "$(grep -E '^FAIL' "$OUT_DIR/storm.log" | head -1) after $((SECONDS - t0)) s (storm.log)"
    # The lent machine returns few files: the clues go to this step's log.
    grep -v '^\[20' "$OUT_DIR/storm.log" | head -150
    grep -E '\] \[(warning|error|critical)\]' "$OUT_DIR/storm.log" | head -40
  fi
fi
if [[ $ok == 1 && ${SOAK_SECONDS:-300} -gt 0 ]]; then
  t0=$SECONDS
  if SOAK_BACKEND=cuda SOAK_TMP=/dev/shm timeout $((${SOAK_SECONDS:-300} + 240)) "$ROOT/tests/reliability/soak.sh" "$BIN" "$P" \
    "${SOAK_SECONDS:-300}" "${SOAK_CLIENTS:-32}" >"$OUT_DIR/soak.log" 2>&1; then
    result reliability soak PASS "$(grep '^PASS' "$OUT_DIR/soak.log")"
  else
    result reliability soak FAIL "$(grep -E '^FAIL' "$OUT_DIR/soak.log" | head -1) after $((SECONDS - t0)) s (soak.log)"
  fi
  grep -v '^\[20' "$OUT_DIR/soak.log" | head -60
fi
exit "$FAILED"
