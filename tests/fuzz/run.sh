#!/usr/bin/env bash
# Builds the fuzz targets with clang (their own build directory) and runs them: the
# server-command target for --seconds, then the socket target for --socket-seconds.
#   tests/fuzz/run.sh [--seconds N] [--socket-seconds N] [--build-dir DIR] [--jobs N] [-- libFuzzer flags...]
# Defaults: 60 s and 20 s, build-fuzz/ at the repository root, JOBS or 2 build jobs.  The
# corpora grow in DIR/corpus and DIR/socket_corpus (seeded from tests/fuzz/corpus and
# tests/fuzz/socket_corpus); a crash, leak or timeout input lands in DIR/artifacts/, and the
# script prints its path and exits 1.  First, every input in tests/fuzz/crashes/ (bugs
# found before; socket-* ones are the socket target's) is replayed and must pass.
# doc/reliability.md ("Fuzzing") says what the target covers.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
seconds=60
socket_seconds=20
build="$root/build-fuzz"
jobs=${JOBS:-2}
extra=()
while (($#)); do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --socket-seconds) socket_seconds=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

cxx=$(command -v clang++-14 || command -v clang++ || true)
cc=$(command -v clang-14 || command -v clang || true)
fuzzer_lib=$([[ -n $cxx ]] && "$cxx" -print-file-name=libclang_rt.fuzzer-x86_64.a)
if [[ -z $cxx || ! -f $fuzzer_lib ]]; then
  echo "run.sh: needs clang with libFuzzer (Debian: clang-14 libclang-rt-14-dev; scripts/install-deps.sh): skipped" >&2
  exit 77
fi
export PATH=/usr/local/cuda/bin:$PATH

t0=$SECONDS
mkdir -p "$build"
if ! cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE= \
    -DCMAKE_CXX_FLAGS="-O1 -gline-tables-only" -DCMAKE_C_FLAGS="-O1 -gline-tables-only" -DCMAKE_CXX_COMPILER="$cxx" \
    -DCMAKE_C_COMPILER="$cc" >"$build/configure.log" 2>&1; then
  cat "$build/configure.log"
  exit 1
fi
cmake --build "$build" -j "$jobs" --target server_commands_fuzzer server_socket_fuzzer make_corpus || exit 1
echo "run.sh: built in $((SECONDS - t0)) s"

# detect_leaks: LeakSanitizer after inputs that allocated more than they freed.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

# Every input that ever found a bug (tests/fuzz/crashes/) must pass before any fuzzing.
shopt -s nullglob
found=("$here"/crashes/*)
for input in "${found[@]}"; do
  target=server_commands_fuzzer
  [[ $(basename "$input") == socket-* ]] && target=server_socket_fuzzer
  if ! "$build/$target" -timeout=10 "$input" >"$build/replay.log" 2>&1; then
    grep -E 'runtime error|ERROR:|funnel fuzz:|SUMMARY' "$build/replay.log" | head -5 >&2
    echo "run.sh: a recorded crash input fails again: $input (full output: $build/replay.log)" >&2
    exit 1
  fi
done
((${#found[@]})) && echo "run.sh: ${#found[@]} recorded crash input(s) in tests/fuzz/crashes pass"

# fuzz TARGET SECONDS CORPUS: runs one target; exits the script on a finding.
fuzz() {
  local target=$1 secs=$2 corpus=$3 log="$build/$1.log"
  ((secs > 0)) || return 0
  mkdir -p "$build/$corpus" "$build/artifacts"
  "$build/$target" -max_total_time="$secs" -timeout=10 -max_len=8192 -rss_limit_mb=4096 \
    -print_final_stats=1 -artifact_prefix="$build/artifacts/" "${extra[@]}" \
    "$build/$corpus" "$here/$corpus" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  if ((rc != 0)); then
    crash=$(grep -o 'Test unit written to .*' "$log" | tail -1 | sed 's/Test unit written to //')
    echo "run.sh: $target failed (exit $rc); input: ${crash:-none written}" >&2
    echo "run.sh: reproduce with $build/$target ${crash:-<input>}" >&2
    exit 1
  fi
  echo "run.sh: $target: no crash, leak or timeout in $secs s"
}
fuzz server_commands_fuzzer "$seconds" corpus
fuzz server_socket_fuzzer "$socket_seconds" socket_corpus
