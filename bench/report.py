#!/usr/bin/env python3
"""The ratio table, issue 7's targets and the plots from bench/run.sh's results.json.

    bench/report.py RESULTS.json [MORE.json ...] [--out DIR] [--no-plots]

Several files (e.g. runs split over several commands) are merged: the values of the same
figure (bench, mode, N, size) are pooled.  Medians, min and max are recomputed from the values.
Writes DIR/table.txt (DIR: --out, default the first file's directory) and prints it: per figure
the median of native, MPS and funnel with their spread, funnel/native and funnel/MPS, then the
TARGETS section (each target of issue 7, the measured ratio, PASS / MISS / N/A).  Writes
DIR/throughput.png, stencil.png, nbody.png, graphs.png, copies.png and startup_memory.png with matplotlib;
without it the table is still written and a line says how to render the plots elsewhere.
Standard library only, apart from matplotlib for the plots.
"""
import argparse
import json
import os
import statistics
import sys

MODES = ("native", "mps", "funnel")
PINNED = ("h2d_pinned", "d2h_pinned", "h2d_pinned_async", "d2h_pinned_async")
PAGEABLE = ("h2d_pageable", "d2h_pageable")
TITLES = {
    "issue_empty": "launch issue cost, 1 client (us per <<<>>>)",
    "roundtrip_empty": "launch + sync round trip, 1 client (us)",
    "throughput_empty": "empty kernels, aggregate launches/s",
    "throughput_small": "small kernels (4x128 threads, 5 us), aggregate launches/s",
    "startup": "start-up of N clients (s, attach + first kernel + exit)",
    "idle_memory": "GPU memory of N idle clients (MiB)",
    "stencil_ms_per_step": "apps/stencil ms per step (slowest rank) vs ranks",
    "nbody_aggregate": "apps/nbody: N copies at once, summed steps/s",
    "graph_replay": "a captured graph of small kernels replayed by N clients at once, graphs/s in all",
}
# bench/managed.sh: a managed-memory program over three kinds of memory, one process: rows
# managed_prog_<kind> (seconds), managed_first_<kind> (its first kernel, ms) and
# managed_kernel_<kind> (its later kernels, mean ms); reported, no target (no plot)
MANAGED_KINDS = ("managed", "zerocopy", "device")
ORDER = ["issue_empty", "roundtrip_empty", "throughput_empty", "throughput_small", "startup", "idle_memory",
         "stencil_ms_per_step", "nbody_aggregate", "graph_replay"] + [
             f"managed_{f}_{k}" for k in MANAGED_KINDS for f in ("prog", "first", "kernel")]


def load(paths):
    figs, env, steps, problems = {}, None, [], []
    for p in paths:
        with open(p) as f:
            res = json.load(f)
        if env is None:
            env = res.get("env", {})
        steps += res.get("steps", [])
        problems += res.get("problems", [])
        for fig in res.get("figures", []):
            key = (fig["bench"], fig["mode"], fig["n"], fig.get("size"))
            if key not in figs:
                figs[key] = dict(fig, values=list(fig.get("values", [])), notes=list(fig.get("notes", [])))
            else:
                figs[key]["values"] += fig.get("values", [])
                figs[key]["notes"] += [n for n in fig.get("notes", []) if n not in figs[key]["notes"]]
    for f in figs.values():
        v = [x for x in f["values"] if x is not None]
        f["values"] = v
        f["median"] = statistics.median(v) if v else None
        f["min"] = min(v) if v else None
        f["max"] = max(v) if v else None
    return figs, env or {}, steps, problems


def num(v):
    if v is None:
        return "-"
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.3f}M"
    if a >= 1e4:
        return f"{v / 1e3:.1f}k"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 1:
        return f"{v:.3g}" if a < 10 else f"{v:.1f}"
    return f"{v:.3g}"


def cell(f):
    """median and spread: '812.3k ±2%' (spread = (max - min) / median / 2)"""
    if f is None:
        return "-"
    if f["median"] is None:
        return "n/a"
    s = num(f["median"])
    if len(f["values"]) > 1 and f["median"]:
        s += f" ±{(f['max'] - f['min']) / abs(f['median']) * 50:.0f}%"
    return s


def size_str(b):
    if b is None:
        return ""
    for u, s in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= s and b % s == 0:
            return f"{b // s} {u}"
    return f"{b} B"


def ratio(a, b):
    if a is None or b is None or a.get("median") is None or not b.get("median"):
        return None
    return a["median"] / b["median"]


def rstr(r):
    return "-" if r is None else f"{r:.3f}"


def table(figs, env, steps, problems, plot_note):
    lines = []
    w = lines.append
    w("funnel benchmarks (issue 7): native (time-sliced contexts) vs NVIDIA MPS vs funnel, same run, same GPU")
    w(f"GPU {env.get('gpu', '?')} ({env.get('gpu_memory', '?')}), driver {env.get('driver', '?')}, "
      f"CUDA {env.get('cuda_driver', '?')} (toolkit {env.get('cuda_toolkit', '?')}), {env.get('cores', '?')} cores "
      f"{env.get('cpu', '')}".rstrip())
    w(f"{env.get('date', '?')} on {env.get('hostname', '?')}, commit {str(env.get('commit', '?'))[:12]}"
      f"{' (+%s modified files)' % env['dirty_files'] if env.get('dirty_files') else ''}, "
      f"{'quick' if env.get('quick') else 'full'} run, {env.get('reps', '?')} repetition(s); MPS: {env.get('mps', '?')}")
    w("cells: median over the repetitions ±half the min-max spread in % of it; ratios: of medians")
    w("")
    benches = sorted({k[0] for k in figs}, key=lambda b: (ORDER.index(b) if b in ORDER else len(ORDER), b))
    hdr = f"{'benchmark':<26} {'N':>4} {'size':>8} {'unit':>10} {'native':>15} {'mps':>15} {'funnel':>15} {'funnel/native':>13} {'funnel/mps':>10}"
    w(hdr)
    w("-" * len(hdr))
    for b in benches:
        keys = sorted({(k[2], k[3] if k[3] is not None else -1) for k in figs if k[0] == b})
        for n, size in keys:
            sz = None if size == -1 else size
            row = {m: figs.get((b, m, n, sz)) for m in MODES}
            any_fig = next(f for f in (figs.get((b, m, n, sz)) for m in {k[1] for k in figs}) if f)
            unit = any_fig["unit"]
            better = any_fig.get("better", "higher")
            w(f"{b:<26} {n:>4} {size_str(sz):>8} {unit + (' ^' if better == 'higher' else ' v'):>10} "
              f"{cell(row['native']):>15} {cell(row['mps']):>15} {cell(row['funnel']):>15} "
              f"{rstr(ratio(row['funnel'], row['native'])):>13} {rstr(ratio(row['funnel'], row['mps'])):>10}")
        extra = sorted({k[1] for k in figs if k[0] == b} - set(MODES))
        for m in extra:  # e.g. stencil "hooks", kernels "threads"
            for k in sorted(k for k in figs if k[0] == b and k[1] == m):
                w(f"{'  ' + b + ' [' + m + ']':<26} {k[2]:>4} {size_str(k[3]):>8} {'':>10} {'':>15} {'':>15} {cell(figs[k]):>15} "
                  f"{rstr(ratio(figs[k], figs.get((b, 'native', k[2], k[3])))):>13} "
                  f"{rstr(ratio(figs[k], figs.get((b, 'mps', k[2], k[3])))):>10}")
    w("unit ^: higher is better (funnel/x > 1 is a win); unit v: lower is better (funnel/x < 1 is a win)")
    notes = {}
    for k, f in figs.items():
        for n in f.get("notes", []):
            notes.setdefault((k[1], n), set()).add(k[0])
    if notes:
        w("")
        w("notes:")
        for (m, n), bs in sorted(notes.items()):
            w(f"  {m} ({', '.join(sorted(bs))}): {n}")
    if problems:
        w("")
        w(f"problems ({len(problems)}):")
        for p in problems[:30]:
            w(f"  {p}")
    if steps:
        w("")
        w("steps: " + ", ".join(f"{s['step']} {s['seconds']} s{'' if s['rc'] in (0, '0') else ' (rc %s)' % s['rc']}" for s in steps))
    w("")
    w("TARGETS (issue 7; ratios of medians in this run)")
    for line in targets(figs):
        w("  " + line)
    if plot_note:
        w("")
        w(plot_note)
    return "\n".join(lines) + "\n"


def targets(figs):
    out = []

    def line(name, r, op, goal, detail=""):
        if r is None:
            verdict, val = "N/A ", "-"
        else:
            ok = r >= goal if op == ">=" else r <= goal
            verdict, val = ("PASS" if ok else "MISS"), f"{r:.3f}"
        out.append(f"{verdict}  {name:<52} {val:>7}  (target {op} {goal:g}){'  ' + detail if detail else ''}")

    def one(bench, n, other, size=None):
        f, o = figs.get((bench, "funnel", n, size)), figs.get((bench, other, n, size))
        r = ratio(f, o)
        why = ""
        have = lambda x: x is not None and x.get("median") is not None
        if r is None and not have(f) and not have(o):
            why = "not measured in this run"
        elif r is None:
            why = f"no {other if have(f) else 'funnel'} figure" + (" (MPS skipped or failed)" if other == "mps" and have(f) else "")
        return r, why

    for n in (16, 32):
        r, why = one("throughput_small", n, "mps")
        line(f"small-kernel throughput, {n} clients, funnel/MPS", r, ">=", 0.9, why)
    for n in (16, 32):
        r, why = one("throughput_empty", n, "mps")
        line(f"empty-kernel launches, {n} clients, funnel/MPS", r, ">=", 0.9, why)
    r, why = one("startup", 16, "mps")
    line("start-up of 16 ranks, funnel/MPS", r, "<=", 0.2, why)
    r, why = one("idle_memory", 16, "mps")
    line("GPU memory of 16 idle ranks, funnel/MPS", r, "<=", 0.15, why)
    for name, benches, goal in (("pinned copies", PINNED, 0.95), ("pageable copies", PAGEABLE, 1.0)):
        rs = []
        for k, f in figs.items():
            if k[0] in benches and k[1] == "funnel":
                r = ratio(f, figs.get((k[0], "native", k[2], k[3])))
                if r is not None:
                    rs.append((r, f"{k[0]} {size_str(k[3])}"))
        if rs:
            worst = min(rs)
            met = sum(1 for r, _ in rs if r >= goal)
            line(f"{name}, worst size/direction, funnel/native", worst[0], ">=", goal,
                 f"worst: {worst[1]}; {met} of {len(rs)} rows meet it")
        else:
            line(f"{name}, worst size/direction, funnel/native", None, ">=", goal, "no membench figures")
    r, why = one("stencil_ms_per_step", 16, "mps")
    line("stencil at 16 ranks per GPU, funnel/MPS time", r, "<=", 1.0, why)
    r, why = one("stencil_ms_per_step", 1, "native")
    line("stencil overhead with 1 rank, funnel/native", r, "<=", 1.05, why)
    # issue's graph target: lines only where the run measured graphs (BENCHES may leave it out)
    for n in (1, 16) if any(k[0] == "graph_replay" for k in figs) else ():
        r, why = one("graph_replay", n, "mps")
        line(f"graph replays, {n} client{'s' if n > 1 else ''}, funnel/MPS", r, ">=", 1.0, why)
    # the managed-memory program: figures only (reported), where the run measured it
    if any(k[0].startswith("managed_prog_") for k in figs):
        parts = []
        for kind in MANAGED_KINDS:
            if any(k[0] == f"managed_prog_{kind}" for k in figs):
                parts.append(f"{kind} {rstr(one(f'managed_prog_{kind}', 1, 'native')[0])}"
                             f" / {rstr(one(f'managed_prog_{kind}', 1, 'mps')[0])}")
        out.append("info  managed-memory program, 1 process, funnel/native / funnel/MPS seconds (reported, no target): "
                   + ", ".join(parts))
    return out


def plots(figs, env, outdir):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None, ("plots: python3-matplotlib missing; run bench/report.py OUT/results.json on a machine with it")
    style = {"native": ("tab:gray", "o"), "mps": ("tab:blue", "s"), "funnel": ("tab:red", "^"),
             "hooks": ("tab:orange", "v"), "threads": ("tab:green", "D")}
    sub = f"{env.get('gpu', '?')}, driver {env.get('driver', '?')}, {str(env.get('date', ''))[:10]}"
    written = []

    def series(ax, bench, xkey="n", size=None, modes=None):
        drawn = False
        for m in modes or sorted({k[1] for k in figs if k[0] == bench}):
            pts = sorted((k[2] if xkey == "n" else k[3], f) for k, f in figs.items()
                         if k[0] == bench and k[1] == m and f.get("median") is not None and (size is None or k[3] == size))
            if not pts:
                continue
            xs = [p[0] for p in pts]
            ys = [p[1]["median"] for p in pts]
            lo = [p[1]["median"] - p[1]["min"] for p in pts]
            hi = [p[1]["max"] - p[1]["median"] for p in pts]
            c, mk = style.get(m, (None, "x"))
            ax.errorbar(xs, ys, yerr=[lo, hi], label=m, color=c, marker=mk, capsize=3)
            drawn = True
        if drawn:
            ax.set_xscale("log", base=2)
            ax.grid(True, alpha=0.3)
            ax.legend()
        return drawn

    def save(fig, name):
        path = os.path.join(outdir, name)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(name)

    if any(k[0].startswith("throughput_") for k in figs):
        fig, axs = plt.subplots(1, 2, figsize=(12, 4.5))
        for ax, b in zip(axs, ("throughput_empty", "throughput_small")):
            series(ax, b)
            ax.set_title(TITLES[b], fontsize=10)
            ax.set_xlabel("clients (N)")
            ax.set_ylabel("launches/s")
        fig.suptitle(f"Kernel launch throughput vs N - {sub}", fontsize=10)
        save(fig, "throughput.png")
    for b, name, xl, yl in (("stencil_ms_per_step", "stencil.png", "ranks on one GPU", "ms per step (lower is better)"),
                            ("nbody_aggregate", "nbody.png", "copies at once (N)", "summed steps/s"),
                            ("graph_replay", "graphs.png", "clients (N)", "graphs/s (all clients)")):
        if any(k[0] == b for k in figs):
            fig, ax = plt.subplots(figsize=(7, 4.5))
            series(ax, b)
            ax.set_xlabel(xl)
            ax.set_ylabel(yl)
            ax.set_title(f"{TITLES[b]}\n{sub}", fontsize=10)
            save(fig, name)
    if any(k[0] in PINNED + PAGEABLE for k in figs):
        fig, axs = plt.subplots(2, 2, figsize=(12, 8))
        for ax, b in zip(axs.flat, ("h2d_pinned", "d2h_pinned", "h2d_pageable", "d2h_pageable")):
            series(ax, b, xkey="size")
            ax.set_yscale("log")
            ax.set_title(b, fontsize=10)
            ax.set_xlabel("bytes per copy")
            ax.set_ylabel("GB/s")
        fig.suptitle(f"cudaMemcpy bandwidth - {sub}", fontsize=10)
        save(fig, "copies.png")
    if any(k[0] in ("startup", "idle_memory") for k in figs):
        fig, axs = plt.subplots(1, 2, figsize=(12, 4.5))
        for ax, b, yl in zip(axs, ("startup", "idle_memory"), ("seconds", "MiB")):
            series(ax, b)
            ax.set_title(TITLES[b], fontsize=10)
            ax.set_xlabel("clients (N)")
            ax.set_ylabel(yl)
        fig.suptitle(sub, fontsize=10)
        save(fig, "startup_memory.png")
    return written, f"plots: {', '.join(written) if written else 'none (no figures)'} in {outdir}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", nargs="+", help="results.json written by bench/run.sh (several are merged)")
    ap.add_argument("--out", help="where table.txt and the plots go (default: the first file's directory)")
    ap.add_argument("--no-plots", action="store_true")
    a = ap.parse_args()
    outdir = a.out or os.path.dirname(os.path.abspath(a.results[0]))
    os.makedirs(outdir, exist_ok=True)
    figs, env, steps, problems = load(a.results)
    note = "plots: skipped (--no-plots)"
    if not a.no_plots:
        _, note = plots(figs, env, outdir)
    text = table(figs, env, steps, problems, note)
    with open(os.path.join(outdir, "table.txt"), "w") as f:
        f.write(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
