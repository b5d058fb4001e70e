#!/usr/bin/env bash
# ctest bench.report: bench/report.py, bench/collect.py, bench/membench_pool.py, bench/run.sh's
# argument handling and bench/server_figures.py, without a GPU.   tests/bench/report.sh REPO_ROOT
set -u -o pipefail
ROOT=${1:?usage: report.sh REPO_ROOT}
cd "$ROOT" || exit 2
TMP=$(mktemp -d /tmp/funnel-bench-test.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# 1. the table and the targets of the synthetic run
if ! python3 bench/report.py bench/testdata/results-sample.json --out "$TMP/report" >"$TMP/stdout.txt" 2>"$TMP/stderr.txt"; then
  cat "$TMP/stderr.txt"
  fail "report.py exited nonzero"
fi
T=$TMP/report/table.txt
[[ -s $T ]] || fail "report.py wrote no table.txt"
cmp -s "$T" "$TMP/stdout.txt" || fail "the printed table differs from table.txt"
expect() {  # expect REGEX: one line of table.txt matches
  grep -Eq -- "$1" "$T" || fail "no line matches: $1"
}
expect '^  PASS  small-kernel throughput, 16 clients, funnel/MPS +0\.950  \(target >= 0\.9\)$'
expect '^  MISS  small-kernel throughput, 32 clients, funnel/MPS +0\.800  \(target >= 0\.9\)$'
expect '^  PASS  empty-kernel launches, 16 clients, funnel/MPS +0\.900  \(target >= 0\.9\)$'
expect '^  MISS  empty-kernel launches, 32 clients, funnel/MPS +0\.750  \(target >= 0\.9\)$'
expect '^  PASS  start-up of 16 ranks, funnel/MPS +0\.150  \(target <= 0\.2\)$'
expect '^  MISS  GPU memory of 16 idle ranks, funnel/MPS +0\.200  \(target <= 0\.15\)$'
expect '^  MISS  pinned copies, worst size/direction, funnel/native +0\.900  \(target >= 0\.95\)  worst: d2h_pinned 4 KiB; 15 of 16 rows meet it$'
expect '^  PASS  pageable copies, worst size/direction, funnel/native +1\.100  \(target >= 1\)  worst: .*; 8 of 8 rows meet it$'
expect '^  MISS  stencil at 16 ranks per GPU, funnel/MPS time +1\.100  \(target <= 1\)$'
expect '^  PASS  stencil overhead with 1 rank, funnel/native +1\.020  \(target <= 1\.05\)$'
[[ $(grep -cE '^  (PASS|MISS|N/A )  ' "$T") == 10 ]] || fail "expected 10 target lines"
expect '^throughput_small +16 +launches/s \^ +139\.0k ±[0-9]+% +1\.000M ±[0-9]+% +950\.0k ±[0-9]+% +6\.835 +0\.950$'
expect '^stencil_ms_per_step +16 +ms v .* 0\.193 +1\.100$'
expect '^throughput_empty +128 .* n/a +n/a +730\.0k'
expect 'mps \(throughput_empty, throughput_small\): over the MPS client limit \(48\)'
expect '^GPU NVIDIA H100 80GB HBM3 \(synthetic\) \(81559 MiB\), driver 580\.159\.04, CUDA 13\.0'
if grep -q '^plots: python3-matplotlib missing; run bench/report.py OUT/results.json on a machine with it$' "$T"; then
  echo "matplotlib missing: plots not checked"
else
  for p in throughput stencil nbody copies startup_memory; do
    [[ -s $TMP/report/$p.png ]] || fail "$p.png not written"
  done
  expect '^plots: throughput\.png, stencil\.png, nbody\.png, copies\.png, startup_memory\.png in '
fi
# two files merge: the same figures twice give the same medians
python3 bench/report.py bench/testdata/results-sample.json bench/testdata/results-sample.json --out "$TMP/merged" --no-plots >/dev/null ||
  fail "report.py with two files"
grep -q 'PASS  small-kernel throughput, 16 clients, funnel/MPS        0.950' "$TMP/merged/table.txt" || fail "merged table"

# 2. collect.py on a synthetic output tree
O=$TMP/out
mkdir -p "$O"/kernels/rep{1,2,3} "$O"/membench/rep1 "$O"/stencil/rep1 "$O"/nbody/rep1
echo '{"gpu":"test GPU","driver":"1.0","reps":3}' >"$O/env.json"
printf 'kernels rep 1/3\t12\t0\t\nstencil rep 1/1\t30\t1\t\n' >"$O/steps.tsv"
for r in 1 2 3; do
  {
    echo "{\"mode\":\"funnel\",\"bench\":\"throughput_small\",\"n\":16,\"value\":$((r * 100)).0,\"unit\":\"launches/s\"}"
    echo '{"mode":"mps","bench":"throughput_small","n":64,"value":null,"unit":"launches/s","note":"over the MPS client limit (48)"}'
    [[ $r == 2 ]] && echo '{"mode":"native","bench":"startup","n":16,"value":null,"unit":"s","failed":3}'
    [[ $r != 2 ]] && echo "{\"mode\":\"native\",\"bench\":\"startup\",\"n\":16,\"value\":$r.5,\"unit\":\"s\"}"
  } >"$O/kernels/rep$r/results.jsonl"
done
printf '%s\n' '{"bench":"verify","pageable":true,"pinned":false,"pinned_async":true}' \
  '{"bench":"h2d_pinned","bytes":4096,"gbps":0.5,"us":8.1}' '{"bench":"stream_sync_empty","bytes":0,"us":0.9}' >"$O/membench/rep1/funnel.jsonl"
printf '%s\n' '{"ranks":16,"n":256,"mode":"mps","ms_per_step":0.6,"reference":"match","rc":0}' \
  '{"ranks":16,"n":256,"mode":"funnel","ms_per_step":0.7,"reference":"mismatch","rc":0}' >"$O/stencil/rep1/results.jsonl"
echo '{"mode":"native","bench":"nbody_aggregate","n":4,"value":1234.5,"unit":"steps/s"}' >"$O/nbody/rep1/results.jsonl"
python3 bench/collect.py "$O" >"$TMP/collect.txt" 2>&1 || fail "collect.py exited nonzero: $(cat "$TMP/collect.txt")"
python3 - "$O/results.json" <<'PY' || fail "collect.py's results.json"
import json, sys
r = json.load(open(sys.argv[1]))
f = {(x["bench"], x["mode"], x["n"], x.get("size")): x for x in r["figures"]}
def check(cond, what):
    if not cond:
        print("results.json:", what)
        sys.exit(1)
t = f[("throughput_small", "funnel", 16, None)]
check(t["values"] == [100.0, 200.0, 300.0] and t["median"] == 200.0 and t["min"] == 100.0 and t["max"] == 300.0
      and t["better"] == "higher" and t["reps"] == [1, 2, 3], t)
s = f[("startup", "native", 16, None)]
check(s["values"] == [1.5, 3.5] and s["median"] == 2.5 and s["better"] == "lower" and len(s["notes"]) == 1, s)
m = f[("throughput_small", "mps", 64, None)]
check(m["values"] == [] and m["median"] is None and m["notes"] == ["over the MPS client limit (48)"], m)
check(f[("h2d_pinned", "funnel", 1, 4096)]["median"] == 0.5, "h2d_pinned 4 KiB")
check(f[("stream_sync_empty", "funnel", 1, None)]["unit"] == "us", "stream_sync_empty")
check(f[("stencil_ms_per_step", "mps", 16, None)]["median"] == 0.6, "stencil mps")
check(f[("stencil_ms_per_step", "funnel", 16, None)]["values"] == [], "a mismatched checksum must not count")
check(f[("nbody_aggregate", "native", 4, None)]["median"] == 1234.5, "nbody")
check(any("data check failed" in p for p in r["problems"]), "the failed data check is a problem")
check(r["env"]["gpu"] == "test GPU" and r["steps"][1] == {"step": "stencil rep 1/1", "seconds": 30, "rc": 1, "note": ""}, r["steps"])
PY
python3 bench/report.py "$O/results.json" --no-plots >/dev/null || fail "report.py on collect.py's output"
grep -q 'N/A   small-kernel throughput, 16 clients, funnel/MPS' "$O/table.txt" || fail "missing MPS figure is N/A"

# 3. bench/run.sh: help and argument checks (before anything touches a GPU)
bench/run.sh --help | grep -q 'bench/run.sh \[--quick\]' || fail "run.sh --help"
OUT=$TMP/run bench/run.sh --bogus >/dev/null 2>&1
[[ $? == 2 ]] || fail "run.sh --bogus must exit 2"
OUT=$TMP/run REPS=x bench/run.sh >/dev/null 2>&1
[[ $? == 2 ]] || fail "run.sh with REPS=x must exit 2"
OUT=$TMP/run NS="1 4 x" bench/run.sh >/dev/null 2>&1
[[ $? == 2 ]] || fail "run.sh with NS='1 4 x' must exit 2"
OUT=$TMP/run BENCHES="kernels bogus" bench/run.sh >/dev/null 2>&1
[[ $? == 2 ]] || fail "run.sh with an unknown benchmark must exit 2"
for s in bench/*.sh; do bash -n "$s" || fail "bash -n $s"; done

# 4. bench/membench_pool.py: rounds of two passes pooled; medians, ratio and interval per row
P=$TMP/pool
mkdir -p "$P/a" "$P/b"
{
  echo '{"bench":"verify","pageable":true,"pinned":true,"pinned_async":true}'
  for g in 1.0 2.0; do echo "{\"bench\":\"d2h_pinned\",\"bytes\":4096,\"gbps\":$g,\"us\":1}"; done
  echo '{"bench":"stream_sync_empty","us":4.0}'
} >"$P/a/native.jsonl"
{
  echo '{"bench":"d2h_pinned","bytes":4096,"gbps":6.0,"us":1}'
  echo '{"bench":"stream_sync_empty","us":6.0}'
} >"$P/b/native.jsonl"
{
  for g in 0.9 1.8 2.7; do echo "{\"bench\":\"d2h_pinned\",\"bytes\":4096,\"gbps\":$g,\"us\":1}"; done
  for u in 1.0 2.0; do echo "{\"bench\":\"stream_sync_empty\",\"us\":$u}"; done
} >"$P/a/funnel.jsonl"
: >"$P/b/funnel.jsonl"
python3 bench/membench_pool.py "$P/a" "$P/b" --boot 200 >"$TMP/pool.txt" || fail "membench_pool.py exited nonzero"
# native 4 KiB median 2.0 GB/s over 3 rounds (mean 3.0), funnel 1.8: ratio 0.900; empty sync 5.0 us vs 1.5 us
grep -Eq '^d2h_pinned +4 KiB +GB/s +3 +2\.000 +1\.800 +0\.900 ' "$TMP/pool.txt" || fail "pooled d2h row"
grep -Eq '^stream_sync_empty +- +us +2 +5\.000 +1\.500 +0\.300 ' "$TMP/pool.txt" || fail "pooled us row"
python3 bench/membench_pool.py "$P/a" --rows '^d2h' --boot 10 | grep -q stream_sync && fail "--rows kept another row"
echo '{"bench":"verify","pageable":true,"pinned":false,"pinned_async":true}' >>"$P/b/funnel.jsonl"
python3 bench/membench_pool.py "$P/a" "$P/b" --boot 10 >"$TMP/pool.txt"
rc=$?
if [[ $rc != 1 ]] || ! grep -q 'DATA CHECK FAILED in some funnel round' "$TMP/pool.txt"; then
  fail "a failed data check must exit 1"
fi
python3 bench/membench_pool.py "$P" >"$TMP/pool.txt" 2>&1
rc=$?
if [[ $rc != 1 ]] || ! grep -q 'native.jsonl not found' "$TMP/pool.txt"; then
  fail "a folder without jsonl files must exit 1"
fi

# 5. bench/server_figures.py (bench/stencil.sh, bench/mnist.sh): the report with clients, not an
# empty one beside it; sums over the clients; null without a report
S=$TMP/server
mkdir -p "$S"
echo '{"clients":[]}' >"$S/funnel-report-vm-1.json"
cat >"$S/funnel-report-vm-2.json" <<'JSON'
{"clients":[{"call_pickup_us":{"p50":8,"p99":4096},"call_submit_us":{"p50":16,"p99":32768},"spin_backoffs":20,
 "cpu_s":{"worker":1.0,"worker_runqueue":0.25,"client":15,"client_runqueue":1.5},"waited_calls":{"KernelGet":46,"Occupancy":6}},
 {"call_pickup_us":{"p50":16,"p99":8192},"spin_backoffs":30,
 "cpu_s":{"worker":1.25,"worker_runqueue":0.5,"client":16,"client_runqueue":2.0},"waited_calls":{"KernelGet":46,"MemAlloc":13}}]}
JSON
got=$(python3 bench/server_figures.py "$S")
want='{"clients":2,"pickup_p50_us":12.0,"pickup_p99_us":8192,"submit_p50_us":16,"submit_p99_us":32768,"cpu_s":{"worker":2.25,"worker_runqueue":0.75,"client":31,"client_runqueue":3.5},"spin_backoffs":50,"waited_calls":{"KernelGet":92,"MemAlloc":13,"Occupancy":6}}'
[[ $got == "$want" ]] || fail "server_figures.py: $got"
[[ $(python3 bench/server_figures.py "$TMP/none") == null ]] || fail "server_figures.py without a report is not null"

if ((fails > 0)); then
  echo "$fails check(s) failed; table:"
  cat "$T"
  exit 1
fi
echo "bench.report: all checks passed"
