#!/usr/bin/env bash
# Runs programs under the driver tracer (trace.cpp) on a GPU machine and writes what they asked
# of the driver: OUT/<program>/driver-trace-PID.json per process, OUT/<program>/{stdout,stderr},
# the same program's native stdout beside it (the tracer must not change a result), and
# OUT/surface.md, the tables of summarize.py.
#   bench/driver_trace/run.sh OUT TRACER_DIR PROGRAM_DIR
# PROGRAM_DIR: tests/programs/libs/build.sh's output (programs.txt lists the programs); the
# Python programs (tests/programs/libs/torch_ops.py, and small CuPy and JAX ones) run where
# python3 imports the framework. TIMEOUT (default 180 s) bounds each run.
set -u -o pipefail
out=$1 tracer=$2 progs=$3
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TIMEOUT=${TIMEOUT:-180}
mkdir -p "$out"
[[ -e $tracer/libcuda.so.1 ]] || { echo "run.sh: no libcuda.so.1 in $tracer" >&2; exit 2; }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

cupy_prog='import cupy as cp
a = cp.arange(64, dtype=cp.float32).reshape(8, 8)
print("cupy sum", float((a @ a).sum()))
print("cupy fft", round(float(cp.abs(cp.fft.fft(cp.arange(16))).sum()), 3))
k = cp.ElementwiseKernel("float32 x", "float32 y", "y = x * 2", "twice")
print("cupy kernel", float(k(a).sum()))'
jax_prog='import jax, jax.numpy as jnp
x = jnp.arange(64.0, dtype=jnp.float32).reshape(8, 8)
print("jax dot", float(jnp.dot(x, x).sum()))
print("jax grad", float(jax.grad(lambda v: (v * v).sum())(x).sum()))'

# run NAME COMMAND...: natively, then under the tracer.
run() {
  local name=$1
  shift
  local d=$out/$name
  mkdir -p "$d"
  timeout "$TIMEOUT" "$@" >"$d/native.stdout" 2>"$d/native.stderr"
  local native=$?
  FUNNEL_TRACE_OUT=$d LD_LIBRARY_PATH=$tracer:$LD_LIBRARY_PATH timeout "$TIMEOUT" "$@" >"$d/stdout" 2>"$d/stderr"
  local traced=$?
  local same=same
  cmp -s <(grep -v '^#' "$d/native.stdout") <(grep -v '^#' "$d/stdout") || same=DIFFERENT
  local n
  n=$(find "$d" -name 'driver-trace-*.json' | wc -l)
  printf '%-16s native exit %-3s traced exit %-3s output %-9s %s report(s)\n' "$name" "$native" "$traced" "$same" "$n" |
    tee -a "$out/runs.txt"
}

: >"$out/runs.txt"
while read -r p; do
  [[ -n $p && -x $progs/$p ]] && run "$p" "$progs/$p"
done <"$progs/programs.txt"
if python3 -c 'import torch' 2>/dev/null; then run torch python3 "$ROOT/tests/programs/libs/torch_ops.py"; fi
if python3 -c 'import cupy' 2>/dev/null; then run cupy python3 -c "$cupy_prog"; fi
if python3 -c 'import jax' 2>/dev/null; then run jax python3 -c "$jax_prog"; fi
python3 "$ROOT/bench/driver_trace/summarize.py" "$out" >"$out/surface.md"
echo "tables: $out/surface.md"
