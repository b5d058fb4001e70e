#!/usr/bin/env bash
# package.sh BUILD_DIR: an outside project finds funnel (build tree, then an install
# prefix made with cmake --install), links funnel::mpi, and runs under mpirun through
# funnel (the server's log shows both ranks attach and detach).
set -u
build=$1
src=$(cd "$(dirname "$0")/package" && pwd)
tmp=$(mktemp -d /tmp/funnel-pkg.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export FUNNEL_BACKEND=sim FUNNEL_IDLE_EXIT_MS=1000
unset FUNNEL_RUN_DIR FUNNEL_JOB_ID FUNNEL_SERVER
mpirun=(mpirun --oversubscribe -np 2 --mca btl "self,vader")
[ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root)
try() {  # NAME CMAKE_ARGS...
  local name=$1; shift
  cmake -S "$src" -B "$tmp/$name" -G Ninja "$@" >"$tmp/$name.log" 2>&1 && cmake --build "$tmp/$name" >>"$tmp/$name.log" 2>&1 ||
    { echo "FAIL ($name): configure/build"; cat "$tmp/$name.log"; exit 1; }
  FUNNEL_LOG_DIR=$tmp/log-$name timeout 60 "${mpirun[@]}" "$tmp/$name/app" >"$tmp/$name.out" 2>&1 ||
    { echo "FAIL ($name): run"; cat "$tmp/$name.out"; cat "$tmp"/log-"$name"/*.log; exit 1; }
  [ "$(grep -c 'ok attached=1' "$tmp/$name.out")" -eq 2 ] && [ "$(cat "$tmp"/log-"$name"/*.log | grep -c 'detached: pid')" -eq 2 ] ||
    { echo "FAIL ($name): not through funnel"; cat "$tmp/$name.out" "$tmp"/log-"$name"/*.log; exit 1; }
  echo "ok ($name)"
}
try build-tree -Dfunnel_DIR="$build"
cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 || { echo "FAIL: install"; cat "$tmp/install.log"; exit 1; }
try install -DCMAKE_PREFIX_PATH="$tmp/prefix"
# The installed funnel-run finds the installed client driver (it refuses to run without one).
[ -e "$tmp/prefix/lib/funnel-driver/libcuda.so.1" ] || { echo "FAIL: the client driver was not installed"; exit 1; }
FUNNEL_BACKEND=sim FUNNEL_RUN_DIR="$tmp/run-installed" "$tmp/prefix/bin/funnel-run" printenv LD_LIBRARY_PATH >"$tmp/ldpath" 2>&1 &&
  grep -q "^$tmp/prefix/lib/funnel-driver:" "$tmp/ldpath" || { echo "FAIL: installed funnel-run: $(cat "$tmp/ldpath")"; exit 1; }
FUNNEL_RUN_DIR="$tmp/run-installed" timeout 5 "$tmp/prefix/bin/funnelctl" shutdown >/dev/null 2>&1
echo "ok (installed client driver)"
echo PASS
