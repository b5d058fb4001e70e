#!/usr/bin/python3
"""Draws a funnel-server job report's chart (doc/accounting.md).

  funnel-report-plot.py REPORT.json CHART.png

Two panels, one bar per client: GPU busy seconds and peak device memory (MiB), labelled by
MPI rank (or client id where the client is not a rank).  funnel-server starts this detached
when it stops; run it by hand to draw a report's chart later.  Needs python3-matplotlib.
"""
import json
import os
import sys


def label(client):
    rank = client.get("mpi_rank", -1)
    return f"rank {rank}" if rank >= 0 else f"id {client['id']}"


def main(argv):
    if len(argv) != 3:
        sys.exit(f"usage: {argv[0]} REPORT.json CHART.png")
    report_path, chart_path = argv[1], argv[2]
    with open(report_path) as f:
        report = json.load(f)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    server = report["server"]
    clients = sorted(report["clients"], key=lambda c: (c.get("mpi_rank", -1), c["id"]))
    labels = [label(c) for c in clients]
    busy = [c.get("gpu_busy_s") or 0.0 for c in clients]
    peak = [c.get("device_memory_peak_bytes", 0) / 2**20 for c in clients]
    x = range(len(clients))

    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(max(6.0, 0.4 * len(clients) + 2.0), 6.0))
    top.bar(x, busy, color="tab:blue")
    top.set_ylabel("GPU busy (s)")
    bottom.bar(x, peak, color="tab:orange")
    bottom.set_ylabel("peak device memory (MiB)")
    bottom.set_xticks(list(x))
    bottom.set_xticklabels(labels, rotation=90 if len(clients) > 12 else 0)
    dropped = report.get("dropped_records", 0)
    title = f"funnel-server {server['pid']} on {server['host']}, {server['started'][:10]}"
    if dropped:
        title += f" ({dropped} client(s) not shown)"
    fig.suptitle(title)
    fig.tight_layout()
    # Through a temporary name, so that a reader never sees half a PNG.
    tmp = chart_path + ".tmp.png"
    fig.savefig(tmp, format="png")
    os.replace(tmp, chart_path)


if __name__ == "__main__":
    main(sys.argv)
