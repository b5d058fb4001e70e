#!/usr/bin/env bash
# shellcheck disable=SC2154  # pid_NAME: set by eval in client()
# job_report.sh BIN_DIR PROGRAMS_DIR [PRELOAD]
# The job report a stopping sim funnel-server writes to its log directory (doc/accounting.md):
#   1. memory, kernels (as MPI rank 3) and hostfunc run to the end, ctl_hold is SIGKILLed
#      mid-run, another ctl_hold is still attached when `funnelctl shutdown --timeout 1` stops
#      the server: .txt and .json list all five with their pid and how they ended, the
#      counters, one text row each; the .png is drawn (when python3-matplotlib is installed)
#   2. FUNNEL_JOB_REPORT=0 and --job-report 0: nothing is written
#   3. a report that cannot be written: a warning naming the path, and the server exits 0
set -u
bin=$1 progs=$2 preload=${3:-}
# shellcheck source=tests/client/sim_env.sh
. "$(dirname "$0")/sim_env.sh"
sim_env "$bin" "$preload"
# The test command turns reports off for every other test (scripts/test.sh); here they are on.
export FUNNEL_JOB_REPORT=1
ctl=$bin/funnelctl
log=$FUNNEL_LOG_DIR
fail() {
  echo "FAIL: $*"
  for f in "$dir"/*.out "$dir"/*.err "$log"/*; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done
  echo "FAIL: $*"  # again last: CI shows the end of a failing test's output
  exit 1
}
start_server() { "$bin/funnel-server" --sim-devices 1 --idle-exit-ms 60000 "$@" || fail "the server did not start"; }
server_pid() { "$ctl" status --json | sed -n 's/^ *"pid": \([0-9]*\),*$/\1/p' | head -1; }
# wait_for FILE PATTERN: until the file has a line matching it (10 s).
wait_for() {
  for _ in $(seq 500); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.02; done
  fail "no '$2' in $1"
}
# client NAME PROGRAM [VAR=value...]: in the background through funnel-run (which execs the
# program: $pid_NAME is the client's pid).
client() {
  local name=$1 prog=$2
  shift 2
  env "$@" "$bin/funnel-run" "$progs/$prog" >"$dir/$name.out" 2>"$dir/$name.err" &
  eval "pid_$name=$!"
}

# 1. Every client, however it ended.
start_server
spid=$(server_pid)
[ -n "$spid" ] || fail "no server pid"
client memory memory
client kernels kernels SLURM_PROCID=3
client hostfunc hostfunc
client killed ctl_hold CTL_HOLD_MS=60000
client held ctl_hold CTL_HOLD_MS=60000
for c in memory kernels hostfunc; do
  eval "wait \$pid_$c" || fail "$c exited $?"
done
wait_for "$dir/killed.out" '^ready$'
wait_for "$dir/held.out" '^ready$'
kill -KILL "$pid_killed"
wait_for "$(ls "$log"/funnel-server-*-"$spid".log)" "client [0-9]* died: pid $pid_killed "
t0=$(date +%s%N)
"$ctl" shutdown --timeout 1 >"$dir/shutdown.out" 2>&1 || fail "shutdown exited $?"
echo "shutdown took $((($(date +%s%N) - t0) / 1000000)) ms (1 s of it the drain)"
wait "$pid_held"
txt=$(ls "$log"/funnel-report-*-"$spid".txt 2>/dev/null) || fail "no report text"
json=${txt%.txt}.json png=${txt%.txt}.png
[ -f "$json" ] || fail "no $json"
grep -qE "job report of 5 client\(s\): $txt, $json; " "$log"/funnel-server-*-"$spid".log || fail "no log line naming the report"
/usr/bin/env python3 - "$json" "$spid" "$pid_memory" "$pid_kernels" "$pid_hostfunc" "$pid_killed" "$pid_held" <<'PY' ||
import json, sys
report = json.load(open(sys.argv[1]))
spid, memory, kernels, hostfunc, killed, held = map(int, sys.argv[2:])
def check(ok, what):
    if not ok:
        sys.exit(f"json: {what}: {json.dumps(report, indent=1)}")
s = report["server"]
check(s["pid"] == spid and s["backend"] == "sim" and s["devices"] == [0], "server")
check((s["clients_attached"], s["detached"], s["died"], s["terminated"]) == (5, 3, 1, 0), "server's client counts")
check(s["started"].endswith("Z") and s["stopped"] >= s["started"] and s["uptime_s"] > 0, "times")
check(report["dropped_records"] == 0, "dropped_records")
by_pid = {c["pid"]: c for c in report["clients"]}
check(sorted(by_pid) == sorted([memory, kernels, hostfunc, killed, held]), "the clients' pids")
for pid, ended in [(memory, "detached"), (kernels, "detached"), (hostfunc, "detached"), (killed, "died"),
                   (held, "attached at stop")]:
    check(by_pid[pid]["ended"] == ended, f"pid {pid} ended {ended}")
check(by_pid[kernels]["mpi_rank"] == 3 and by_pid[memory]["mpi_rank"] == -1, "mpi_rank")
check(by_pid[kernels]["launches"] > 0, "the kernels program's launches")
for pid in (memory, killed, held):
    check(by_pid[pid]["bytes_h2d"] > 0 and by_pid[pid]["bytes_d2h"] > 0, f"pid {pid}'s bytes copied")
check(by_pid[killed]["device_memory_peak_bytes"] == 64 << 20, "ctl_hold's peak memory")
for c in report["clients"]:
    for k in ("id", "command", "home_device", "gpu_fraction", "attached", "left", "attached_s", "commands",
              "errors", "gpu_busy_s"):
        check(k in c, f"client field {k}")
# CPU times (/proc schedstat): the worker thread's when it stopped, the client's at its Detach;
# a client that died sent none.
for pid in (memory, kernels, hostfunc):
    cpu = by_pid[pid]["cpu_s"]
    check(all(isinstance(cpu[k], float) for k in cpu), f"pid {pid}'s cpu_s measured")
    check(cpu["worker"] > 0 and cpu["client"] > 0 and cpu["worker_runqueue"] >= 0, f"pid {pid}'s cpu_s")
check(by_pid[killed]["cpu_s"]["client"] is None and by_pid[killed]["cpu_s"]["worker"] > 0, "the killed client's cpu_s")
ranks = [(c["mpi_rank"], c["id"]) for c in report["clients"]]
check(ranks == sorted(ranks), "clients ordered by rank, then id")
PY
  fail "the JSON report"
# The table: a header, then one row per client (the pid is the second column).
grep -qE '^ *RANK +PID +GPU +FRACTION +LAUNCHES +MB H2D +MB D2H +PEAK MiB +GPU BUSY S +PICKUP US +WORKER CPU S +WORKER RUNQ S +ERRORS +ENDED +COMMAND$' "$txt" ||
  fail "no table header in $txt"
for p in "$pid_memory" "$pid_kernels" "$pid_hostfunc" "$pid_killed" "$pid_held"; do
  [ "$(awk -v p="$p" '$2 == p' "$txt" | wc -l)" -eq 1 ] || fail "not one row for pid $p in $txt"
done
grep -qE "^ +3 +$pid_kernels +0 +1\.00 +[1-9][0-9]* .* [0-9]+/[0-9]+ +[0-9]+\.[0-9]{3} +[0-9]+\.[0-9]{3} +0 +detached +.*kernels$" "$txt" ||
  fail "the kernels row (with its pick-up p50/p99 and its worker's CPU times)"
grep -qE "^ +- +$pid_killed .* died +.*ctl_hold$" "$txt" || fail "the killed client's row"
grep -qE "^ +- +$pid_held .* attached at stop +.*ctl_hold$" "$txt" || fail "the held client's row"
grep -q "^clients   5 attached: 3 detached, 1 died, 0 terminated, 1 attached at stop$" "$txt" || fail "the summary line"
if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  for _ in $(seq 300); do [ -s "$png" ] && break; sleep 0.1; done
  [ -s "$png" ] || fail "no chart $png after 30 s"
  [ "$(head -c 8 "$png" | od -An -tx1 | tr -d ' ')" = 89504e470d0a1a0a ] || fail "$png is not a PNG"
  echo "chart: $png ($(stat -c %s "$png") bytes)"
else
  grep -q "^chart     not drawn: .*; draw it later with: python3 .*funnel-report-plot.py $json $png$" "$txt" ||
    fail "the text does not say why there is no chart"
  echo "SKIP png: python3-matplotlib not installed"
fi
host=${txt#"$log"/funnel-report-}
host=${host%-"$spid".txt}

# 2. Turned off: nothing is written.
FUNNEL_JOB_REPORT=0 start_server
spid=$(server_pid)
client memory memory
wait "$pid_memory" || fail "memory exited $?"
"$ctl" shutdown >/dev/null 2>&1 || fail "shutdown exited $?"
start_server --job-report 0
spid2=$(server_pid)
"$ctl" shutdown >/dev/null 2>&1 || fail "shutdown exited $?"
ls "$log"/funnel-report-*-"$spid".* "$log"/funnel-report-*-"$spid2".* 2>/dev/null && fail "a report was written while off"

# 3. A report that cannot be written does not break the stop.  Directories stand where the
# files would go (a log directory without write permission stops no root).
"$bin/funnel-server" --foreground --sim-devices 1 --idle-exit-ms 60000 >"$dir/fg.out" 2>&1 &
fg=$!
for _ in $(seq 250); do spid=$(server_pid) && [ -n "$spid" ] && break; sleep 0.02; done
[ -n "$spid" ] || fail "the foreground server did not start"
mkdir "$log/funnel-report-$host-$spid.txt" "$log/funnel-report-$host-$spid.json"
"$ctl" shutdown >/dev/null 2>&1 || fail "shutdown exited $?"
wait "$fg"
rc=$?
[ $rc -eq 0 ] || fail "the server exited $rc after a report it could not write"
grep -q "cannot write the job report $log/funnel-report-$host-$spid.txt: Is a directory" "$dir/fg.out" ||
  fail "no warning naming the text's path"
grep -q "cannot write the job report $log/funnel-report-$host-$spid.json: Is a directory" "$dir/fg.out" ||
  fail "no warning naming the JSON's path"
ls "$log"/*.tmp 2>/dev/null && fail "temporary files left"
echo "job report: ok"
