#!/usr/bin/env bash
# The driver tracer (bench/driver_trace) over a fake driver: the program's answers come through
# unchanged (it checks them), and the report counts what it did.
#   check.sh TRACER_DIR FAKE_DRIVER PROGRAM
set -u -o pipefail
tracer_dir=$1 fake=$2 program=$3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
LD_LIBRARY_PATH=$tracer_dir FUNNEL_TRACE_REAL_DRIVER=$fake FUNNEL_TRACE_OUT=$out FUNNEL_TRACE_VERBOSE=1 \
  "$program" 2>"$out/stderr" || { echo "FAIL: the program under the tracer failed"; cat "$out/stderr"; exit 1; }
grep -q "driver-trace: cuInit" "$out/stderr" || { echo "FAIL: no verbose line for cuInit"; cat "$out/stderr"; exit 1; }
shopt -s nullglob
reports=("$out"/driver-trace-*.json)
[[ ${#reports[@]} == 1 ]] || { echo "FAIL: ${#reports[@]} reports in $out"; exit 1; }
python3 - "${reports[0]}" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
bad = []
def want(what, got, value):
    if got != value:
        bad.append(f"{what}: {got!r}, want {value!r}")
want("cuInit calls", r["exported_calls"].get("cuInit"), 2)
l = r["lookups"]
want("cuMany lookups", l.get("cuMany", {}).get("count"), 1)
want("cuMany calls", l.get("cuMany", {}).get("calls"), 2)
want("cuNothing results", l.get("cuNothing", {}).get("results"), [500])
want("cuNothing flags", l.get("cuNothing", {}).get("flags"), [2])
want("cuDriverGetVersion looked up through a looked-up cuGetProcAddress", l.get("cuDriverGetVersion", {}).get("count"), 1)
want("cuDriverGetVersion versions", l.get("cuDriverGetVersion", {}).get("versions"), [12000])
want("cuDriverGetVersion calls", l.get("cuDriverGetVersion", {}).get("calls"), 1)
t = r["export_tables"]
uuid = "42" + "11" * 15
want("tables asked for", sorted(t), sorted([uuid, "00" * 16]))
want("table requests", t.get(uuid, {}).get("requests"), 1)
want("table first word", t.get(uuid, {}).get("first_word"), 24)
want("table slots", t.get(uuid, {}).get("slots"), {"1": 3, "2": 0})
want("unknown table slots", t.get("00" * 16, {}).get("slots"), {})
if bad:
    print("FAIL:", "; ".join(bad))
    print(json.dumps(r, indent=1))
    sys.exit(1)
print("driver tracer: calls, lookups (also through a looked-up cuGetProcAddress), export-table slots counted; every answer passed through")
PY
