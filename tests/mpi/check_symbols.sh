#!/usr/bin/env bash
# check_symbols.sh LIB: libfunnel_mpi.so exports only MPI_*, funnel_* and the Fortran entry
# points (mpif.h / `use mpi`: mpi_init_, mpi_init_thread_, mpi_finalize_; `use mpi_f08`: the
# same with _f08_), and exports each of those.
set -eu
lib=$1
fortran="mpi_init_ mpi_init_thread_ mpi_finalize_ mpi_init_f08_ mpi_init_thread_f08_ mpi_finalize_f08_"
got=$(nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//')
bad=$(printf '%s\n' "$got" | grep -Ev "^(MPI_.*|funnel_.*|${fortran// /|})$" || true)
[ -z "$bad" ] || { echo "FAIL: unexpected exported symbols:"; echo "$bad"; exit 1; }
for s in MPI_Init MPI_Init_thread MPI_Finalize $fortran; do
  grep -qx "$s" <<<"$got" || { echo "FAIL: $s is not exported"; exit 1; }
done
echo PASS
