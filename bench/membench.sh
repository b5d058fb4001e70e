#!/usr/bin/env bash
# membench natively and through funnel-run, in the same run on the same GPU, and a ratio
# table funnel/native per benchmark line.
#   bench/membench.sh [membench options, e.g. --reps 20 --max-bytes 268435456]
# Environment: BUILD_DIR (default build-gpu if it exists, else build), OUT (logs; default
#   $PWD/bench-out), TIMEOUT (seconds per run, default 600), FUNNEL_RUN_OPTS (funnel-run options).
#   ROUNDS (default 3): native and funnel run alternately ROUNDS times each (native first in odd
#   rounds, funnel first in even ones), and the table
#   compares the per-line medians over the rounds (native pageable bandwidth on the H100
#   machine moves by up to 40 % between runs; alternating keeps drift out of the ratio).
#   Every funnel round starts a server of its own (FUNNEL_JOB_ID=membench-PID-ROUND) and
#   stops it after: each round draws a new CUDA context on both sides.
# Writes OUT/native.jsonl, OUT/funnel.jsonl (every round), OUT/*.log and OUT/ratios.txt; prints the table.
# For bandwidth lines the ratio is funnel GB/s / native GB/s (1.0 = as fast, lower = slower);
# for latency lines it is funnel µs / native µs (higher = slower).
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ -z ${BUILD_DIR:-} ]]; then
  if [[ -x $ROOT/build-gpu/bin/membench ]]; then BUILD_DIR=$ROOT/build-gpu; else BUILD_DIR=$ROOT/build; fi
fi
OUT_DIR=${OUT:-$PWD/bench-out}
TIMEOUT=${TIMEOUT:-600}
mkdir -p "$OUT_DIR"
MB=$BUILD_DIR/bin/membench
FR=$BUILD_DIR/bin/funnel-run
FCTL=$BUILD_DIR/bin/funnelctl
for f in "$MB" "$FR" "$FCTL"; do
  [[ -x $f ]] || { echo "membench.sh: $f not found: build funnel first (BUILD_DIR=$BUILD_DIR)" >&2; exit 2; }
done
OPTS=()
if [[ -n ${FUNNEL_RUN_OPTS+x} ]]; then
  read -r -a OPTS <<<"$FUNNEL_RUN_OPTS"
elif "$FR" --help 2>&1 | grep -q -- '--backend'; then
  OPTS=(--backend cuda)
fi
export FUNNEL_BACKEND=cuda

ROUNDS=${ROUNDS:-3}
rc=0
: >"$OUT_DIR/native.jsonl"
: >"$OUT_DIR/funnel.jsonl"
run_native() {
  echo "=== round $r/$ROUNDS: membench native"
  LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
    timeout "$TIMEOUT" "$MB" "$@" >"$OUT_DIR/native.$r.log" 2>&1 || { echo "native membench failed (exit $?)"; rc=1; }
}
run_funnel() {
  # A server of its own per round, stopped after it: a CUDA context draws its small-copy speed
  # when it is made (doc/performance.md, "Two kinds of context"), so one server kept across the
  # rounds would weigh one draw against ROUNDS native ones.
  export FUNNEL_JOB_ID=membench-$$-$r
  echo "=== round $r/$ROUNDS: membench through funnel ($FR ${OPTS[*]})"
  timeout "$TIMEOUT" "$FR" "${OPTS[@]}" "$MB" "$@" >"$OUT_DIR/funnel.$r.log" 2>&1 || { echo "funnel membench failed (exit $?)"; rc=1; }
  "$FCTL" shutdown --timeout 10 >/dev/null 2>&1 || true
}
for ((r = 1; r <= ROUNDS; r++)); do
  # The order alternates too: whichever ran second in a round was measured faster on the H100
  # (doc/performance.md, "Stream priority and GPU replies for small pinned copies").
  if ((r % 2)); then
    run_native "$@"
    run_funnel "$@"
  else
    run_funnel "$@"
    run_native "$@"
  fi
  grep '^{' "$OUT_DIR/native.$r.log" >>"$OUT_DIR/native.jsonl"
  grep '^{' "$OUT_DIR/funnel.$r.log" >>"$OUT_DIR/funnel.jsonl"
done

python3 - "$OUT_DIR/native.jsonl" "$OUT_DIR/funnel.jsonl" <<'PY' | tee "$OUT_DIR/ratios.txt"
import json, sys
import statistics
def load(p):
    """Per (bench, bytes): the row with the median value over the rounds."""
    rounds = {}
    for line in open(p):
        try:
            o = json.loads(line)
        except ValueError:
            continue
        if o.get("bench") == "verify":
            # every round must have checked its data; keep a failing one if any
            failed = any(v is False for v in o.values())
            if ("verify", 0) not in rounds or failed:
                rounds[("verify", 0)] = [o]
            continue
        rounds.setdefault((o["bench"], o.get("bytes", 0)), []).append(o)
    rows = {}
    for key, rs in rounds.items():
        if key[0] == "verify":
            rows[key] = rs[0]
            continue
        field = "gbps" if rs[0].get("gbps") is not None else "us"
        med = statistics.median_low([r[field] for r in rs])
        rows[key] = next(r for r in rs if r[field] == med)
    return rows
nat, fun = load(sys.argv[1]), load(sys.argv[2])
def size(b):
    for u, s in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= s and b % s == 0:
            return f"{b // s} {u}"
    return "-" if b == 0 else str(b)
print(f"{'bench':<20} {'size':>8} {'native':>12} {'funnel':>12} {'unit':>5} {'funnel/native':>14}")
for key in sorted(set(nat) | set(fun), key=lambda k: (k[0], k[1])):
    if key[0] == "verify":
        for name, rows in (("native", nat), ("funnel", fun)):
            v = rows.get(key)
            print(f"{'data check ' + name:<20} {'':>8} " + (" ".join(f"{k}={v[k]}" for k in v if k != 'bench') if v else "missing"))
        continue
    n, f = nat.get(key), fun.get(key)
    unit = "GB/s" if (n or f or {}).get("gbps") is not None else "us"
    field = "gbps" if unit == "GB/s" else "us"
    nv = n[field] if n else None
    fv = f[field] if f else None
    ratio = f"{fv / nv:.3f}" if nv and fv is not None else "-"
    fmt = lambda v: f"{v:12.3f}" if v is not None else f"{'missing':>12}"
    print(f"{key[0]:<20} {size(key[1]):>8} {fmt(nv)} {fmt(fv)} {unit:>5} {ratio:>14}")
PY
exit $rc
