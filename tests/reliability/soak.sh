#!/usr/bin/env bash
# soak.sh BIN_DIR PROGRAMS_DIR SECONDS [CLIENTS]
# The reliability suite's soak (doc/reliability.md): CLIENTS (default 32) clients run programs
# of mixed work (SOAK_PROGS; copies, streams and events, threads, host functions, symbols,
# kernels) against one server for SECONDS, each output checked. The server's resident memory,
# descriptors and threads are sampled every SOAK_SAMPLE (30) seconds into soak.tsv, printed
# at the end. Asserts: every run right; once all left, the server's totals and descriptors
# are back at the baseline and its resident memory within 32 MiB of the baseline's (taken
# idle after a warm-up, as at the end: a leak of the whole soak stays in it).
# SOAK_BACKEND=cuda runs it on a GPU; SOAK_TMP puts the run directory on a tmpfs (cuda needs it).
set -u
bin=$1 progs=$2 secs=$3 clients=${4:-32}
dir=$(mktemp -d "${SOAK_TMP:-/tmp}/funnel-soak.XXXXXX")
export FUNNEL_RUN_DIR=$dir/run FUNNEL_BACKEND=${SOAK_BACKEND:-sim} FUNNEL_LOG_DIR=$dir/log
read -r -a steady_progs <<<"${SOAK_PROGS:-memory streams threads hostfunc symbols kernel_api}"
# shellcheck source=tests/reliability/lib.sh
. "$(dirname "$0")/lib.sh"

start_server
echo "baseline: totals '$base', $base_fds descriptors, $base_rss kB resident; $clients clients for $secs s"
for i in $(seq "$clients"); do steady "$i" & done
start=$SECONDS
printf 'elapsed_s\trss_kb\tfds\tthreads\tclients\n' >"$dir/soak.tsv"
while [ $((SECONDS - start)) -lt "$secs" ]; do
  sleep "${SOAK_SAMPLE:-30}"
  [ -d "/proc/$spid" ] || fail "the server died after $((SECONDS - start)) s"
  printf '%s\t%s\t%s\t%s\t%s\n' $((SECONDS - start)) "$(rss_kb)" "$(fds)" "$(find "/proc/$spid/task" -mindepth 1 -maxdepth 1 | wc -l)" \
    "$(totals | cut -d' ' -f1)" >>"$dir/soak.tsv"
done
touch "$dir/stop"
wait
cat "$dir/soak.tsv"
steady_report "$clients"
# The server's state is checked even after wrong runs, so a failed soak still says it.
check_baseline "after the soak"
end_rss=$(rss_kb)
echo "server idle: resident $base_rss -> $end_rss kB, totals '$now', $now_fds descriptors (baseline '$base', $base_fds)"
[ $((end_rss - base_rss)) -lt 32768 ] || fail "the server's resident memory grew from $base_rss kB to $end_rss kB (idle both times)"
[ "$bad" -eq 0 ] || fail "$bad of $runs runs of the $clients clients went wrong"
errors=$(grep -cE '\] \[(error|critical)\]' "$dir"/log/*.log)
[ "$errors" -eq 0 ] || fail "$errors error lines in the server log: $(grep -E '\] \[(error|critical)\]' "$dir"/log/*.log | head -5)"
echo "PASS: $runs runs of $clients clients in $((SECONDS - start)) s, all right; resident $base_rss -> $end_rss kB idle; totals '$now', $now_fds descriptors"
