#!/usr/bin/env bash
# check_symbols.sh LIB: libfunnel_mpi.so exports only MPI_*, funnel_* and the Fortran mpi_init_, mpi_init_thread_, mpi_finalize_.
set -eu
lib=$1
got=$(nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//')
bad=$(printf '%s\n' "$got" | grep -Ev '^(MPI_.*|funnel_.*|mpi_init_|mpi_init_thread_|mpi_finalize_)$' || true)
[ -z "$bad" ] || { echo "FAIL: unexpected exported symbols:"; echo "$bad"; exit 1; }
for s in MPI_Init MPI_Init_thread MPI_Finalize; do
  grep -qx "$s" <<<"$got" || { echo "FAIL: $s is not exported"; exit 1; }
done
echo PASS
