#!/usr/bin/env bash
# The classic MPS case study (issue 31, item 4): N PyTorch processes at once on ONE GPU, each
# training bench/mnist.py's MLP (784-512-512-10, ReLU, dropout 0.2, RMSprop, batch 100, EPOCHS
# epochs on MNIST-sized synthetic data, all on the GPU): natively (N time-sliced contexts), under
# NVIDIA MPS (bench/mps.sh: a private daemon started before each batch and stopped after it) and
# through funnel-run (the N clients share one funnel-server, which the first of them starts;
# funnelctl shutdown stops it after the batch), in ROUNDS interleaved rounds (each round: each N,
# each mode, native first).
#   bench/mnist.sh
# Process i of a batch trains with --seed i.  Every process must exit 0, and each seed's losses
# (loss_epoch, final_loss) and weight checksum must equal, bit for bit, those of the native run
# of the same seed in the same round ("match"; else "DIFFER").  The wall time of a batch runs from
# just before its first process starts to the exit of its last one.
# Environment:
#   BUILD_DIR  build with bin/funnel-run and bin/funnelctl (default build-gpu, else build)
#   OUT        logs and results (default $PWD/bench-out/mnist)
#   NS         process counts (default "1 5 10")
#   MODES      default "native mps funnel" (native always runs first: it is the reference);
#              "funnel-<setting>" (funnel-w4, funnel-i0+s0: bench/modes.sh) is funnel with
#              server settings changed
#   ROUNDS     interleaved rounds (default 2)
#   EPOCHS     epochs per process (default 2)
#   KEEP_SERVER_LOGS  set: keep the funnel-server's log and job report of every funnel batch
#              (default: of failed ones only), in OUT/rR/nN/funnel/server/
# Each process runs under `timeout 600`.  Writes OUT/results.jsonl (one line per batch: mode, n,
# round, wall_s, the processes' train_s and setup_s, their medians, the medians of the set-up's
# phases (mnist.py's setup_phases) and of its CPU figures ("median_cpu": mnist.py's cpu), exit codes, match, and for funnel the job report's figures,
# "server": bench/server_figures.py) and
# OUT/table.txt (printed last: per N and mode the median wall time over the rounds, its ratio to
# native and to MPS, the median train_s and setup_s).  Exit 1 if a process failed or differs.
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ -z ${BUILD_DIR:-} ]]; then
  if [[ -x $ROOT/build-gpu/bin/funnel-run ]]; then BUILD_DIR=$ROOT/build-gpu; else BUILD_DIR=$ROOT/build; fi
fi
OUT_DIR=${OUT:-$PWD/bench-out/mnist}
NS=${NS:-1 5 10}
MODES=${MODES:-native mps funnel}
ROUNDS=${ROUNDS:-2}
EPOCHS=${EPOCHS:-2}
FR=$BUILD_DIR/bin/funnel-run
CTL=$BUILD_DIR/bin/funnelctl
MNIST=$ROOT/bench/mnist.py
if [[ " $MODES " == *" funnel"* ]]; then
  for f in "$FR" "$CTL"; do
    [[ -x $f ]] || { echo "mnist.sh: $f not found: build funnel (BUILD_DIR=$BUILD_DIR)" >&2; exit 2; }
  done
fi
python3 -c 'import torch' 2>/dev/null || { echo "mnist.sh: python3 has no PyTorch" >&2; exit 2; }
mkdir -p "$OUT_DIR" || exit 2
OUT_DIR=$(cd "$OUT_DIR" && pwd)
RESULTS=$OUT_DIR/results.jsonl
: >"$RESULTS"
# The same library path for every mode (funnel-run puts its own libraries in front of it).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export FUNNEL_BACKEND=cuda
# shellcheck source=bench/mps.sh
source "$ROOT/bench/mps.sh"
# shellcheck source=bench/modes.sh
source "$ROOT/bench/modes.sh"
# is_funnel MODE: funnel, or a funnel variant (funnel-w4: bench/modes.sh)
is_funnel() { [[ $1 == funnel ]] || funnel_variant_env "$1" >/dev/null; }
for mode in $MODES; do
  [[ $mode == native || $mode == mps ]] && continue
  is_funnel "$mode" || { echo "mnist.sh: unknown mode '$mode' (native, mps, funnel, funnel-<setting>: bench/modes.sh)" >&2; exit 2; }
done
# native first in every round: the other modes are compared with it
order=""
[[ " $MODES " == *" native "* ]] && order="native"
for mode in $MODES; do [[ $mode != native ]] && order+=" $mode"; done

# run_batch MODE N DIR: N processes of mnist.py at once (seed i for process i), each under
# timeout 600; writes DIR/i.out, i.err, i.rc; prints the batch's wall seconds.
run_batch() {
  local mode=$1 n=$2 dir=$3 i t0 t1 wrap=() pids=()
  local setting
  [[ $mode == funnel ]] && wrap=("$FR")
  # shellcheck disable=SC2206  # one word per setting
  [[ $mode != funnel ]] && setting=$(funnel_variant_env "$mode") && wrap=(env $setting "$FR")
  t0=$(date +%s.%N)
  for ((i = 0; i < n; i++)); do
    timeout 600 "${wrap[@]}" python3 "$MNIST" --seed "$i" --epochs "$EPOCHS" >"$dir/$i.out" 2>"$dir/$i.err" &
    pids+=($!)
  done
  for ((i = 0; i < n; i++)); do
    wait "${pids[$i]}"
    echo $? >"$dir/$i.rc"
  done
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", b - a }'
}

# batch_line MODE N ROUND WALL DIR REFDIR: the results.jsonl line of a batch (stdout) and a
# summary line (stderr)
batch_line() {
  python3 - "$@" <<'PY'
import json, os, statistics, sys
mode, n, rnd, wall, d, ref = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5], sys.argv[6]
server = json.loads(sys.argv[7]) if len(sys.argv) > 7 and sys.argv[7] else None


def load(dd, i):
    try:
        lines = [l for l in open(f"{dd}/{i}.out") if l.startswith("{")]
        return json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None


def exit_code(dd, i):
    try:
        return int(open(f"{dd}/{i}.rc").read())
    except (OSError, ValueError):
        return None


rows = [load(d, i) for i in range(n)]
rcs = [exit_code(d, i) for i in range(n)]
ok = all(rc == 0 for rc in rcs) and all(r is not None for r in rows)
differ, missing = [], []
if mode == "native":
    match = "reference"
elif not os.path.isdir(ref):
    match = "no native"
else:
    key = lambda r: (repr(r["loss_epoch"]), repr(r["final_loss"]), repr(r["checksum"]))
    for i in range(n):
        a, b = rows[i], load(ref, i)
        if b is None:
            missing.append(i)
        elif a is not None and key(a) != key(b):  # a process without a result failed: "ok" says so
            differ.append(i)
    match = "DIFFER" if differ else ("no native" if missing else "match")
train = [r["train_s"] if r else None for r in rows]
setup = [r["setup_s"] if r else None for r in rows]
med = lambda v: round(statistics.median([x for x in v if x is not None]), 4) if any(x is not None for x in v) else None


def med_each(field):
    """The median of each key of the processes' `field` dicts (mnist.py's setup_phases, cpu)."""
    ds = [r.get(field) or {} for r in rows if r]
    return {k: med([d.get(k) for d in ds]) for k in (list(ds[0]) if ds else [])}


line = {"mode": mode, "n": n, "round": rnd, "wall_s": wall, "train_s": train, "median_train_s": med(train),
        "setup_s": setup, "median_setup_s": med(setup),
        "median_setup_phases": med_each("setup_phases"), "median_cpu": med_each("cpu"), "rc": rcs, "ok": ok,
        "match": match, "differ_seeds": differ, "final_loss": [r["final_loss"] if r else None for r in rows],
        "server": server}
print(json.dumps(line, separators=(",", ":")))
print(f"round {rnd} n={n} {mode}: wall {wall:.2f} s, median train {med(train)} s, median setup {med(setup)} s, "
      f"exit codes {rcs}, {match}" + (f" (seeds {differ})" if differ else "")
      + (f"; server: {sum(server['waited_calls'].values())} waited calls, clients waited "
         f"{server['cpu_s']['client_runqueue']} s for a CPU" if server else ""), file=sys.stderr)
PY
}

bad=0
mps_missing=0
for ((r = 1; r <= ROUNDS; r++)); do
  for n in $NS; do
    for mode in $order; do
      if [[ $mode == mps ]]; then
        if [[ -z $MPS_CONTROL ]]; then
          [[ $mps_missing == 0 ]] && echo "mnist.sh: nvidia-cuda-mps-control not found: MPS skipped" | tee "$OUT_DIR/mps-skipped.txt"
          mps_missing=1
          continue
        fi
        mps_start || { echo "mnist.sh: MPS did not start: round $r n=$n skipped"; bad=1; continue; }
      fi
      dir=$OUT_DIR/r$r/n$n/$mode
      rm -rf "$dir"
      mkdir -p "$dir"
      if is_funnel "$mode"; then
        # a job of its own per batch: a fresh server, started by the first client
        export FUNNEL_JOB_ID=mnist-r$r-n$n-$$ FUNNEL_LOG_DIR=$dir/server
      fi
      wall=$(run_batch "$mode" "$n" "$dir")
      figures=""
      if is_funnel "$mode"; then
        timeout 30 "$CTL" shutdown >"$dir/shutdown.log" 2>&1
        unset FUNNEL_JOB_ID FUNNEL_LOG_DIR
        figures=$(python3 "$ROOT/bench/server_figures.py" "$dir/server")
      fi
      [[ $mode == mps ]] && mps_stop
      line=$(batch_line "$mode" "$n" "$r" "$wall" "$dir" "$OUT_DIR/r$r/n$n/native" "$figures")
      echo "$line" >>"$RESULTS"
      if [[ $line != *'"ok":true'* || $line == *'"match":"DIFFER"'* ]]; then
        bad=1
        # the failing processes' own words, here too: the logs may not come back from the GPU machine
        for ((i = 0; i < n; i++)); do
          if [[ $(cat "$dir/$i.rc" 2>/dev/null) != 0 ]]; then
            echo "--- $mode n=$n round $r process $i (exit $(cat "$dir/$i.rc" 2>/dev/null)), last lines of $dir/$i.err:"
            grep -v '^[[:space:]]*$' "$dir/$i.err" | tail -10
          fi
        done
      elif is_funnel "$mode" && [[ -z ${KEEP_SERVER_LOGS:-} ]]; then
        rm -rf "$dir/server"
      fi
    done
  done
done

python3 - "$RESULTS" <<'PY' | tee "$OUT_DIR/table.txt"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    by.setdefault((r["n"], r["mode"]), []).append(r)
ns = sorted({r["n"] for r in rows})
modes = [m for m in ("native", "mps", "funnel") if any(r["mode"] == m for r in rows)]
modes += sorted({r["mode"] for r in rows} - set(modes))  # funnel variants
med = lambda v: statistics.median(v) if v else None
wall = {k: med([r["wall_s"] for r in v if r["ok"]]) for k, v in by.items()}
f = lambda v: "-" if v is None else f"{v:.3f}"
ratio = lambda a, b: "-" if a is None or not b else f"{a / b:.3f}"
print(f'{"N":>3} {"mode":<12} {"rounds":>6} {"wall s":>9} {"/native":>8} {"/MPS":>7} {"train s":>9} {"setup s":>9} {"result":>10}')
for n in ns:
    for m in modes:
        v = by.get((n, m), [])
        if not v:
            continue
        tr = med([r["median_train_s"] for r in v if r["median_train_s"] is not None])
        st = med([r["median_setup_s"] for r in v if r["median_setup_s"] is not None])
        matches = {r["match"] for r in v}
        if not all(r["ok"] for r in v):
            res = "FAILED"
        elif "DIFFER" in matches:
            res = "DIFFER"
        elif m == "native":
            res = "reference"
        else:
            res = "match" if matches == {"match"} else "/".join(sorted(matches))
        w = wall.get((n, m))
        print(f"{n:>3} {m:<12} {len(v):>6} {f(w):>9} {ratio(w, wall.get((n, 'native'))):>8} {ratio(w, wall.get((n, 'mps'))):>7}"
              f" {f(tr):>9} {f(st):>9} {res:>10}")
print("wall s: median over the rounds of the batch's wall time (first start to last exit); /native, /MPS: that ratio,")
print("lower is better.  train s, setup s: medians of the processes' training loop and of their start-up (process")
print("start to the first batch).  result: every process exited 0 and each seed's losses and weights equal native's")
print("of the same round bit for bit (match), or not (DIFFER); FAILED: a process failed.")
PY
exit $bad
