# shellcheck shell=bash
# Sourced by the client test scripts: a private run directory ($dir) on the sim backend,
# with the launch log at $dir/launches.jsonl; at exit the server is stopped and $dir removed.
#   sim_env BIN_DIR [PRELOAD]      PRELOAD (a sanitizer runtime) goes first in LD_PRELOAD
sim_env() {
  sim_bin=$1
  dir=$(mktemp -d /tmp/funnel-test.XXXXXX)
  trap 'FUNNEL_RUN_DIR=$dir/run timeout 5 "$sim_bin/funnelctl" shutdown >/dev/null 2>&1; rm -rf "$dir"' EXIT
  export FUNNEL_RUN_DIR=$dir/run FUNNEL_BACKEND=sim FUNNEL_LOG_DIR=$dir/log FUNNEL_IDLE_EXIT_MS=10000
  export FUNNEL_SIM_LAUNCH_LOG=$dir/launches.jsonl
  if [ -n "${2:-}" ]; then export LD_PRELOAD=$2 ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}; fi
}
