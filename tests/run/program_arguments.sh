#!/usr/bin/env bash
# funnel-run passes the program's own options through untouched (bench/kernels.sh found
# `--kernel empty` split off the program's arguments), and refuses a missing program.
set -u
FR=$1 preload=${2:-}  # PRELOAD: a sanitizer runtime, first in LD_PRELOAD
[ -n "$preload" ] && export LD_PRELOAD=$preload ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export FUNNEL_RUN_DIR=$dir/run FUNNEL_BACKEND=sim FUNNEL_LOG_DIR=$dir/logs
fail=0
got=$("$FR" /bin/echo a --kernel b -x --backend c -- d)
want="a --kernel b -x --backend c -- d"
[[ $got == "$want" ]] || { echo "FAIL: got '$got', want '$want'"; fail=1; }
got=$("$FR" --backend sim /bin/echo --run-dir x)
[[ $got == "--run-dir x" ]] || { echo "FAIL: got '$got', want '--run-dir x'"; fail=1; }
if "$FR" >"$dir/out" 2>&1; then
  echo "FAIL: funnel-run without a program succeeded"; fail=1
elif ! grep -q "no program given" "$dir/out"; then
  echo "FAIL: no clear error without a program: $(cat "$dir/out")"; fail=1
fi
((fail == 0)) && echo PASS
exit $fail
