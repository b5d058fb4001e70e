#!/usr/bin/env bash
# funnel-server never takes funnel's client driver for the NVIDIA driver: with lib/funnel-driver
# first in LD_LIBRARY_PATH, the cuda backend refuses to start and says why and what to do.
#   driver_not_for_server.sh FUNNEL_SERVER CLIENT_DRIVER_DIR
set -u -o pipefail
server=$1 driver_dir=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0} LD_LIBRARY_PATH=$driver_dir timeout 30 "$server" --backend cuda --run-dir "$tmp/run" >"$tmp/out" 2>&1
rc=$?
if [[ $rc == 0 || $rc == 124 ]]; then
  echo "FAIL: funnel-server over funnel's client driver exited $rc"
  cat "$tmp/out"
  exit 1
fi
if ! grep -q "is funnel's client driver (.*funnel-driver/libcuda.so.1), not the NVIDIA driver: take funnel's lib/funnel-driver out of the server's LD_LIBRARY_PATH" "$tmp/out"; then
  echo "FAIL: the refusal does not say why:"
  cat "$tmp/out"
  exit 1
fi
echo "funnel-server refuses funnel's client driver (exit $rc): $(cat "$tmp/out")"
