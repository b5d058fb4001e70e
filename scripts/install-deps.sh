#!/usr/bin/env bash
# Installs what funnel needs to build and test on Debian 12.  Idempotent: when
# everything is present it touches nothing (and then root is not needed).
# CUDA 13 itself is not installed here: it must already be at /usr/local/cuda.
set -euo pipefail

packages=(
  build-essential cmake ninja-build g++ pkg-config git
  libboost-dev libhwloc-dev hwloc
  libopenmpi-dev openmpi-bin
  gfortran  # mpif90 runs `gfortran`; libopenmpi-dev only pulls in gfortran-12 (tests mpi.fortran*)
  libgtest-dev libgmock-dev
  libcli11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev
  libssl-dev  # OpenSSL's SHA-256: the digest that names a fat binary (runtime/ipc)
  python3 procps psmisc file binutils util-linux
  shellcheck  # tests/lint: the Slurm, bench and GPU-suite scripts (lint.shellcheck)
  python3-matplotlib  # the job report's chart (share/funnel/funnel-report-plot.py, client.job_report) and bench/report.py's plots
  clang-14 libclang-rt-14-dev  # tests/fuzz: libFuzzer (fuzz.server_commands)
  slurmctld slurmd slurm-client munge  # tests/slurm: a single-node Slurm that the test starts (label slurm)
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if ((${#missing[@]} > 0)); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "install-deps: missing packages: ${missing[*]}" >&2
    echo "install-deps: run this script as root (sudo $0) to install them." >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  apt-get install -y --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all packages present"
fi

if [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  cat >&2 <<'MSG'
install-deps: /usr/local/cuda/bin/nvcc not found.
  funnel needs the CUDA 13 toolkit (headers and nvcc) at /usr/local/cuda, even on a
  machine without a GPU.  Install it from NVIDIA's Debian 12 repository
  (https://developer.nvidia.com/cuda-downloads: package cuda-toolkit-13-0), or link
  an existing toolkit: ln -s /path/to/cuda-13.x /usr/local/cuda
MSG
  exit 1
fi
ver=$(/usr/local/cuda/bin/nvcc --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
if [[ "$ver" != 13 ]]; then
  echo "install-deps: /usr/local/cuda is CUDA ${ver:-unknown}; funnel needs CUDA 13" >&2
  exit 1
fi
echo "install-deps: CUDA $( /usr/local/cuda/bin/nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p') at /usr/local/cuda"
