#!/usr/bin/env bash
# kernels.sh BIN_DIR PROGRAM [PRELOAD]
# Runs PROGRAM (tests/programs/kernels.cu) through funnel-run on the sim backend with
# FUNNEL_SIM_LAUNCH_LOG set, then checks that every launch the program announced
#   expect <kernel> <grid> <block> <shared> <hex>
# was recorded by the server with exactly those parameter bytes (the server's buffer may
# be longer only by trailing zero padding), and that nothing else was launched.
set -u
bin=$1 prog=$2 preload=${3:-}
# shellcheck source=tests/client/sim_env.sh
. "$(dirname "$0")/sim_env.sh"
sim_env "$bin" "$preload"
timeout 60 "$bin/funnel-run" "$prog" > "$dir/out" 2> "$dir/err"
rc=$?
[ "$rc" -eq 0 ] && grep -qx 'done' "$dir/out" || { echo "FAIL: rc=$rc"; cat "$dir/out" "$dir/err"; exit 1; }
# The server writes the log as it launches; shutting it down flushes it.
FUNNEL_RUN_DIR=$dir/run timeout 5 "$bin/funnelctl" shutdown >/dev/null 2>&1
python3 - "$dir/out" "$FUNNEL_SIM_LAUNCH_LOG" <<'EOF'
import collections, json, sys

def dims(v):
    if isinstance(v, (list, tuple)):
        return ",".join(str(x) for x in v)
    if isinstance(v, dict):
        return ",".join(str(v[k]) for k in ("x", "y", "z"))
    return str(v)

expected = collections.Counter()
for line in open(sys.argv[1]):
    f = line.split()
    if f and f[0] == "expect":
        expected[(f[1], f[2], f[3], f[4], f[5] if len(f) > 5 else "")] += 1
got = collections.Counter()
for line in open(sys.argv[2]):
    if not line.strip():
        continue
    j = json.loads(line)
    got[(j["kernel"], dims(j["grid"]), dims(j["block"]), str(j["shared"]), j["params"].lower())] += 1

# A recorded buffer may extend the expected bytes with zero padding (the kernel's
# parameter buffer is rounded up); pair those before comparing.
def matches(e, g):
    return e[:4] == g[:4] and g[4].startswith(e[4]) and set(g[4][len(e[4]):]) <= {"0"}

missing = expected - got
extra = got - expected
for e in list(missing):
    for g in list(extra):
        if matches(e, g):
            n = min(missing[e], extra[g])
            missing[e] -= n; extra[g] -= n
            missing = +missing; extra = +extra
            break
if missing or extra:
    for e, n in missing.items():
        print(f"FAIL: expected but not recorded ({n}x): {e[0]} {e[1]} {e[2]} {e[3]} {e[4][:160]}")
    for g, n in extra.items():
        print(f"FAIL: recorded but not expected ({n}x): {g[0]} {g[1]} {g[2]} {g[3]} {g[4][:160]}")
    sys.exit(1)
print(f"PASS: {sum(expected.values())} launches, parameter bytes as expected")
EOF
