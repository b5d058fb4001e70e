#!/usr/bin/env bash
# apps/stencil (3-D heat equation, MPI halo exchange with host staging, CUDA kernels) at 1, 2,
# 4, 8 and 16 ranks on ONE GPU: natively (time-sliced contexts), under NVIDIA MPS (started here
# with a private pipe/log directory and always stopped) and through funnel-run, in the same job
# on the same GPU.  Strong scaling: the grid is fixed, so at 16 ranks each rank's kernels are
# small (see the sizing comment in apps/stencil/stencil.cu); issue 4's target is funnel <= 1.0x
# MPS at 16 ranks per GPU.
#   bench/stencil.sh
# Every run's checksum is compared (by the app, --reference) with a 1-rank native run made
# first; a run that fails or does not match shows as "no" in the table and the script exits 1.
# Environment:
#   BUILD_DIR  build with bin/stencil and bin/funnel-run (default build-gpu, else build)
#   OUT        logs and results (default $PWD/bench-out/stencil)
#   MODES      default "native mps funnel hooks"; hooks = bin/stencil_funnel (linked with
#              funnel::mpi, no funnel-run: the server comes and goes with MPI_Init/Finalize);
#              "funnel-wK", "funnel-bN", "funnel-cN", "funnel-sN", "funnel-iN", "funnel-yN",
#              "funnel-oN" (e.g. funnel-w4,
#              funnel-b0, funnel-i0+s0):
#              funnel with one server setting changed (bench/modes.sh); "hooks-local": the linked
#              app with device halos under FUNNEL_MPI_LOCAL=1 (GPU-local messages between the
#              ranks, doc/mpi.md)
#   RANKS      rank counts (default "1 2 4 8 16")
#   N          global grid is N^3 (default 256)
#   STEPS      timed steps (default 200); WARMUP untimed steps before them (default 20)
#   MPIRUN     default mpirun (Open MPI); MPIRUN_ARGS extra arguments for it
#   KEEP_SERVER_LOGS  set: keep the server log and job report of every funnel and linked run
#              (default: of failed runs only), in OUT/MODE/npN.server/
#   BIND       Open MPI's --bind-to for every mode (default none; core: each rank on a core of
#              its own, where funnel's workers share their ranks' CPUs, doc/placement.md)
#   DEVICE_HALO  modes whose ranks hand their device buffers to MPI (stencil --halo device;
#              default none).  Only funnel's modes can where MPI is not CUDA-aware: funnel's
#              hooks stage them (doc/mpi.md, "Device buffers"); the others use host staging.
# Writes OUT/results.jsonl (the app's JSON line per run, with "mode" renamed to the run's mode)
# and OUT/table.txt (printed last).
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ -z ${BUILD_DIR:-} ]]; then
  if [[ -x $ROOT/build-gpu/bin/stencil ]]; then BUILD_DIR=$ROOT/build-gpu; else BUILD_DIR=$ROOT/build; fi
fi
OUT_DIR=${OUT:-$PWD/bench-out/stencil}
MODES=${MODES:-native mps funnel hooks}
RANKS=${RANKS:-1 2 4 8 16}
N=${N:-256}
STEPS=${STEPS:-200}
WARMUP=${WARMUP:-20}
MPIRUN=${MPIRUN:-mpirun}
ST=$BUILD_DIR/bin/stencil
FR=$BUILD_DIR/bin/funnel-run
for f in "$ST" "$FR"; do
  [[ -x $f ]] || { echo "stencil.sh: $f not found: build funnel with MPI found (BUILD_DIR=$BUILD_DIR)" >&2; exit 2; }
done
command -v "$MPIRUN" >/dev/null || { echo "stencil.sh: $MPIRUN not found" >&2; exit 2; }
mkdir -p "$OUT_DIR"
RESULTS=$OUT_DIR/results.jsonl
REF=$OUT_DIR/reference.txt
: >"$RESULTS"
rm -f "$REF"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# shellcheck source=bench/mps.sh
source "$ROOT/bench/mps.sh"
# shellcheck source=bench/modes.sh
source "$ROOT/bench/modes.sh"
# Open MPI: oversubscribe the cores (16 ranks may exceed them), do not bind by default (the
# GPU, not the cores, is what is shared), and run as root where the bench machine does.
BIND=${BIND:-none}
MPI_ARGS=(--oversubscribe --bind-to "$BIND")
[[ $(id -u) == 0 ]] && MPI_ARGS+=(--allow-run-as-root)
# shellcheck disable=SC2206  # MPIRUN_ARGS is split on purpose
MPI_ARGS+=(${MPIRUN_ARGS:-})

# run_one MODE RANKS LOG: one mpirun of the app (at most 10 minutes); its exit status
run_one() {
  local mode=$1 np=$2 log=$3
  local env_args=(-x LD_LIBRARY_PATH)
  [[ $mode == mps ]] && env_args+=(-x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY)
  local wrap=() app=$ST pre=() setting
  if [[ $mode == hooks || $mode == hooks-local ]]; then
    # The linked app finds funnel's libcudart.so.13 through its rpath; LD_LIBRARY_PATH with
    # NVIDIA's runtime would come first (local ranks inherit mpirun's environment), so it is
    # left out.
    app=$BUILD_DIR/bin/stencil_funnel
    # The server the hooks start logs (and reports) where a funnel-run one does.
    local logs=$OUT_DIR/$mode/np$np.server
    rm -rf "$logs"
    pre=(env -u LD_LIBRARY_PATH "FUNNEL_JOB_ID=stencil-hooks-$np-$$" "FUNNEL_LOG_DIR=$logs")
    env_args=(-x FUNNEL_JOB_ID -x FUNNEL_LOG_DIR)
    [[ $mode == hooks-local ]] && pre+=(FUNNEL_MPI_LOCAL=1) && env_args+=(-x FUNNEL_MPI_LOCAL)
  elif [[ $mode == funnel ]] || setting=$(funnel_variant_env "$mode"); then
    # A job id of its own per run, so a fresh server with the mode's setting (bench/modes.sh).
    export FUNNEL_JOB_ID=stencil-${mode//+/_}-$np-$$  # a job id has no '+'
    env_args+=(-x FUNNEL_JOB_ID)
    wrap=("$FR" --backend cuda)
    # shellcheck disable=SC2206  # one word per setting
    [[ $mode != funnel ]] && wrap=(env $setting "${wrap[@]}")
    # The server's log and job report of this run (server_figures reads the report).
    export FUNNEL_LOG_DIR=$OUT_DIR/$mode/np$np.server
    rm -rf "$FUNNEL_LOG_DIR"
    env_args+=(-x FUNNEL_LOG_DIR)
  fi
  local halo=host
  [[ " ${DEVICE_HALO:-} " == *" $mode "* || $mode == hooks-local ]] && halo=device
  timeout 600 "${pre[@]}" "$MPIRUN" "${MPI_ARGS[@]}" "${env_args[@]}" -np "$np" "${wrap[@]}" "$app" \
    --n "$N" --steps "$STEPS" --warmup "$WARMUP" --halo "$halo" --reference "$REF" >"$log" 2>&1
}

# server_figures DIR: the job report's figures of a funnel run as one JSON object (null when
# there is none): bench/server_figures.py.
server_figures() { python3 "$ROOT/bench/server_figures.py" "$1"; }

# The reference: one rank, natively.  Every run below (the native 1-rank one included) is
# compared with it by the app itself.
echo "reference: 1 rank native, n=$N, $WARMUP + $STEPS steps"
if ! run_one native 1 "$OUT_DIR/reference.log" || ! grep -q '"reference":"written"' "$OUT_DIR/reference.log"; then
  echo "stencil.sh: the 1-rank reference run failed, see $OUT_DIR/reference.log" >&2
  tail -5 "$OUT_DIR/reference.log" >&2
  exit 1
fi
cat "$REF"

bad=0
for mode in $MODES; do
  if [[ $mode == mps ]]; then
    if [[ -z $MPS_CONTROL ]]; then
      echo "stencil.sh: nvidia-cuda-mps-control not found: MPS skipped" | tee "$OUT_DIR/mps-skipped.txt"
      continue
    fi
    mps_start || { echo "stencil.sh: MPS did not start: skipped"; continue; }
  fi
  if [[ $mode == hooks* && ! -x $BUILD_DIR/bin/stencil_funnel ]]; then
    echo "stencil.sh: $BUILD_DIR/bin/stencil_funnel not built (funnel without MPI): hooks skipped"
    continue
  fi
  mkdir -p "$OUT_DIR/$mode"
  for np in $RANKS; do
    log=$OUT_DIR/$mode/np$np.log
    run_one "$mode" "$np" "$log"
    rc=$?
    line=$(grep -m1 '^{"ranks":' "$log")
    server=null
    if [[ -d $OUT_DIR/$mode/np$np.server ]]; then
      server=$(server_figures "$OUT_DIR/$mode/np$np.server")
      # A good run's server files go (the GPU machine returns few files) unless KEEP_SERVER_LOGS
      # is set; a bad one's stay.
      [[ $rc == 0 && -z ${KEEP_SERVER_LOGS:-} ]] && rm -rf "$OUT_DIR/$mode/np$np.server"
    fi
    if [[ -n $line ]]; then
      echo "$line" | sed "s/\"mode\":\"gpu\"/\"mode\":\"$mode\"/; s/}\$/,\"rc\":$rc,\"bind\":\"$BIND\",\"server\":$server}/" >>"$RESULTS"
    else
      printf '{"ranks":%s,"n":%s,"mode":"%s","ms_per_step":null,"reference":"no result","rc":%s,"bind":"%s"}\n' \
        "$np" "$N" "$mode" "$rc" "$BIND" >>"$RESULTS"
    fi
    ms=$(echo "$line" | grep -o '"ms_per_step":[0-9.]*' | cut -d: -f2)
    ref=$(echo "$line" | grep -o '"reference":"[^"]*"' | cut -d'"' -f4)
    echo "$mode ranks=$np: ${ms:-?} ms/step, checksum ${ref:-no result} (rc $rc)"
    [[ $server != null ]] && echo "  server: $server"
    if [[ $rc != 0 || $ref != match ]]; then
      bad=1
      # The failing run's own words, here too: the logs may not come back from the GPU machine.
      echo "--- last lines of $log:"
      grep -v '^[[:space:]]*$' "$log" | tail -20
    fi
  done
  [[ $mode == mps ]] && mps_stop
done

python3 - "$RESULTS" <<'PY' | tee "$OUT_DIR/table.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {(r["mode"], r["ranks"]): r for r in rows}
ranks = sorted({r["ranks"] for r in rows})
ms = lambda m, n: (by.get((m, n)) or {}).get("ms_per_step")
ok = lambda m, n: (m, n) not in by or (by[(m, n)].get("reference") == "match" and by[(m, n)].get("rc") == 0)
f = lambda v: "-" if v is None else f"{v:.4g}"
r = lambda a, b: "-" if a is None or not b else f"{a / b:.3f}"
pooled = sorted({r["mode"] for r in rows if r["mode"].startswith(("funnel-", "hooks-"))})
print(f'{"ranks":>5} {"native ms/step":>15} {"MPS ms/step":>12} {"funnel ms/step":>15} {"linked ms/step":>15}'
      f' {"funnel/MPS":>11} {"linked/MPS":>11}' + "".join(f" {m + '/MPS':>16}" for m in pooled) + f' {"checksum ok":>12}')
for n in ranks:
    nat, mps, fun, hk = ms("native", n), ms("mps", n), ms("funnel", n), ms("hooks", n)
    good = all(ok(m, n) for m in ["native", "mps", "funnel", "hooks"] + pooled)
    extra = "".join(f" {r(ms(m, n), mps):>16}" for m in pooled)
    print(f"{n:>5} {f(nat):>15} {f(mps):>12} {f(fun):>15} {f(hk):>15} {r(fun, mps):>11} {r(hk, mps):>11}{extra}"
          f" {'yes' if good else 'no':>12}")
print("funnel: mpirun funnel-run stencil; linked: mpirun stencil_funnel (funnel::mpi, no wrapper);"
      " funnel-wK: funnel with FUNNEL_SERVER_WORKERS=K; funnel-bN: with FUNNEL_LAUNCH_BATCH=N")
print("ms/step: the slowest rank's time per step after warm-up; funnel/MPS < 1 is better (issue 4: <= 1.0 at 16)")
print("checksum ok: every mode's run matched the 1-rank native checksum (relative 1e-10) and exited 0")
PY
exit $bad
