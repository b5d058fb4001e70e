# Sourced by the GPU suite's step scripts (tests/gpu/*.sh): `gpu_step BUILD_DIR OUT_DIR` sets
# BUILD, OUT_DIR (created), BIN, ROOT, PATH (nvcc) and FAILED=0; result() prints one
# "RESULT word... status detail" line and remembers a FAIL; gpu_compile builds a test program
# the way users build theirs (shared cudart, sm_90).
# shellcheck shell=bash
# shellcheck disable=SC2034  # the variables are for the sourcing script
gpu_step() {
  BUILD=$1
  OUT_DIR=$2
  BIN=$BUILD/bin
  ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  mkdir -p "$OUT_DIR"
  export PATH=/usr/local/cuda/bin:$PATH
  FAILED=0
}

# result WORD... STATUS DETAIL: STATUS is PASS, FAIL or SKIP; the words name the check.
# shellcheck disable=SC2034
result() {
  echo "RESULT $*"
  local a
  for a in "${@:1:$#-1}"; do [[ $a == FAIL ]] && FAILED=1; done
  return 0
}

# gpu_compile OUTPUT SOURCE [NVCC_FLAGS...]: nvcc's messages go to OUTPUT.nvcc.log.
gpu_compile() {
  local out=$1 src=$2
  shift 2
  nvcc -arch=sm_90 -cudart shared -O1 -I"$ROOT/tests/programs" "$@" -o "$out" "$src" >"$out.nvcc.log" 2>&1
}
