#!/usr/bin/env bash
# libs_modules_once.sh BIN_DIR PROGRAM [PRELOAD]
# Modules by content, once per node (issue 29, step 5): PROGRAM (an NVIDIA-library program, e.g.
# programs/cublas_sim.cu) runs twice through funnel-run against one sim server; the second run
# uploads no module (every fat binary the library loads is found in the server's cache by its
# digest), as funnelctl stats counts them.
set -u
bin=$1 prog=$2 preload=${3:-}
# shellcheck source=tests/client/sim_env.sh
. "$(dirname "$0")/sim_env.sh"
sim_env "$bin" "$preload"
modules() { "$bin/funnelctl" stats --json | python3 -c 'import json, sys; m = json.load(sys.stdin)["modules"]; print(m["uploads"], m["cache_hits"], m["loads"])'; }
for run in 1 2; do
  timeout 60 "$bin/funnel-run" "$prog" >"$dir/out" 2>"$dir/err" && grep -qx "done" "$dir/out" ||
    { echo "FAIL: run $run: $(cat "$dir/out" "$dir/err")"; exit 1; }
  read -r uploads hits loads <<<"$(modules)" || { echo "FAIL: funnelctl stats"; exit 1; }
  echo "after run $run: uploads $uploads, cache hits $hits, loads $loads"
  if [ "$run" -eq 1 ]; then
    first_uploads=$uploads first_hits=$hits
    [ "$uploads" -gt 0 ] || { echo "FAIL: the first run uploaded no module"; exit 1; }
  fi
done
[ "$uploads" -eq "$first_uploads" ] || { echo "FAIL: the second run uploaded $((uploads - first_uploads)) modules again"; exit 1; }
[ "$hits" -ge $((first_hits + first_uploads)) ] ||
  { echo "FAIL: the second run found $((hits - first_hits)) modules in the cache, expected $first_uploads"; exit 1; }
echo PASS
