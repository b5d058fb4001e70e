#!/usr/bin/env python3
"""Gathers what bench/run.sh's steps wrote under OUT into OUT/results.json.

    bench/collect.py OUT

Reads OUT/env.json, OUT/steps.tsv, OUT/{kernels,nbody,graphs,managed}/rep*/results.jsonl,
OUT/membench/rep*/{native,funnel,mps}.jsonl and OUT/stencil/rep*/results.jsonl.  Every figure is
one record: bench, mode, n (clients, ranks or copies), size (bytes, copies only), unit, better
("higher" or "lower"), values (one per repetition that produced one), median, min, max, and notes
(why a repetition has no value: a failed run, a wrong checksum, a client limit).
Standard library only.
"""
import glob
import json
import os
import re
import statistics
import sys


def rep_of(path):
    m = re.search(r"/rep(\d+)/", path)
    return int(m.group(1)) if m else 0


def read_jsonl(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass
    return rows


def better_of(bench, unit):
    if unit in ("GB/s", "launches/s", "steps/s", "graphs/s"):
        return "higher"
    return "lower"


class Figures:
    def __init__(self):
        self.figs = {}

    def add(self, bench, mode, n, unit, value, rep, note=None, size=None):
        key = (bench, mode, n, size)
        f = self.figs.get(key)
        if f is None:
            f = {"bench": bench, "mode": mode, "n": n, "unit": unit, "better": better_of(bench, unit),
                 "values": [], "reps": [], "notes": []}
            if size is not None:
                f["size"] = size
            self.figs[key] = f
        if value is not None:
            f["values"].append(value)
            f["reps"].append(rep)
        if note and note not in f["notes"]:
            f["notes"].append(note)

    def records(self):
        out = []
        for key in sorted(self.figs, key=lambda k: (k[0], k[3] or 0, k[2], k[1])):
            f = self.figs[key]
            v = f["values"]
            f["median"] = statistics.median(v) if v else None
            f["min"] = min(v) if v else None
            f["max"] = max(v) if v else None
            if not f["notes"]:
                del f["notes"]
            out.append(f)
        return out


def collect(out):
    figs = Figures()
    problems = []

    # kernels.sh, nbody.sh, graphs.sh and managed.sh: {"mode","bench","n","value","unit"[,"note"][,"failed"]}
    for step in ("kernels", "nbody", "graphs", "managed"):
        for path in sorted(glob.glob(os.path.join(out, step, "rep*", "results.jsonl"))):
            r = rep_of(path)
            for row in read_jsonl(path):
                note = row.get("note")
                if row.get("value") is None and not note:
                    note = f"rep {r}: no value (failed processes: {row.get('failed', '?')})"
                    problems.append(f"{step} {row.get('mode')} {row.get('bench')} n={row.get('n')}: {note}")
                figs.add(row["bench"], row["mode"], row["n"], row.get("unit", ""), row.get("value"), r, note)

    # membench: native.jsonl / funnel.jsonl (bench/membench.sh, ROUNDS=1) and mps.jsonl (run.sh)
    for path in sorted(glob.glob(os.path.join(out, "membench", "rep*", "*.jsonl"))):
        mode = os.path.basename(path)[: -len(".jsonl")]
        if mode not in ("native", "funnel", "mps"):
            continue
        r = rep_of(path)
        for row in read_jsonl(path):
            b = row.get("bench")
            if b == "verify":
                bad = [k for k, v in row.items() if v is False]
                if bad:
                    problems.append(f"membench {mode} rep {r}: data check failed: {', '.join(bad)}")
                    figs.add("membench_data_check", mode, 1, "", None, r, f"rep {r}: data check failed ({', '.join(bad)})")
                continue
            if row.get("gbps") is not None:
                figs.add(b, mode, 1, "GB/s", row["gbps"], r, size=row.get("bytes", 0))
            elif row.get("us") is not None:
                figs.add(b, mode, 1, "us", row["us"], r)

    # stencil.sh: the app's JSON line per run, "mode" the run's mode, "rc" added
    for path in sorted(glob.glob(os.path.join(out, "stencil", "rep*", "results.jsonl"))):
        r = rep_of(path)
        for row in read_jsonl(path):
            mode, ranks, ms = row.get("mode"), row.get("ranks"), row.get("ms_per_step")
            good = row.get("reference") == "match" and row.get("rc") == 0
            note = None
            if not good:
                note = f"rep {r}: checksum {row.get('reference')}, exit {row.get('rc')}"
                problems.append(f"stencil {mode} ranks={ranks}: {note}")
            figs.add("stencil_ms_per_step", mode, ranks, "ms", ms if good else None, r, note)

    env = {}
    try:
        with open(os.path.join(out, "env.json")) as f:
            env = json.load(f)
    except (OSError, ValueError) as e:
        problems.append(f"env.json: {e}")
    steps = []
    try:
        with open(os.path.join(out, "steps.tsv")) as f:
            for line in f:
                p = line.rstrip("\n").split("\t")
                if len(p) >= 3:
                    steps.append({"step": p[0], "seconds": int(p[1]), "rc": int(p[2]) if p[2].lstrip("-").isdigit() else p[2],
                                  "note": p[3] if len(p) > 3 else ""})
    except OSError:
        pass
    for name in ("mps-skipped.txt",):
        p = os.path.join(out, name)
        if os.path.exists(p):
            env["mps_note"] = open(p).read().strip()
    return {"format": "funnel-bench-1", "env": env, "steps": steps, "problems": problems, "figures": figs.records()}


def main():
    if len(sys.argv) != 2:
        print("usage: bench/collect.py OUT   (writes OUT/results.json)", file=sys.stderr)
        return 2
    out = sys.argv[1]
    res = collect(out)
    path = os.path.join(out, "results.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")
    for p in res["problems"]:
        print("problem:", p)
    print(f"{len(res['figures'])} figures, {len(res['problems'])} problems -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
