#!/usr/bin/env bash
# THE test command (README quick start; .ci/run calls it).
#   1. build-ci/   RelWithDebInfo, everything, ctest of every test
#   2. build-asan/ ASan+UBSan, ctest -L 'ipc|server|client'
#   3. build-tsan/ TSan,       ctest -L 'ipc|server'
# Prints "N passed, N failed" over the three runs and exits nonzero on any failure.
# JOBS (default 2) sets build and ctest parallelism.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
export PATH=/usr/local/cuda/bin:$PATH
JOBS=${JOBS:-2}

scripts/install-deps.sh || exit 1

passed=0
failed=0
problems=()
start_all=$SECONDS

# run_suite NAME BUILD_DIR LABEL_REGEX TARGETS CMAKE_ARGS...
# TARGETS: what to build ("" = everything); the tests of LABEL_REGEX must need no other.
run_suite() {
  local name=$1 dir=$2 labels=$3 targets=$4
  shift 4
  local t0=$SECONDS
  echo "=== [$name] configure + build ($dir)"
  mkdir -p "$dir"
  if ! cmake -S . -B "$dir" -G Ninja "$@" >"$dir/configure.log" 2>&1; then
    cat "$dir/configure.log"
    problems+=("$name: configure failed")
    failed=$((failed + 1))
    return
  fi
  local -a target_args=()
  [[ -n "$targets" ]] && read -r -a target_args <<<"--target $targets"
  if ! cmake --build "$dir" -j "$JOBS" "${target_args[@]}"; then
    problems+=("$name: build failed")
    failed=$((failed + 1))
    return
  fi
  echo "=== [$name] ctest ${labels:+-L '$labels'}"
  local log="$dir/ctest.log"
  local -a label_args=()
  [[ -n "$labels" ]] && label_args=(-L "$labels")
  # No job report (and no chart process) from the hundreds of servers the tests stop: 2
  # CPU-seconds of matplotlib each on CI's 2 cores; client.job_report turns it on for itself.
  FUNNEL_JOB_REPORT=0 ctest --test-dir "$dir" --output-on-failure --timeout 300 -j "$JOBS" "${label_args[@]}" 2>&1 | tee "$log"
  local line p f total
  line=$(grep -E 'tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -1)
  if [[ -z "$line" ]]; then
    if grep -q 'No tests were found' "$log"; then
      echo "=== [$name] no tests found"
    else
      problems+=("$name: ctest did not report a result")
      failed=$((failed + 1))
    fi
  else
    total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$line")
    f=$(sed -E 's/.*, ([0-9]+) tests? failed.*/\1/' <<<"$line")
    p=$((total - f))
    passed=$((passed + p))
    failed=$((failed + f))
    ((f > 0)) && problems+=("$name: $f of $total tests failed")
  fi
  echo "=== [$name] done in $((SECONDS - t0)) s"
}

run_suite normal build-ci "" "" -DCMAKE_BUILD_TYPE=RelWithDebInfo
# Sanitizer builds are Debug: they compile faster on 2 cores and the sanitizers need no -O2.
run_suite asan build-asan 'ipc|server|client' "" -DCMAKE_BUILD_TYPE=Debug \
  -DFUNNEL_SANITIZE=address,undefined -DFUNNEL_BUILD_CUDA_PROGRAMS=OFF
# The ipc and server tests are these two programs: the client runtime, funnelctl, funnel-run,
# the hooks and the affinity tests are not built again with TSan (about 70 s of CI's 2 cores).
run_suite tsan build-tsan 'ipc|server' "funnel_ipc_tests funnel_server_tests" -DCMAKE_BUILD_TYPE=Debug \
  -DFUNNEL_SANITIZE=thread -DFUNNEL_BUILD_CUDA_PROGRAMS=OFF

echo
for p in "${problems[@]}"; do echo "FAILED: $p"; done
echo "total time $((SECONDS - start_all)) s"
echo "$passed passed, $failed failed"
((failed == 0))
