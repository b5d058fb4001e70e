#!/usr/bin/env python3
"""Tables of what programs asked of the driver, from the driver tracer's reports (run.sh).

  summarize.py OUT  > surface.md      (also writes OUT/surface.json)

OUT/<program>/driver-trace-*.json: one report per process (trace.cpp). A function counts as
called when an exported function was called or a function handed out by cuGetProcAddress was.
"""
import glob
import json
import os
import sys


def merge(reports):
    p = {"called": {}, "looked_up": {}, "not_found": set(), "tables": {}, "processes": len(reports)}
    for r in reports:
        for name, c in r["exported_calls"].items():
            p["called"][name] = p["called"].get(name, 0) + c
        for name, l in r["lookups"].items():
            e = p["looked_up"].setdefault(name, {"versions": set(), "flags": set()})
            e["versions"].update(l["versions"])
            e["flags"].update(l["flags"])
            if l["results"] and all(x != 0 for x in l["results"]):
                p["not_found"].add(name)
            if l["calls"]:
                p["called"][name] = p["called"].get(name, 0) + l["calls"]
        for uuid, t in r["export_tables"].items():
            e = p["tables"].setdefault(uuid, {"requests": 0, "first_word": t["first_word"], "slots": {}})
            e["requests"] += t["requests"]
            for s, c in t["slots"].items():
                e["slots"][int(s)] = e["slots"].get(int(s), 0) + c
    return p


def main():
    out = sys.argv[1]
    progs = {}
    for d in sorted(glob.glob(os.path.join(out, "*", ""))):
        reports = []
        for f in sorted(glob.glob(os.path.join(d, "driver-trace-*.json"))):
            try:
                reports.append(json.load(open(f)))
            except (OSError, ValueError) as e:
                print(f"<!-- unreadable {f}: {e} -->")
        if reports:
            progs[os.path.basename(os.path.normpath(d))] = merge(reports)
    names = list(progs)
    print("# What programs ask of the CUDA driver (bench/driver_trace)\n")
    runs = os.path.join(out, "runs.txt")
    if os.path.exists(runs):
        print("```\n" + open(runs).read().rstrip() + "\n```\n")
    print(f"Programs: {', '.join(names)}\n")

    print("## Export tables (cuGetExportTable)\n")
    print("| table id | first word | asked by | slots called: slot (programs, calls) |")
    print("|---|---|---|---|")
    uuids = sorted({u for p in progs.values() for u in p["tables"]})
    for u in uuids:
        users = [n for n in names if u in progs[n]["tables"]]
        slots = {}
        for n in users:
            for s, c in progs[n]["tables"][u]["slots"].items():
                if c:
                    a = slots.setdefault(s, [0, 0])
                    a[0] += 1
                    a[1] += c
        first = progs[users[0]]["tables"][u]["first_word"]
        cells = ", ".join(f"{s} ({a[0]}, {a[1]})" for s, a in sorted(slots.items())) or "none"
        print(f"| `{u}` | {first if first < 1 << 16 else hex(first)} | {', '.join(users)} | {cells} |")

    print("\n## Functions called, per program (calls)\n")
    fns = sorted({f for p in progs.values() for f in p["called"]})
    print("| function | " + " | ".join(names) + " | versions asked | flags |")
    print("|---|" + "---|" * len(names) + "---|---|")
    for f in fns:
        vers, flags = set(), set()
        for p in progs.values():
            if f in p["looked_up"]:
                vers |= p["looked_up"][f]["versions"]
                flags |= p["looked_up"][f]["flags"]
        cells = [str(progs[n]["called"].get(f, "")) for n in names]
        print(f"| `{f}` | " + " | ".join(cells) + f" | {' '.join(map(str, sorted(vers)))} | {' '.join(map(str, sorted(flags)))} |")

    print("\n## Lookups\n")
    print("| program | processes | names looked up | of them called | not found in the driver |")
    print("|---|---|---|---|---|")
    for n in names:
        p = progs[n]
        called = sum(1 for f in p["looked_up"] if f in p["called"])
        nf = sorted(p["not_found"])
        print(f"| {n} | {p['processes']} | {len(p['looked_up'])} | {called} | {len(nf)}: {' '.join(nf[:12])}{' ...' if len(nf) > 12 else ''} |")

    js = {n: {"called": p["called"], "looked_up": {f: {"versions": sorted(e["versions"]), "flags": sorted(e["flags"])}
                                                   for f, e in p["looked_up"].items()},
              "not_found": sorted(p["not_found"]),
              "tables": {u: {"first_word": t["first_word"], "requests": t["requests"], "slots": t["slots"]}
                         for u, t in p["tables"].items()}}
          for n, p in progs.items()}
    json.dump(js, open(os.path.join(out, "surface.json"), "w"), indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
