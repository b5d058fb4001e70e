#!/usr/bin/env bash
# local_messages.sh NP BIN_DIR PROGRAM
# tests/mpi/local_messages.cu under real `mpirun --oversubscribe -np NP` with FUNNEL_MPI_LOCAL=1 on
# the sim backend (on the GPU: FUNNEL_TEST_BACKEND=cuda): every rank prints "rank R: all ok", the
# server's job report counts the GPU-local messages (the device-buffer messages went through its
# mailbox, not through MPI), and each refusal is named on stderr.
set -u
np=$1 bin=$2 prog=$3
[ -x "$bin/funnel-server" ] || { echo "FAIL: no $bin/funnel-server"; exit 1; }
# shellcheck source=tests/mpi/all_ok.sh
source "$(dirname "${BASH_SOURCE[0]}")/all_ok.sh"
# The job report counts the messages (scripts/test.sh turns reports off for the other tests).
export FUNNEL_MPI_LOCAL=1 FUNNEL_JOB_REPORT=1
runs_all_ok "$np" "$prog" -x FUNNEL_MPI_LOCAL
for what in "MPI_Recv into a device buffer with MPI_ANY_SOURCE under FUNNEL_MPI_LOCAL=1: refused" \
            "MPI_Send of a device buffer with a datatype that is not contiguous" \
            "MPI_Bsend_init of a device buffer to a rank of this node under FUNNEL_MPI_LOCAL=1: refused" \
            "MPI_Cancel of a GPU-local MPI_Irecv is not supported yet"; do
  n=$(grep -c -F "$what" "$tmp/err")
  [ "$n" -eq "$np" ] || { echo "FAIL: '$what' said $n times, want $np; stderr:"; cat "$tmp/err"; exit 1; }
done
grep -q "MPI_Irecv (GPU-local message, peer 1, tag 20): the other rank's process left funnel-server" "$tmp/err" ||
  { echo "FAIL: the receive from the rank that left is not named on stderr:"; cat "$tmp/err"; exit 1; }
# The server wrote its job report when it stopped: its clients' GPU-local messages.  Per rank:
# 3 ring + 5 non-blocking (2 by MPI_Waitall, 1 by MPI_Test, 2 by MPI_Waitany/MPI_Waitsome) + 1 to
# itself + 1 MPI_Sendrecv_replace + 3 persistent + 3 buffered or freed + 3 on sub-communicators + 1
# probed + 3 by matched probes + 1 asked to cancel + 1 truncated = 25 received, and 4 more where
# ranks pair up
# (even NP), and 1 at rank 0 (from rank 1 before it left); the host message is not one.
report=$(ls "$tmp"/log/*.json 2>/dev/null | head -1)
for _ in $(seq 50); do [ -n "$report" ] && break; sleep 0.2; report=$(ls "$tmp"/log/*.json 2>/dev/null | head -1); done
[ -n "$report" ] || { echo "FAIL: no job report in $tmp/log"; ls -l "$tmp/log"; exit 1; }
want=$(( np * (25 + (np % 2 == 0 ? 4 : 0)) + 1 ))
got=$(python3 -c 'import json,sys; print(sum(c.get("local_messages",0) for c in json.load(open(sys.argv[1]))["clients"]))' "$report")
[ "$got" -eq "$want" ] || { echo "FAIL: the job report counts $got GPU-local messages, want $want"; exit 1; }
echo "PASS ($got GPU-local messages)"
