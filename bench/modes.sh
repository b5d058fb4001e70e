# shellcheck shell=bash
# Funnel variant modes of the benchmark scripts (sourced by bench/run.sh, kernels.sh and
# stencil.sh): "funnel-<k><N>" is funnel-run with one server setting changed.
#   funnel-wK  FUNNEL_SERVER_WORKERS=K      K worker threads per GPU serving all clients (K >= 1)
#   funnel-bN  FUNNEL_LAUNCH_BATCH=N        launch batches of at most N (0: none)
#   funnel-cN  FUNNEL_DEVICE_CONNECTIONS=N  N hardware work queues per GPU (1..32)
#   funnel-sN  FUNNEL_SERVER_SPIN_US=N      a worker polls N us before it polls slowly (0..)
#   funnel-iN  FUNNEL_SERVER_IDLE_SPIN_US=N an idle worker polls N us before it sleeps (0..)
# funnel_variant_env MODE: prints VAR=N for a variant mode; status 1 (nothing printed) for any
# other mode, status 2 with a message for a variant with a bad number.
funnel_variant_env() {
  local mode=$1 var n
  case $mode in
    funnel-w*) var=FUNNEL_SERVER_WORKERS n=${mode#funnel-w} ;;
    funnel-b*) var=FUNNEL_LAUNCH_BATCH n=${mode#funnel-b} ;;
    funnel-c*) var=FUNNEL_DEVICE_CONNECTIONS n=${mode#funnel-c} ;;
    funnel-s*) var=FUNNEL_SERVER_SPIN_US n=${mode#funnel-s} ;;
    funnel-i*) var=FUNNEL_SERVER_IDLE_SPIN_US n=${mode#funnel-i} ;;
    *) return 1 ;;
  esac
  if ! [[ $n =~ ^[0-9]+$ ]] || { [[ $mode == funnel-[wc]* ]] && ((n == 0)); }; then
    echo "bench: mode '$mode' needs a number ($var): funnel-w1.., funnel-b0.., funnel-c1..32, funnel-s0.., funnel-i0.." >&2
    return 2
  fi
  echo "$var=$n"
}
