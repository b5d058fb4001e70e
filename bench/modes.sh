# shellcheck shell=bash
# Funnel variant modes of the benchmark scripts (sourced by bench/run.sh, kernels.sh and
# stencil.sh): "funnel-<k><N>" is funnel-run with one server setting changed; several joined
# by '+' change several (funnel-i0+s0).
#   funnel-wK  FUNNEL_SERVER_WORKERS=K      K worker threads per GPU serving all clients (K >= 1)
#   funnel-bN  FUNNEL_LAUNCH_BATCH=N        launch batches of at most N (0: none)
#   funnel-cN  FUNNEL_DEVICE_CONNECTIONS=N  N hardware work queues per GPU (1..32)
#   funnel-sN  FUNNEL_SERVER_SPIN_US=N      a worker polls N us before it polls slowly (0..)
#   funnel-iN  FUNNEL_SERVER_IDLE_SPIN_US=N an idle worker polls N us before it sleeps (0..)
#   funnel-yN  FUNNEL_SERVER_SPIN_BACKOFF_MS=N  no polling for N ms once the core is wanted (0: never)
#   funnel-aX  FUNNEL_SERVER_AFFINITY=X     X is auto, gpu or off (funnel-agpu)
#   funnel-oN  FUNNEL_SUBMIT_ORDER=N        1: workers on cores of their own queue their waited copies
#   funnel-gN  FUNNEL_GPU_REPLIES=N         0: the worker answers every waited call (no stream writes)
# funnel_variant_env MODE: prints VAR=N (space-separated, one per setting) for a variant mode;
# status 1 (nothing printed) for any other mode, status 2 with a message for a variant with a
# bad setting.  Callers split the output into words.
funnel_variant_env() {
  local mode=$1 part var n vars=() parts
  [[ $mode == funnel-?* ]] || return 1
  IFS=+ read -ra parts <<<"${mode#funnel-}"
  [[ $mode == *+ ]] && parts+=("")  # read drops an empty last part
  for part in "${parts[@]}"; do
    case $part in
      w*) var=FUNNEL_SERVER_WORKERS ;;
      b*) var=FUNNEL_LAUNCH_BATCH ;;
      c*) var=FUNNEL_DEVICE_CONNECTIONS ;;
      s*) var=FUNNEL_SERVER_SPIN_US ;;
      i*) var=FUNNEL_SERVER_IDLE_SPIN_US ;;
      y*) var=FUNNEL_SERVER_SPIN_BACKOFF_MS ;;
      a*) var=FUNNEL_SERVER_AFFINITY ;;
      o*) var=FUNNEL_SUBMIT_ORDER ;;
      g*) var=FUNNEL_GPU_REPLIES ;;
      '') var="a setting" ;;
      *) return 1 ;;
    esac
    n=${part:1}
    if [[ $part == a* ]]; then
      [[ $n =~ ^(auto|gpu|off)$ ]] && { vars+=("$var=$n"); continue; }
    elif [[ $n =~ ^[0-9]+$ ]] && ! { [[ $part == [wc]* ]] && ((n == 0)); }; then
      vars+=("$var=$n")
      continue
    fi
    echo "bench: mode '$mode' needs a number or a value ($var): funnel-w1.., funnel-b0.., funnel-c1..32, funnel-s0.., funnel-i0.., funnel-y0.., funnel-aauto|agpu|aoff, funnel-o0|o1, funnel-g0|g1, joined by + (funnel-i0+s0)" >&2
    return 2
  done
  echo "${vars[*]}"
}
