#!/usr/bin/env bash
# One device-tool batch (see doc/testing.md): the GPU suite with the benchmark, plus
# optional extras named in EXTRA ("copy1": membench with one copy thread; "kernels":
# bench/kernels.sh, native vs MPS vs funnel), logs tarred into $OUT.  SUITE=0 skips the suite
# (the build still happens through tests/gpu/run.sh unless build-gpu exists).
set -u
R=${OUT:?}
export OUT=/tmp/gpu-out
rm -rf /tmp/gpu-out; mkdir -p /tmp/gpu-out
t0=$SECONDS
if [[ ${SUITE:-1} == 1 ]]; then
  ROUNDS=${ROUNDS:-5} bash tests/gpu/run.sh >/tmp/gpu-out/run.log 2>&1
  echo "gpu suite rc=$? in $((SECONDS - t0)) s" >>/tmp/gpu-out/run.log
fi
for v in ${EXTRA:-}; do
  case $v in
    copy1) FUNNEL_COPY_THREADS=1 ROUNDS=1 BUILD_DIR=build-gpu OUT=/tmp/gpu-out/bench-copy1 bench/membench.sh \
             >/tmp/gpu-out/bench-copy1.log 2>&1 ;;
    kernels) BUILD_DIR=build-gpu OUT=/tmp/gpu-out/bench-kernels timeout 560 bench/kernels.sh \
             >/tmp/gpu-out/bench-kernels.log 2>&1 ;;
  esac
done
tail -40 /tmp/gpu-out/run.log 2>/dev/null
[[ -f /tmp/gpu-out/bench-kernels.log ]] && tail -60 /tmp/gpu-out/bench-kernels.log
cat /tmp/gpu-out/bench/ratios.txt 2>/dev/null
[[ -f /tmp/gpu-out/bench-copy1/ratios.txt ]] && { echo "--- FUNNEL_COPY_THREADS=1"; grep pageable /tmp/gpu-out/bench-copy1/ratios.txt; }
tar czf "$R/gpu-logs.tgz" -C /tmp gpu-out
