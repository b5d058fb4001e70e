#!/usr/bin/env bash
# same_layout.sh LIFECYCLE_ARGS...
# Runs tests/mpi/lifecycle.sh with address-space randomisation off (setarch -R: mpirun, the
# server and every rank inherit it), so that the server and the ranks lay out their address
# spaces alike: the server's device addresses (host memory on the sim backend, as the driver's
# are mapped in its process) fall on the ranks' own mappings, and the client runtime must place
# its allocations where the server has nothing (api_memory.cpp, reserve_far_range_locked).
# Before that, every cudaMalloc of mpi_cuda failed with AlreadyMapped this way (and once in CI
# with randomisation on). Exit 77 (skipped) where the personality cannot be set (a container's
# seccomp profile may forbid it).
set -u
if ! out=$(setarch "$(uname -m)" -R true 2>&1); then
  echo "SKIP: setarch -R is not permitted here ($out); the same-layout case cannot be run"
  exit 77
fi
exec setarch "$(uname -m)" -R "$(dirname "$0")/lifecycle.sh" "$@"
