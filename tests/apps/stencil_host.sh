#!/usr/bin/env bash
# apps/stencil's decomposition and halo exchange on the CPU (--host: the same code path with
# host loops for the kernels, no CUDA call), with real Open MPI: 2, 4 and 8 ranks, uneven
# splits included, must match the 1-rank reference; a broken reference must be refused.
#   stencil_host.sh STENCIL
set -u
st=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
args=(--oversubscribe --bind-to none)
[[ $(id -u) == 0 ]] && args+=(--allow-run-as-root)
run() { timeout 60 mpirun "${args[@]}" -np "$1" "$st" --host --n 37 --steps 6 --warmup 1 --reference "$dir/ref.txt"; }
fail=0
run 1 >"$dir/1.out" 2>&1 || { echo "FAIL: 1 rank: $(cat "$dir/1.out")"; exit 1; }
[[ -s $dir/ref.txt ]] || { echo "FAIL: no reference written"; exit 1; }
for np in 2 4 8; do
  if ! run "$np" >"$dir/$np.out" 2>&1; then
    echo "FAIL: $np ranks do not match the 1-rank reference:"; cat "$dir/$np.out"; fail=1
  fi
done
# A wrong reference must fail the run (exit 3), or the checks above prove nothing.
sed -i 's/checksum=[0-9.eE+-]*/checksum=12345.5/' "$dir/ref.txt"
if run 4 >"$dir/bad.out" 2>&1; then
  echo "FAIL: a wrong reference was accepted: $(cat "$dir/bad.out")"; fail=1
fi
((fail == 0)) && echo PASS
exit $fail
