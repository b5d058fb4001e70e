# shellcheck shell=bash
# Sourced by the benchmarks (kernels.sh, stencil.sh, run.sh): NVIDIA MPS started with a private
# pipe and log directory, and always stopped.  Needs OUT_DIR (its log is copied there).
# nvidia-cuda-mps-control is looked for in PATH, then in /usr/local/nvidia/bin and /usr/bin
# (the GPU machines have it in /usr/local/nvidia/bin, not always in PATH); its directory is put
# in PATH so that the daemon finds nvidia-cuda-mps-server beside it.
# MPS_TMPDIR (default /tmp): where the private directories are made (bench/run.sh gives each
# run its own, so that it can quit a daemon left behind by a step it had to kill).
MPS_CONTROL=$(command -v nvidia-cuda-mps-control || true)
for _d in /usr/local/nvidia/bin /usr/bin; do
  [[ -z $MPS_CONTROL && -x $_d/nvidia-cuda-mps-control ]] && MPS_CONTROL=$_d/nvidia-cuda-mps-control
done
unset _d
if [[ -n $MPS_CONTROL ]]; then
  case ":$PATH:" in
    *":$(dirname "$MPS_CONTROL"):"*) ;;
    *) PATH=$PATH:$(dirname "$MPS_CONTROL") && export PATH ;;
  esac
fi
MPS_DIR=""

mps_start() {
  mkdir -p "${MPS_TMPDIR:-/tmp}"
  MPS_DIR=$(mktemp -d "${MPS_TMPDIR:-/tmp}/funnel-mps.XXXXXX") || return 1
  mkdir -p "$MPS_DIR/pipe" "$MPS_DIR/log"
  export CUDA_MPS_PIPE_DIRECTORY=$MPS_DIR/pipe CUDA_MPS_LOG_DIRECTORY=$MPS_DIR/log
  "$MPS_CONTROL" -d || { mps_stop; return 1; }
  # ready once the daemon's control socket is there (at most 5 s)
  for _ in $(seq 50); do [[ -e $MPS_DIR/pipe/control ]] && break; sleep 0.1; done
}
mps_stop() {
  [[ -n $MPS_DIR ]] || return 0
  echo quit | CUDA_MPS_PIPE_DIRECTORY=$MPS_DIR/pipe timeout 20 "$MPS_CONTROL" >/dev/null 2>&1
  for _ in $(seq 50); do pgrep -u "$(id -u)" -f nvidia-cuda-mps-server >/dev/null || break; sleep 0.1; done
  cp -r "$MPS_DIR/log" "$OUT_DIR/mps-log" 2>/dev/null
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  rm -rf "$MPS_DIR"
  MPS_DIR=""
}
trap mps_stop EXIT
