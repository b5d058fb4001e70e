#!/usr/bin/env python3
"""Pools the rounds of several bench/membench.sh runs and gives each row's funnel/native ratio
with a bootstrap interval.

    bench/membench_pool.py OUT_DIR [OUT_DIR ...] [--rows REGEX] [--boot N] [--seed S]

Each OUT_DIR is a membench.sh output folder (native.jsonl and funnel.jsonl, one JSON line per
row per round).  Every round is a process of its own on both sides (a fresh CUDA context, and
for funnel a fresh server): the small-copy speed of a context is drawn when it is made
(doc/performance.md, "Two kinds of context"), so one pass of a few rounds moves by several per
cent, and the rounds of many passes pooled say more than any pass.

Per row: the median over all native rounds and over all funnel rounds, their ratio (bandwidth:
funnel GB/s / native GB/s, higher is better; latency: funnel us / native us, lower is better),
and the 5th-95th percentile of that ratio over N bootstrap resamples (rounds drawn with
replacement, each side on its own).  Standard library only.
"""
import argparse
import json
import os
import random
import re
import statistics
import sys


def load(path):
    """{(bench, bytes): [value per round]}; value is GB/s for bandwidth rows, us otherwise."""
    rows = {}
    with open(path) as f:
        for line in f:
            if not line.startswith("{"):
                continue
            try:
                o = json.loads(line)
            except ValueError:
                continue
            if o.get("bench") == "verify":
                if any(v is False for v in o.values()):
                    rows.setdefault(("verify", 0), []).append(0.0)
                continue
            v = o.get("gbps")
            unit = "GB/s"
            if v is None:
                v, unit = o.get("us"), "us"
            if v is None:
                continue
            rows.setdefault((o["bench"], o.get("bytes", 0), unit), []).append(float(v))
    return rows


def size(b):
    for u, s in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= s and b % s == 0:
            return f"{b // s} {u}"
    return "-" if b == 0 else str(b)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", help="membench.sh output folders")
    ap.add_argument("--rows", default="", help="only rows whose name matches this regex")
    ap.add_argument("--boot", type=int, default=2000, help="bootstrap resamples (default 2000)")
    ap.add_argument("--seed", type=int, default=1, help="bootstrap seed (default 1)")
    a = ap.parse_args()
    nat, fun = {}, {}
    for d in a.dirs:
        for name, into in (("native.jsonl", nat), ("funnel.jsonl", fun)):
            p = os.path.join(d, name)
            if not os.path.exists(p):
                sys.exit(f"membench_pool.py: {p} not found (give membench.sh output folders)")
            for k, v in load(p).items():
                into.setdefault(k, []).extend(v)
    bad = [n for n, r in (("native", nat), ("funnel", fun)) if ("verify", 0) in r]
    if bad:
        print(f"DATA CHECK FAILED in some {' and '.join(bad)} round(s)")
    rng = random.Random(a.seed)
    pick = re.compile(a.rows)
    print(f"{'bench':<20} {'size':>8} {'unit':>5} {'rounds':>7} {'native':>10} {'funnel':>10} "
          f"{'funnel/native':>14} {'5-95 %':>14}")
    keys = sorted((k for k in set(nat) & set(fun) if k[0] != "verify" and pick.search(k[0])),
                  key=lambda k: (k[0], k[1]))
    for k in keys:
        n, f = nat[k], fun[k]
        ratio = statistics.median(f) / statistics.median(n)
        boots = sorted(statistics.median(rng.choices(f, k=len(f))) / statistics.median(rng.choices(n, k=len(n)))
                       for _ in range(a.boot))
        lo, hi = boots[int(0.05 * len(boots))], boots[int(0.95 * len(boots)) - 1]
        print(f"{k[0]:<20} {size(k[1]):>8} {k[2]:>5} {min(len(n), len(f)):>7} {statistics.median(n):>10.3f} "
              f"{statistics.median(f):>10.3f} {ratio:>14.3f} {lo:>6.3f}-{hi:<7.3f}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
