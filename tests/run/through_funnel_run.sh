#!/usr/bin/env bash
# through_funnel_run.sh ARGS...
# Runs FUNNEL_TEST_PROGRAM ARGS through funnel-run (FUNNEL_TEST_FUNNEL_RUN), so that
# tests/mpi/lifecycle.sh, which runs `mpirun ... PROGRAM MODE`, checks
# `mpirun ... funnel-run PROGRAM MODE`. FUNNEL_TEST_IDLE_EXIT_MS, when set, replaces
# lifecycle.sh's FUNNEL_IDLE_EXIT_MS for the rank, and so for a server its MPI_Init starts.
set -eu
if [ -n "${FUNNEL_TEST_IDLE_EXIT_MS:-}" ]; then export FUNNEL_IDLE_EXIT_MS=$FUNNEL_TEST_IDLE_EXIT_MS; fi
exec "$FUNNEL_TEST_FUNNEL_RUN" "$FUNNEL_TEST_PROGRAM" "$@"
