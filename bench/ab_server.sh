#!/usr/bin/env bash
# A/B of two funnel-server binaries under the same clients (same build of funnel-run and the
# client runtime, same GPU, same run): what a server change costs or gains.
#   bench/ab_server.sh BASE_SERVER [ROUNDS]
# ROUNDS (default 3) alternations of bench/kernels.sh in funnel mode (launch issue cost, the
# launch+sync round trip, empty and small kernel throughput at NS, default "1 16"), once with
# FUNNEL_SERVER=BASE_SERVER and once with this build's funnel-server (BUILD_DIR, default
# build-gpu).  Prints the median of each figure for both and new/base; writes OUT (default
# $PWD/bench-out/ab)/ab.json.  Used for the accounting's cost (doc/accounting.md).
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
base=$1 rounds=${2:-3}
BUILD_DIR=${BUILD_DIR:-$ROOT/build-gpu}
new=$BUILD_DIR/bin/funnel-server
OUT_DIR=${OUT:-$PWD/bench-out/ab}
for f in "$base" "$new"; do [[ -x $f ]] || { echo "ab_server.sh: no funnel-server at $f" >&2; exit 2; }; done
mkdir -p "$OUT_DIR"
for r in $(seq "$rounds"); do
  for side in base new; do
    server=$base
    [[ $side == new ]] && server=$new
    echo "round $r: $side ($server)"
    # A run directory of its own: no side ever attaches to the other side's server.
    export FUNNEL_RUN_DIR=/dev/shm/funnel-ab-$side-$r-$$
    FUNNEL_SERVER=$server BUILD_DIR=$BUILD_DIR OUT=$OUT_DIR/$side.$r MODES=funnel NS=${NS:-1 16} START_NS=${START_NS:-16} \
      MAX_N_FUNNEL=0 SECONDS_PER_RUN=${SECONDS_PER_RUN:-1.5} "$ROOT/bench/kernels.sh" >"$OUT_DIR/$side.$r.log" 2>&1 ||
      echo "round $r $side: kernels.sh exited $? ($OUT_DIR/$side.$r.log)"
    timeout 20 "$BUILD_DIR/bin/funnelctl" shutdown --force >/dev/null 2>&1
    rm -rf "$FUNNEL_RUN_DIR"
  done
done
python3 - "$OUT_DIR" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
vals = {}
for side in ("base", "new"):
    for r in range(1, rounds + 1):
        try:
            lines = open(f"{out}/{side}.{r}/results.jsonl").read().splitlines()
        except OSError:
            continue
        for line in lines:
            j = json.loads(line)
            if j.get("value") is None:
                continue
            vals.setdefault((j["bench"], j["n"], j["unit"]), {}).setdefault(side, []).append(j["value"])
rows = []
print(f"{'figure':<24} {'N':>4} {'base median':>14} {'new median':>14} {'new/base':>9}  unit (values)")
for (bench, n, unit), v in sorted(vals.items()):
    b, w = v.get("base", []), v.get("new", [])
    if not b or not w:
        continue
    mb, mw = statistics.median(b), statistics.median(w)
    rows.append({"bench": bench, "n": n, "unit": unit, "base": b, "new": w, "ratio": mw / mb if mb else None})
    print(f"{bench:<24} {n:>4} {mb:>14.4g} {mw:>14.4g} {mw / mb if mb else float('nan'):>9.3f}  {unit} {b} {w}")
json.dump(rows, open(f"{out}/ab.json", "w"), indent=1)
PY
