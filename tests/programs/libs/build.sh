#!/usr/bin/env bash
# Builds the NVIDIA-library test programs of this folder with nvcc, each on its own: one that fails
# to build is reported and the others are still built; the exit status is 1 if any failed.
# Usage: tests/programs/libs/build.sh OUTDIR [ARCH]   (ARCH default sm_90)
# Writes OUTDIR/programs.txt: the names of the programs that built, one per line.
# torch_ops.py needs no build; run it with python3 directly.
set -u

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 OUTDIR [ARCH]" >&2
  exit 2
fi
OUT=$1
ARCH=${2:-sm_90}
HERE=$(cd "$(dirname "$0")" && pwd)
CUDA=${CUDA_HOME:-/usr/local/cuda}
NVCC="$CUDA/bin/nvcc"
STUBS="$CUDA/lib64/stubs"  # stub libcuda.so for linking; the real driver is used at run time

mkdir -p "$OUT" || exit 2
: >"$OUT/programs.txt"
failed=()

# build NAME SOURCE FLAGS...
build() {
  local name=$1 src=$2
  shift 2
  echo "== $name: nvcc $src $*"
  if "$NVCC" -std=c++20 -O2 -arch="$ARCH" -o "$OUT/$name" "$HERE/$src" "$@"; then
    echo "$name" >>"$OUT/programs.txt"
  else
    echo "!! build of $name FAILED (see the compiler output above)" >&2
    failed+=("$name")
  fi
}

build cublas cublas.cu -cudart shared -lcublas
build cublaslt cublaslt.cu -cudart shared -lcublasLt
build cufft cufft.cu -cudart shared -lcufft
build curand curand.cu -cudart shared -lcurand
build cusolver cusolver.cu -cudart shared -lcusolver
build cusparse cusparse.cu -cudart shared -lcusparse
build cudnn cudnn.cu -cudart shared -lcudnn
# Host-only C++: no runtime at all (nvcc would otherwise link the static cudart).
build nvrtc nvrtc.cpp -cudart none -L"$STUBS" -lnvrtc -lcuda
build driver_api driver_api.cpp -cudart none -L"$STUBS" -lcuda
# No -cudart flag: nvcc's default, the static runtime, is the point of this one.
build static_runtime static_runtime.cu
build mixed mixed.cu -cudart shared -L"$STUBS" -lcuda
build vmm vmm.cu -cudart shared -L"$STUBS" -lcuda
build zero_copy zero_copy.cu -cudart shared -L"$STUBS" -lcuda
build graph_kernels graph_kernels.cu -cudart shared
build graph_driver graph_driver.cpp -cudart none -L"$STUBS" -lcuda
build managed_kernels managed_kernels.cu -cudart shared -L"$STUBS" -lcuda
build textures textures.cu -cudart shared

if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED to build: ${failed[*]}" >&2
  exit 1
fi
echo "built $(wc -l <"$OUT/programs.txt") programs into $OUT"
