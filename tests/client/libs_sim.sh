#!/usr/bin/env bash
# libs_sim.sh BIN_DIR PROGRAM KERNEL_PATTERN [PRELOAD]
# Runs PROGRAM (an NVIDIA-library program, e.g. programs/cublas_sim.cu) through funnel-run on
# the sim backend: it must finish ("done", exit 0) with no GPU device file opened by the client,
# and the server's launch log must hold a kernel whose name matches KERNEL_PATTERN (the library's
# own kernel reached the server through funnel's client driver).
set -u
bin=$1 prog=$2 pattern=$3 preload=${4:-}
# shellcheck source=tests/client/sim_env.sh
. "$(dirname "$0")/sim_env.sh"
sim_env "$bin" "$preload"
timeout 60 "$bin/funnel-run" "$prog" > "$dir/out" 2> "$dir/err"
rc=$?
[ "$rc" -eq 0 ] && grep -qx 'done' "$dir/out" || { echo "FAIL: rc=$rc"; cat "$dir/out" "$dir/err"; exit 1; }
if grep -q "opened the GPU itself\|not supported" "$dir/err"; then echo "FAIL: stderr:"; cat "$dir/err"; exit 1; fi
FUNNEL_RUN_DIR=$dir/run timeout 5 "$bin/funnelctl" shutdown >/dev/null 2>&1
if ! grep -Eq "\"kernel\": *\"[^\"]*$pattern" "$FUNNEL_SIM_LAUNCH_LOG"; then
  echo "FAIL: no launch of a kernel matching '$pattern'; the launch log:"; head -c 2000 "$FUNNEL_SIM_LAUNCH_LOG"; exit 1
fi
echo "PASS: $(wc -l < "$FUNNEL_SIM_LAUNCH_LOG") launches, $(grep -Ec "\"kernel\": *\"[^\"]*$pattern" "$FUNNEL_SIM_LAUNCH_LOG") of '$pattern'"
