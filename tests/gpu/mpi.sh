#!/usr/bin/env bash
# Issue 4 on the GPU (called by tests/gpu/run.sh after its build; runs alone as well):
#   tests/gpu/mpi.sh BUILD_DIR OUT_DIR
# 1. memlimit: tests/client/programs/memlimit.cu through funnel-run on the cuda backend with a
#    64 MiB limit, in FUNNEL_DEVICE_MEM_LIMIT and in CUDA_MPS_PINNED_DEVICE_MEM_LIMIT; stdout
#    must equal memlimit.expected (allocations past the limit fail, cudaMemGetInfo reports it).
# 2. linked: `mpirun -np 4 stencil_funnel` (linked with funnel::mpi, no wrapper): the hooks
#    start one cuda server, 4 ranks attach and cleanly detach, the checksum matches a native
#    1-rank run, and the server, its run directory and its segments are gone after mpirun.
#    The same with --halo device (the ranks hand device buffers to MPI; funnel's hooks stage them
#    for Open MPI, which is not CUDA-aware here): the same checksum.
# 2b. device buffers: tests/mpi/device_buffers.cu (point to point, collectives, a freed buffer)
#    at 4 ranks on the cuda backend (tests/mpi/device_buffers.sh); GPU-local messages
#    (tests/mpi/local_messages.sh); a rank not under funnel in the job (tests/mpi/mixed.sh).
# 3. fraction: tests/gpu/fraction.cu through funnel-run with FUNNEL_GPU_FRACTION (and MPS's
#    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE): the SM count the client sees and the SMs its kernel
#    blocks actually ran on (%smid) stay within the share; with FUNNEL_GPU_PLACEMENT=disjoint two
#    clients at once run on disjoint SMs and a third that does not fit is refused.
# Prints one "RESULT step name PASS|FAIL|SKIP detail" line per check; exit 1 if any failed.
set -u -o pipefail
# shellcheck source=tests/gpu/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
gpu_step "$1" "$2"
uid=$(id -u)
MPI=(mpirun --oversubscribe --bind-to none)
[[ $uid == 0 ]] && MPI+=(--allow-run-as-root)

# ---- 1. device-memory limit ----------------------------------------------------------------
if gpu_compile "$BUILD/memlimit" "$ROOT/tests/client/programs/memlimit.cu"; then
  for var in FUNNEL_DEVICE_MEM_LIMIT CUDA_MPS_PINNED_DEVICE_MEM_LIMIT; do
    log=$OUT_DIR/memlimit-$var
    env "$var=0=64M" FUNNEL_RUN_DIR="/dev/shm/funnel-gpu-memlimit-$$" FUNNEL_LOG_DIR="$OUT_DIR/logs-memlimit" \
      timeout 120 "$BIN/funnel-run" --backend cuda "$BUILD/memlimit" >"$log.out" 2>"$log.err"
    rc=$?
    if [[ $rc == 0 ]] && diff -u "$ROOT/tests/client/programs/memlimit.expected" "$log.out" >"$log.diff"; then
      result mpi "memlimit-$var" PASS "allocations past 64 MiB fail; MemGetInfo reports the limit"
    else
      result mpi "memlimit-$var" FAIL "rc $rc; see $(basename "$log").diff/.err"
    fi
  done
else
  result mpi memlimit FAIL "does not compile: $BUILD/memlimit.nvcc.log"
fi

# ---- 2. the linked app under plain mpirun ---------------------------------------------------
if [[ -x $BIN/stencil_funnel && -x $BIN/stencil ]]; then
  ref=$OUT_DIR/stencil-ref.txt
  rm -f "$ref"
  LD_LIBRARY_PATH=/usr/local/cuda/lib64 timeout 300 "${MPI[@]}" -np 1 "$BIN/stencil" --n 128 --steps 20 \
    --warmup 2 --reference "$ref" >"$OUT_DIR/stencil-ref.log" 2>&1
  job=gpu-linked-$$
  logs=$OUT_DIR/logs-linked
  env -u LD_LIBRARY_PATH FUNNEL_JOB_ID=$job FUNNEL_LOG_DIR="$logs" FUNNEL_IDLE_EXIT_MS=60000 \
    timeout 300 "${MPI[@]}" -x FUNNEL_JOB_ID -x FUNNEL_LOG_DIR -x FUNNEL_IDLE_EXIT_MS -np 4 \
    "$BIN/stencil_funnel" --n 128 --steps 20 --warmup 2 --reference "$ref" >"$OUT_DIR/stencil-linked.log" 2>&1
  rc=$?
  slog=$(ls "$logs"/funnel-server-*.log 2>/dev/null | head -1)
  count() { grep -c -- "$1" "$slog" 2>/dev/null || echo 0; }
  why=
  [[ $rc == 0 ]] || why="mpirun exit $rc"
  grep -q '"reference":"match"' "$OUT_DIR/stencil-linked.log" || why="${why:+$why; }checksum does not match 1-rank native"
  [[ -n $slog ]] || why="${why:+$why; }no server log (was the server started by the hooks?)"
  if [[ -n $slog ]]; then
    grep -q 'with the cuda backend' "$slog" || why="${why:+$why; }server log does not name the cuda backend"
    [[ $(count ' attached: pid') == 4 ]] || why="${why:+$why; }expected 4 attaches"
    [[ $(count 'detached: pid') == 4 ]] || why="${why:+$why; }expected 4 clean detaches"
    grep -q 'shutdown requested' "$slog" || why="${why:+$why; }the hooks did not stop the server"
  fi
  for _ in $(seq 50); do [[ -e /dev/shm/funnel-$uid-$job ]] || break; sleep 0.1; done
  [[ -e /dev/shm/funnel-$uid-$job ]] && why="${why:+$why; }run directory left behind"
  compgen -G "/dev/shm/*funnel-$uid-$job*" >/dev/null && why="${why:+$why; }segment left behind"
  if [[ -z $why ]]; then
    result mpi linked-stencil-np4 PASS "$(grep -o '"ms_per_step":[0-9.]*' "$OUT_DIR/stencil-linked.log"), server started+stopped by the hooks"
  else
    result mpi linked-stencil-np4 FAIL "$why (stencil-linked.log, logs-linked/)"
  fi
  # --halo device: the same checksum.
  env -u LD_LIBRARY_PATH FUNNEL_JOB_ID=$job-device FUNNEL_LOG_DIR="$logs-device" \
    timeout 300 "${MPI[@]}" -x FUNNEL_JOB_ID -x FUNNEL_LOG_DIR -np 4 \
    "$BIN/stencil_funnel" --n 128 --steps 20 --warmup 2 --halo device --reference "$ref" \
    >"$OUT_DIR/stencil-device-halo.log" 2>&1
  rc=$?
  if [[ $rc == 0 ]] && grep -q '"reference":"match"' "$OUT_DIR/stencil-device-halo.log"; then
    result mpi linked-stencil-device-halo-np4 PASS "$(grep -o '"ms_per_step":[0-9.]*' "$OUT_DIR/stencil-device-halo.log"), device buffers to MPI, checksum matches"
  else
    result mpi linked-stencil-device-halo-np4 FAIL "mpirun exit $rc or checksum mismatch (stencil-device-halo.log)"
  fi
  # --halo device under FUNNEL_MPI_LOCAL=1: the halos are GPU-local messages (the job report
  # counts them), the same checksum.
  env -u LD_LIBRARY_PATH FUNNEL_JOB_ID=$job-local FUNNEL_LOG_DIR="$logs-local" FUNNEL_MPI_LOCAL=1 FUNNEL_JOB_REPORT=1 \
    timeout 300 "${MPI[@]}" -x FUNNEL_JOB_ID -x FUNNEL_LOG_DIR -x FUNNEL_MPI_LOCAL -np 4 \
    "$BIN/stencil_funnel" --n 128 --steps 20 --warmup 2 --halo device --reference "$ref" \
    >"$OUT_DIR/stencil-local.log" 2>&1
  rc=$?
  locals=$(python3 -c 'import json,glob,sys; print(sum(c.get("local_messages",0) for f in glob.glob(sys.argv[1]+"/*.json") for c in json.load(open(f))["clients"]))' "$logs-local" 2>/dev/null)
  if [[ $rc == 0 ]] && grep -q '"reference":"match"' "$OUT_DIR/stencil-local.log" && [[ ${locals:-0} -gt 0 ]]; then
    result mpi linked-stencil-local-np4 PASS "$(grep -o '"ms_per_step":[0-9.]*' "$OUT_DIR/stencil-local.log"), $locals GPU-local halo messages, checksum matches"
  else
    result mpi linked-stencil-local-np4 FAIL "mpirun exit $rc, checksum mismatch or no GPU-local messages (${locals:-none}) (stencil-local.log)"
  fi
else
  result mpi linked-stencil-np4 SKIP "bin/stencil_funnel not built (no MPI found)"
fi

# ---- 2b. device buffers in MPI calls, and GPU-local messages (FUNNEL_MPI_LOCAL=1) -----------------
for t in "device_buffers device-buffers-np4 point to point, collectives and a freed buffer on the cuda backend" \
         "local_messages local-messages-np4 GPU-local messages (FUNNEL_MPI_LOCAL=1) on the cuda backend"; do
  read -r prog name what <<<"$t"
  if ! command -v mpicxx >/dev/null || [[ ! -f $BUILD/lib/libfunnel_mpi.so ]]; then
    result mpi "$name" SKIP "no mpicxx or no $BUILD/lib/libfunnel_mpi.so"
  elif ! /usr/local/cuda/bin/nvcc -ccbin mpicxx -arch=sm_90 -cudart shared -O1 -I"$ROOT/tests/programs" \
    -I"$ROOT/runtime/client/include" -o "$BUILD/$prog" "$ROOT/tests/mpi/$prog.cu" -L"$BUILD/lib" -lfunnel_mpi \
    -Xlinker -rpath="$BUILD/lib" >"$OUT_DIR/$prog.nvcc.log" 2>&1; then
    result mpi "$name" FAIL "does not compile: $prog.nvcc.log"
  elif env -u LD_LIBRARY_PATH FUNNEL_TEST_BACKEND=cuda timeout 300 "$ROOT/tests/mpi/$prog.sh" 4 "$BIN" "$BUILD/$prog" \
    >"$OUT_DIR/$prog.log" 2>&1; then
    result mpi "$name" PASS "$what$(grep -o ' ([0-9]* GPU-local messages)' "$OUT_DIR/$prog.log")"
  else
    result mpi "$name" FAIL "$(grep -m1 FAIL "$OUT_DIR/$prog.log") ($prog.log)"
  fi
done

# A rank not under funnel in the same job (mpirun -np 2 mixed : -np 1 plain_peer): GPU-local
# between the funnel ranks, staged with the plain one (tests/mpi/mixed.sh).
if ! command -v mpicxx >/dev/null || [[ ! -f $BUILD/lib/libfunnel_mpi.so ]]; then
  result mpi mixed-job SKIP "no mpicxx or no $BUILD/lib/libfunnel_mpi.so"
elif ! /usr/local/cuda/bin/nvcc -ccbin mpicxx -arch=sm_90 -cudart shared -O1 -I"$ROOT/tests/programs" \
  -o "$BUILD/mixed" "$ROOT/tests/mpi/mixed.cu" -L"$BUILD/lib" -lfunnel_mpi -Xlinker -rpath="$BUILD/lib" \
  >"$OUT_DIR/mixed.nvcc.log" 2>&1 || ! mpicxx -std=c++17 -O1 -o "$BUILD/plain_peer" "$ROOT/tests/mpi/plain_peer.cpp" \
  >>"$OUT_DIR/mixed.nvcc.log" 2>&1; then
  result mpi mixed-job FAIL "does not compile: mixed.nvcc.log"
elif env -u LD_LIBRARY_PATH FUNNEL_TEST_BACKEND=cuda timeout 300 "$ROOT/tests/mpi/mixed.sh" "$BIN" "$BUILD/mixed" \
  "$BUILD/plain_peer" >"$OUT_DIR/mixed.log" 2>&1; then
  result mpi mixed-job PASS "$(grep -o '(2 funnel ranks.*)' "$OUT_DIR/mixed.log")"
else
  result mpi mixed-job FAIL "$(grep -m1 FAIL "$OUT_DIR/mixed.log") (mixed.log)"
fi

# ---- 3. GPU fraction -------------------------------------------------------------------------
if [[ -f $ROOT/tests/gpu/fraction.cu ]]; then
  if gpu_compile "$BUILD/fraction" "$ROOT/tests/gpu/fraction.cu"; then
    total=$(LD_LIBRARY_PATH=/usr/local/cuda/lib64 "$BUILD/fraction" 2>/dev/null | sed -n 's/^sm_count \([0-9]*\).*/\1/p')
    for spec in "FUNNEL_GPU_FRACTION=0.25" "FUNNEL_GPU_FRACTION=50%" "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25"; do
      log=$OUT_DIR/fraction-${spec%%=*}-${spec#*=}
      log=${log%\%}
      env "$spec" FUNNEL_RUN_DIR="/dev/shm/funnel-gpu-fraction-$$" FUNNEL_LOG_DIR="$OUT_DIR/logs-fraction" \
        timeout 120 "$BIN/funnel-run" --backend cuda "$BUILD/fraction" >"$log.out" 2>"$log.err"
      rc=$?
      sms=$(sed -n 's/^sm_count \([0-9]*\).*/\1/p' "$log.out")
      used=$(sed -n 's/^sms_used \([0-9]*\).*/\1/p' "$log.out")
      pct=${spec#*=}; pct=${pct%\%}
      [[ $pct == 0.* ]] && pct=$(python3 -c "print(round(float('$pct') * 100))")
      want=$(python3 -c "import math; t=int('${total:-0}'); print(max(8, math.ceil(t*$pct/100/8)*8) if t else 0)")
      if [[ $rc == 0 && -n $sms && -n $used && $total -gt 0 && $sms -le $((want + 8)) && $sms -lt $total && $used -le $sms ]]; then
        result mpi "fraction-$spec" PASS "GPU $total SMs; client sees $sms, its blocks ran on $used distinct SMs"
      else
        result mpi "fraction-$spec" FAIL "rc $rc, GPU ${total:-?} SMs, sees ${sms:-?} (want <= $((want + 8))), ran on ${used:-?}; $(basename "$log").err"
      fi
    done
    # Disjoint placement: two clients of 0.4 (6 of the 15 groups each) at once run on disjoint
    # SMs; a third finds 3 free groups, not 6, and its first work fails.
    dj=/dev/shm/funnel-gpu-disjoint-$$
    for who in a b; do
      env FUNNEL_GPU_FRACTION=0.4 FUNNEL_GPU_PLACEMENT=disjoint FRACTION_HOLD_MS=8000 FUNNEL_RUN_DIR=$dj \
        FUNNEL_LOG_DIR="$OUT_DIR/logs-disjoint" timeout 120 "$BIN/funnel-run" --backend cuda "$BUILD/fraction" \
        >"$OUT_DIR/disjoint-$who.out" 2>"$OUT_DIR/disjoint-$who.err" &
    done
    for _ in $(seq 300); do
      grep -q '^sm_list' "$OUT_DIR/disjoint-a.out" 2>/dev/null && grep -q '^sm_list' "$OUT_DIR/disjoint-b.out" 2>/dev/null && break
      sleep 0.1
    done
    env FUNNEL_GPU_FRACTION=0.4 FUNNEL_GPU_PLACEMENT=disjoint FUNNEL_RUN_DIR=$dj FUNNEL_LOG_DIR="$OUT_DIR/logs-disjoint" \
      timeout 60 "$BIN/funnel-run" --backend cuda "$BUILD/fraction" >"$OUT_DIR/disjoint-c.out" 2>"$OUT_DIR/disjoint-c.err"
    crc=$?
    wait
    la=$(sed -n 's/^sm_list //p' "$OUT_DIR/disjoint-a.out" | tr ' ' '\n' | sort)
    lb=$(sed -n 's/^sm_list //p' "$OUT_DIR/disjoint-b.out" | tr ' ' '\n' | sort)
    both=$(comm -12 <(echo "$la") <(echo "$lb") | grep -c .)
    na=$(echo "$la" | grep -c .) nb=$(echo "$lb" | grep -c .)
    if [[ $na -gt 0 && $na -le 48 && $nb -gt 0 && $nb -le 48 && $both == 0 && $crc != 0 ]] &&
      grep -q 'cudaErrorDevicesUnavailable' "$OUT_DIR/disjoint-c.out"; then
      result mpi fraction-disjoint PASS "two 0.4 clients ran on $na and $nb SMs, none shared; a third refused (cudaErrorDevicesUnavailable)"
    else
      result mpi fraction-disjoint FAIL "a on $na SMs, b on $nb, shared $both; third exit $crc: $(head -c 200 "$OUT_DIR/disjoint-c.out")"
    fi
  else
    result mpi fraction FAIL "does not compile: $BUILD/fraction.nvcc.log"
  fi
else
  result mpi fraction SKIP "tests/gpu/fraction.cu not present"
fi
exit $FAILED
