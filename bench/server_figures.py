#!/usr/bin/env python3
"""The job report's figures of one funnel run, as one JSON line (null when there is no report).

    bench/server_figures.py DIR      (DIR: the run's FUNNEL_LOG_DIR, funnel-report-*.json in it)

The clients' waited-call pick-up and the workers' time on those calls (the median of their
p50s, the largest p99), the CPU seconds of the workers and of the clients, on a core and
waiting for one (summed over the clients; doc/accounting.md), the workers' spin back-offs, and
the waited calls by command summed over the clients (`waited_calls`, most first).  Used by
bench/stencil.sh and bench/mnist.sh.
"""
import glob
import json
import statistics
import sys


def figures(d):
    files = sorted(glob.glob(d + "/funnel-report-*.json"))
    # The report of the server that had clients (a batch may leave an empty one behind).
    reports = [json.load(open(f)) for f in files]
    reports = [r for r in reports if r.get("clients")] or reports
    if not reports:
        return None
    clients = reports[0]["clients"]
    p50 = [c["call_pickup_us"]["p50"] for c in clients if c["call_pickup_us"]["p50"] is not None]
    p99 = [c["call_pickup_us"]["p99"] for c in clients if c["call_pickup_us"]["p99"] is not None]
    s50 = [c["call_submit_us"]["p50"] for c in clients if c.get("call_submit_us", {}).get("p50") is not None]
    s99 = [c["call_submit_us"]["p99"] for c in clients if c.get("call_submit_us", {}).get("p99") is not None]
    cpu = {}
    for k in ("worker", "worker_runqueue", "client", "client_runqueue"):
        v = [c["cpu_s"][k] for c in clients if c.get("cpu_s", {}).get(k) is not None]
        cpu[k] = round(sum(v), 4) if v else None
    waited = {}
    for c in clients:
        for name, n in (c.get("waited_calls") or {}).items():
            waited[name] = waited.get(name, 0) + n
    return {"clients": len(clients), "pickup_p50_us": statistics.median(p50) if p50 else None,
            "pickup_p99_us": max(p99) if p99 else None,
            "submit_p50_us": statistics.median(s50) if s50 else None,
            "submit_p99_us": max(s99) if s99 else None, "cpu_s": cpu,
            "spin_backoffs": sum(c.get("spin_backoffs", 0) for c in clients),
            "waited_calls": dict(sorted(waited.items(), key=lambda kv: -kv[1]))}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: server_figures.py DIR")
    print(json.dumps(figures(sys.argv[1]), separators=(",", ":")))
