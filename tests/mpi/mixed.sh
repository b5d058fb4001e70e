#!/usr/bin/env bash
# mixed.sh BIN_DIR FUNNEL_PROGRAM PLAIN_PROGRAM
# A rank not under funnel in the same job: `mpirun -np 2 mixed : -np 1 plain_peer` with
# FUNNEL_MPI_LOCAL=1 on the sim backend (tests/mpi/mixed.cu says what each side does).  The job
# ends (the hooks' MPI_Init and MPI_Finalize wait for no collective of the plain rank), every rank
# prints "rank R: all ok", the server served the two funnel ranks only, and the job report counts
# exactly their two GPU-local messages (the messages with the plain rank were staged).
set -u
bin=$1 prog=$2 plain=$3
[ -x "$bin/funnel-server" ] || { echo "FAIL: no $bin/funnel-server"; exit 1; }
# shellcheck source=tests/mpi/all_ok.sh
source "$(dirname "${BASH_SOURCE[0]}")/all_ok.sh"
export FUNNEL_MPI_LOCAL=1 FUNNEL_JOB_REPORT=1
ALL_OK_RANKS=3 runs_all_ok 2 "$prog" -x FUNNEL_MPI_LOCAL -- : -np 1 "$plain"
grep -q "has waited 10 s" "$tmp/err" && { echo "FAIL: a message waited 10 s:"; cat "$tmp/err"; exit 1; }
report=$(ls "$tmp"/log/*.json 2>/dev/null | head -1)
for _ in $(seq 50); do [ -n "$report" ] && break; sleep 0.2; report=$(ls "$tmp"/log/*.json 2>/dev/null | head -1); done
[ -n "$report" ] || { echo "FAIL: no job report in $tmp/log"; ls -l "$tmp/log"; exit 1; }
read -r clients local < <(python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["clients"]; print(len(c), sum(x.get("local_messages",0) for x in c))' "$report")
[ "$clients" -eq 2 ] || { echo "FAIL: the server had $clients clients, want the 2 funnel ranks"; exit 1; }
# Each funnel rank received two GPU-local messages from the other: MPI_Sendrecv, MPI_Irecv.
[ "$local" -eq 4 ] || { echo "FAIL: the job report counts $local GPU-local messages, want 4"; exit 1; }
echo "PASS (2 funnel ranks and 1 plain rank; $local GPU-local messages, the rest staged)"
