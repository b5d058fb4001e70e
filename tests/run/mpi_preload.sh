#!/usr/bin/env bash
# mpi_preload.sh FUNNEL_RUN CC [PRELOAD]
# What funnel-run puts in LD_PRELOAD (FUNNEL_MPI_HOOKS, doc/configuration.md):
# - outside an MPI launcher the client runtime only, and it starts the server itself;
# - under a real `mpirun` (and under PMI_RANK) the MPI hooks after the client runtime, any
#   existing entry (a sanitizer runtime) first, and it starts no server (the hooks' MPI_Init
#   does);
# - FUNNEL_MPI_HOOKS=0 or --mpi-hooks 0: the old way; FUNNEL_MPI_HOOKS=1: the hooks anywhere;
# - a program that needs another MPI library than the hooks', or hooks that are missing: no
#   hooks and a warning from node-local rank 0 only (an error with FUNNEL_MPI_HOOKS=1);
# - a bad value: exit 2 with a message naming the variable, the value and what is accepted.
set -u
FR=$1 CC=$2 preload=${3:-}
tmp=$(mktemp -d /tmp/funnel-run-preload.XXXXXX)
unset FUNNEL_MPI_HOOKS OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_LOCAL_RANK PMIX_RANK PMI_RANK FUNNEL_JOB_ID
export FUNNEL_BACKEND=sim FUNNEL_LOG_DIR=$tmp/log FUNNEL_RUN_DIR=$tmp/run FUNNEL_IDLE_EXIT_MS=60000
bin=$(dirname "$FR")
mpirun=(mpirun --oversubscribe --mca btl "self,vader")
[ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root)
# Stops the server funnel-run started and waits (at most 5 s) until its socket is gone.
stop_server() {
  [ -S "$tmp/run/server.sock" ] || return 0
  timeout 5 "$bin/funnelctl" shutdown >/dev/null 2>&1
  for _ in $(seq 50); do [ -S "$tmp/run/server.sock" ] || return 0; sleep 0.1; done
  echo "FAIL: cannot stop the server of $tmp/run"; exit 1
}
cleanup() { stop_server; rm -rf "$tmp"; }
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# An entry already in LD_PRELOAD must stay first: the sanitizer runtime, else a library of ours.
if [ -n "$preload" ]; then
  first=$preload
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
else
  first=$tmp/first.so
  "$CC" -shared -fPIC -o "$first" -x c /dev/null || { echo "FAIL: cannot build $first"; exit 1; }
fi
export LD_PRELOAD=$first
f=$(printf '%s' "$first" | sed 's/[.[\*^$]/\\&/g')
client="^$f:[^:]*/libcudart\.so\.13[^:]*"
with_hooks="$client:[^:]*/libfunnel_mpi\.so\.[0-9]+\$"
without="$client\$"

# expect NAME WANT(hooks|none) [N]: every one of N (1) lines of $tmp/out is the LD_PRELOAD wanted.
expect() {
  local re=$without n=${3:-1}
  [ "$2" = hooks ] && re=$with_hooks
  if [ "$(grep -cE "$re" "$tmp/out")" -ne "$n" ] || [ "$(wc -l <"$tmp/out")" -ne "$n" ]; then
    fail "$1: want $2 in LD_PRELOAD on $n line(s); got: $(cat "$tmp/out")"
    return
  fi
  if [ "$2" = hooks ]; then
    local lib
    lib=$(head -1 "$tmp/out")
    [ -r "${lib##*:}" ] || fail "$1: the preloaded hooks ${lib##*:} do not exist"
  fi
  echo "ok: $1"
}
# server NAME yes|no: whether funnel-run started the server (then it is stopped again).
server() {
  if [ -S "$tmp/run/server.sock" ]; then
    [ "$2" = yes ] || fail "$1: funnel-run started a server although the hooks were preloaded"
    stop_server
  else
    [ "$2" = no ] || fail "$1: funnel-run did not start the server"
  fi
}

"$FR" printenv LD_PRELOAD >"$tmp/out" 2>"$tmp/err"
expect "outside MPI" none; server "outside MPI" yes
FUNNEL_MPI_HOOKS=1 "$FR" printenv LD_PRELOAD >"$tmp/out" 2>"$tmp/err"
expect "FUNNEL_MPI_HOOKS=1 outside MPI" hooks; server "FUNNEL_MPI_HOOKS=1 outside MPI" no
PMI_RANK=0 PMI_SIZE=1 "$FR" printenv LD_PRELOAD >"$tmp/out" 2>"$tmp/err"
expect "PMI_RANK (MPICH's mpiexec)" hooks; server "PMI_RANK" no

timeout 30 "${mpirun[@]}" -np 2 "$FR" printenv LD_PRELOAD >"$tmp/out" 2>"$tmp/err"
expect "mpirun -np 2" hooks 2; server "mpirun -np 2" no
FUNNEL_MPI_HOOKS=0 timeout 30 "${mpirun[@]}" -np 2 "$FR" printenv LD_PRELOAD >"$tmp/out" 2>"$tmp/err"
expect "FUNNEL_MPI_HOOKS=0 under mpirun" none 2; server "FUNNEL_MPI_HOOKS=0 under mpirun" yes
timeout 30 "${mpirun[@]}" -np 2 "$FR" --mpi-hooks 0 printenv LD_PRELOAD >"$tmp/out" 2>"$tmp/err"
expect "--mpi-hooks 0 under mpirun" none 2; server "--mpi-hooks 0 under mpirun" yes

# bad NAME ARGS...: exit 2 and a message naming the variable, the value and what is accepted.
bad() {
  local name=$1 value=$2; shift 2
  "$@" >"$tmp/out" 2>&1
  local rc=$?
  if [ "$rc" -ne 2 ] || ! grep -qF "FUNNEL_MPI_HOOKS='$value' is not valid: expected auto | 1 | 0" "$tmp/out"; then
    fail "$name: rc $rc, output: $(cat "$tmp/out")"
  else
    echo "ok: $name"
  fi
}
bad "FUNNEL_MPI_HOOKS=yes" yes env FUNNEL_MPI_HOOKS=yes "$FR" true
bad "FUNNEL_MPI_HOOKS= (empty)" "" env FUNNEL_MPI_HOOKS= "$FR" true
bad "--mpi-hooks on" on "$FR" --mpi-hooks on true

# A program of another MPI (its DT_NEEDED has libmpich.so.12, the hooks need Open MPI's).
printf '#include <stdio.h>\n#include <stdlib.h>\nint main(void) { const char* p = getenv("LD_PRELOAD"); puts(p ? p : ""); return 0; }\n' >"$tmp/prog.c"
"$CC" -shared -fPIC -Wl,-soname,libmpich.so.12 -o "$tmp/libmpich.so.12" -x c /dev/null &&
  "$CC" -o "$tmp/other_mpi" "$tmp/prog.c" -Wl,--no-as-needed "$tmp/libmpich.so.12" -Wl,-rpath,"$tmp" ||
  { fail "cannot build the other-MPI program"; exit 1; }
# warned NAME N: N warnings naming WHAT in $tmp/err.
warned() {
  local got
  got=$(grep -c "funnel-run: warning: .*$3" "$tmp/err")
  [ "$got" -eq "$2" ] || fail "$1: want $2 warning(s) naming '$3', got: $(cat "$tmp/err")"
}
PMI_RANK=0 "$FR" "$tmp/other_mpi" >"$tmp/out" 2>"$tmp/err"
expect "another MPI" none; warned "another MPI" 1 "the program uses libmpich.so.12"; server "another MPI" yes
FUNNEL_MPI_HOOKS=1 "$FR" "$tmp/other_mpi" >"$tmp/out" 2>&1
rc=$?
if [ "$rc" -eq 2 ] && grep -q "FUNNEL_MPI_HOOKS=1 .*libmpich.so.12" "$tmp/out"; then echo "ok: FUNNEL_MPI_HOOKS=1 with another MPI"
else fail "FUNNEL_MPI_HOOKS=1 with another MPI: rc $rc, output: $(cat "$tmp/out")"; fi

# Hooks missing: a copy of funnel-run beside a lib/ that has the client runtime (and its core)
# and the client driver only.
mkdir -p "$tmp/copy/bin" "$tmp/copy/lib/funnel-driver"
cp "$FR" "$tmp/copy/bin/" && cp -L "$bin/../lib/libcudart.so.13" "$bin/../lib/libfunnel-client.so.0" "$tmp/copy/lib/" &&
  cp -L "$bin/../lib/funnel-driver/libcuda.so.1" "$tmp/copy/lib/funnel-driver/" || { fail "cannot copy funnel-run"; exit 1; }
export FUNNEL_SERVER=$bin/funnel-server
for r in 0 1; do
  OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=$r "$tmp/copy/bin/funnel-run" printenv LD_PRELOAD >"$tmp/out" 2>"$tmp/err"
  expect "no hooks beside it (local rank $r)" none
  warned "no hooks beside it (local rank $r)" $((1 - r)) "libfunnel_mpi.so.0 are missing"
  server "no hooks beside it (local rank $r)" yes
done
FUNNEL_MPI_HOOKS=1 "$tmp/copy/bin/funnel-run" true >"$tmp/out" 2>&1
rc=$?
if [ "$rc" -eq 2 ] && grep -q "FUNNEL_MPI_HOOKS=1 .*missing" "$tmp/out"; then echo "ok: FUNNEL_MPI_HOOKS=1 without hooks"
else fail "FUNNEL_MPI_HOOKS=1 without hooks: rc $rc, output: $(cat "$tmp/out")"; fi

# The client driver missing: refused, naming it (the program's driver calls would reach NVIDIA's
# driver); with FUNNEL_CLIENT_DRIVER=0 the program runs.
rm -rf "$tmp/copy/lib/funnel-driver"
"$tmp/copy/bin/funnel-run" true >"$tmp/out" 2>&1
rc=$?
if [ "$rc" -eq 2 ] && grep -q "client driver .*funnel-driver/libcuda.so.1 is missing.*FUNNEL_CLIENT_DRIVER=0" "$tmp/out"; then
  echo "ok: the client driver missing"
else fail "the client driver missing: rc $rc, output: $(cat "$tmp/out")"; fi
FUNNEL_CLIENT_DRIVER=0 "$tmp/copy/bin/funnel-run" true >"$tmp/out" 2>&1 || fail "FUNNEL_CLIENT_DRIVER=0 without the client driver: $(cat "$tmp/out")"

((fails == 0)) && echo PASS
exit $((fails != 0))
