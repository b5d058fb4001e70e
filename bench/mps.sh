# Sourced by the benchmarks (kernels.sh, stencil.sh): NVIDIA MPS started with a private pipe
# and log directory, and always stopped.  Needs OUT_DIR (its log is copied there).
MPS_CONTROL=$(command -v nvidia-cuda-mps-control || true)
MPS_DIR=""

mps_start() {
  MPS_DIR=$(mktemp -d /tmp/funnel-mps.XXXXXX)
  mkdir -p "$MPS_DIR/pipe" "$MPS_DIR/log"
  export CUDA_MPS_PIPE_DIRECTORY=$MPS_DIR/pipe CUDA_MPS_LOG_DIRECTORY=$MPS_DIR/log
  "$MPS_CONTROL" -d
}
mps_stop() {
  [[ -n $MPS_DIR ]] || return 0
  echo quit | "$MPS_CONTROL" >/dev/null 2>&1
  for _ in $(seq 50); do pgrep -u "$(id -u)" -f nvidia-cuda-mps-server >/dev/null || break; sleep 0.1; done
  cp -r "$MPS_DIR/log" "$OUT_DIR/mps-log" 2>/dev/null
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  rm -rf "$MPS_DIR"
  MPS_DIR=""
}
trap mps_stop EXIT
