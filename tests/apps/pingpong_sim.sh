#!/usr/bin/env bash
# apps/pingpong linked with funnel::mpi (pingpong_funnel) under real Open MPI on the sim backend:
# each mode's exchanges of 4 B to 1 MiB come back byte for byte (the app checks and exits 1 if
# not) and print one line per size; "local" is --mode device under FUNNEL_MPI_LOCAL=1 (GPU-local
# messages through the server's mailbox).
#   pingpong_sim.sh PINGPONG_FUNNEL
set -u
pp=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export FUNNEL_BACKEND=sim FUNNEL_LOG_DIR=$dir/log FUNNEL_IDLE_EXIT_MS=1000
unset FUNNEL_RUN_DIR FUNNEL_JOB_ID
args=(--oversubscribe --bind-to none --mca btl "self,vader")
[[ $(id -u) == 0 ]] && args+=(--allow-run-as-root)
fail=0
for mode in device staged host local; do
  how=$mode local=0
  [[ $mode == local ]] && how=device local=1
  if ! FUNNEL_MPI_LOCAL=$local timeout 120 mpirun "${args[@]}" -x FUNNEL_MPI_LOCAL -np 2 "$pp" --mode "$how" --min 4 \
      --max 1048576 --iters 3 >"$dir/$mode.out" 2>&1; then
    echo "FAIL: --mode $mode:"; cat "$dir/$mode.out"; fail=1; continue
  fi
  n=$(grep -c "^{\"mode\":\"$how\",\"bytes\":" "$dir/$mode.out")
  [[ $n == 19 ]] || { echo "FAIL: --mode $mode printed $n sizes, want 19:"; cat "$dir/$mode.out"; fail=1; }
done
((fail == 0)) && echo PASS
exit $fail
