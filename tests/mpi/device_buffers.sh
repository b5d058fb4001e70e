#!/usr/bin/env bash
# device_buffers.sh NP BIN_DIR PROGRAM
# tests/mpi/device_buffers.cu under real `mpirun --oversubscribe -np NP` on the sim backend (on the
# GPU: FUNNEL_TEST_BACKEND=cuda): every rank prints "rank R: all ok", and each names the freed
# buffer it passed once on stderr.
set -u
np=$1 bin=$2 prog=$3
[ -x "$bin/funnel-server" ] || { echo "FAIL: no $bin/funnel-server"; exit 1; }
# shellcheck source=tests/mpi/all_ok.sh
source "$(dirname "${BASH_SOURCE[0]}")/all_ok.sh"
runs_all_ok "$np" "$prog"
n=$(grep -c "MPI_Send: the buffer at 0x[0-9a-f]* (1024 bytes) is neither host memory" "$tmp/err")
[ "$n" -eq "$np" ] || { echo "FAIL: the freed buffer named $n times, want $np; stderr:"; cat "$tmp/err"; exit 1; }
echo PASS
