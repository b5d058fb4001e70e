#!/usr/bin/env bash
# The issue's long GPU soak (doc/reliability.md): tests/reliability/soak.sh with the cuda
# backend, SOAK_CLIENTS (32) clients of mixed work for SECONDS (default 1800), detached from
# the calling shell (setsid), so that it outlives a command limited to less than its length
# (the lent GPU machine's commands stop after 10 minutes; a detached process runs on).
#   tests/gpu/soak.sh start BUILD_DIR STATE_DIR [SECONDS]
#       compiles the programs into STATE_DIR/progs, starts the soak, returns at once
#       (SOAK_BACKEND=sim tries the script on a machine without a GPU)
#   tests/gpu/soak.sh wait STATE_DIR MAX_SECONDS
#       prints the server's samples as they come; when the soak ended, its summary and
#       "RESULT reliability soak-long PASS|FAIL detail", exit 0 / 1; still running after
#       MAX_SECONDS: exit 3
set -u -o pipefail
case ${1:-} in
  start)
    secs=${4:-1800}
    # shellcheck source=tests/gpu/lib.sh
    . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
    gpu_step "$2" "$3"
    mkdir -p "$OUT_DIR/progs"
    rm -f "$OUT_DIR/rc" "$OUT_DIR/soak.log"
    for p in memory streams threads hostfunc symbols kernel_api; do
      gpu_compile "$OUT_DIR/progs/$p" "$ROOT/tests/programs/$p.cu" ||
        { result reliability soak-long FAIL "$p.cu does not compile ($OUT_DIR/progs/$p.nvcc.log)"; exit 1; }
      [[ -f $ROOT/tests/programs/$p.expected ]] && cp "$ROOT/tests/programs/$p.expected" "$OUT_DIR/progs/"
    done
    # Its own run directory under STATE_DIR/tmp (a tmpfs for the cuda backend's pinned memory).
    mkdir -p /dev/shm/funnel-soak-long && ln -sfn /dev/shm/funnel-soak-long "$OUT_DIR/tmp"
    SOAK_BACKEND=${SOAK_BACKEND:-cuda} SOAK_TMP=/dev/shm/funnel-soak-long setsid bash -c \
      'timeout $(('"$secs"' + 300)) "$0" "$1" "$2" "$3" "${SOAK_CLIENTS:-32}" >"$4/soak.log" 2>&1; echo $? >"$4/rc"' \
      "$ROOT/tests/reliability/soak.sh" "$BIN" "$OUT_DIR/progs" "$secs" "$OUT_DIR" </dev/null >/dev/null 2>&1 &
    echo "soak of $secs s with ${SOAK_CLIENTS:-32} clients started (state in $OUT_DIR)"
    ;;
  wait)
    state=$2 max=$3 t0=$SECONDS shown=0 failed=0
    while :; do
      tsv=$(find -L "$state/tmp" -maxdepth 2 -name soak.tsv 2>/dev/null | head -1)
      if [[ -n $tsv ]]; then
        n=$(wc -l <"$tsv")
        [[ $n -gt $shown ]] && { tail -n +$((shown + 1)) "$tsv"; shown=$n; }
        # Wrong runs as they happen (the soak itself reports them at its end).
        f=$(cat "$(dirname "$tsv")"/steady.*.fail 2>/dev/null | grep -c '^run ')
        [[ $f -gt $failed ]] && { echo "$f wrong run(s) so far:"; cat "$(dirname "$tsv")"/steady.*.fail | head -30; failed=$f; }
      fi
      if [[ -f $state/rc ]]; then
        grep -v '^\[20' "$state/soak.log" | tail -40
        if [[ $(cat "$state/rc") == 0 ]]; then
          echo "RESULT reliability soak-long PASS $(grep '^PASS' "$state/soak.log" | sed 's/^PASS: //')"
          exit 0
        fi
        echo "RESULT reliability soak-long FAIL rc $(cat "$state/rc"): $(grep -E '^FAIL' "$state/soak.log" | head -1)"
        grep -E '\] \[(warning|error|critical)\]' "$state/soak.log" | head -20
        exit 1
      fi
      [[ $((SECONDS - t0)) -ge $max ]] && { echo "soak still running after waiting $max s"; exit 3; }
      sleep 5
    done
    ;;
  *)
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
