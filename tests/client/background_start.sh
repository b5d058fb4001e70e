#!/usr/bin/env bash
# background_start.sh BIN_DIR PROGRAMS_DIR [PRELOAD]
# funnel-run starts a server that does not answer yet in the background (doc/user-guide.md,
# "funnel-run"): the program starts at once, its first CUDA call waits for that start, a
# program that never attaches (`funnel-run true`) still returns with the server up, several
# funnel-runs at once start one server, and a start refused before it began still fails
# funnel-run (exit 4) without running the program.  The server is made slow by a wrapper
# (FUNNEL_SERVER) that sleeps 3 s before it execs the real one.
set -u
bin=$1 progs=$2 preload=${3:-}
# shellcheck source=tests/client/sim_env.sh
. "$(dirname "$0")/sim_env.sh"
sim_env "$bin" "$preload"
fail() {
  echo "FAIL: $*"
  exit 1
}
slow=$dir/slow-server
printf '#!/bin/sh\nsleep 3\nexec %q "$@"\n' "$bin/funnel-server" >"$slow"
chmod +x "$slow"
export FUNNEL_SERVER=$slow
# up: whether a server answers in FUNNEL_RUN_DIR (funnelctl status), printed as up/down
up() { if env -u LD_PRELOAD -u FUNNEL_RUN_STARTING "$bin/funnelctl" status >/dev/null 2>&1; then echo up; else echo down; fi; }
export -f up
export bin

# 1. The program starts before the server is up; funnel-run returns with it up.
"$bin/funnel-run" bash -c up >"$dir/one.out" 2>"$dir/one.err" || fail "funnel-run bash: $(cat "$dir/one.err")"
[ "$(cat "$dir/one.out")" = down ] || fail "the program started only once the server was up (waited for the start)"
[ "$(up)" = up ] || fail "funnel-run returned before the server it started was up"
FUNNEL_RUN_DIR=$dir/run timeout 10 "$bin/funnelctl" shutdown >/dev/null 2>&1
for _ in $(seq 100); do [ -e "$dir/run/server.sock" ] || break; sleep 0.1; done

# 2. Three at once: none waits for the start, one server.
export FUNNEL_RUN_DIR=$dir/run2
for i in 1 2 3; do "$bin/funnel-run" bash -c up >"$dir/three.$i.out" 2>"$dir/three.$i.err" & done
wait
for i in 1 2 3; do
  [ "$(cat "$dir/three.$i.out")" = down ] || fail "funnel-run $i: the program waited for the start ($(cat "$dir/three.$i.out" "$dir/three.$i.err"))"
done
[ "$(up)" = up ] || fail "no server after three funnel-runs"
n=$(pgrep -f -c -- "--run-dir $dir/run2 ") || true
[ "$n" = 1 ] || fail "$n servers for one run directory"
timeout 10 "$bin/funnelctl" shutdown >/dev/null 2>&1

# 3. A CUDA program's first call waits for the start (sim backend).
export FUNNEL_RUN_DIR=$dir/run3
timeout 60 "$bin/funnel-run" "$progs/memory" >"$dir/memory.out" 2>"$dir/memory.err" ||
  fail "a CUDA program through a background start: $(tail -3 "$dir/memory.err")"
timeout 10 "$bin/funnelctl" shutdown >/dev/null 2>&1

# 4. A start refused before it began (a run directory of the user's files): exit 4, no program.
project=$dir/project
mkdir -m 0700 "$project"
echo mine >"$project/notes.txt"
echo mine >"$project/start.lock"
FUNNEL_RUN_DIR=$project "$bin/funnel-run" bash -c 'echo ran' >"$dir/refused.out" 2>"$dir/refused.err"
rc=$?
[ "$rc" = 4 ] || fail "a refused run directory: exit $rc, not 4 ($(cat "$dir/refused.err"))"
grep -q "^funnel-run: .*funnel did not make" "$dir/refused.err" || fail "no reason given: $(cat "$dir/refused.err")"
[ ! -s "$dir/refused.out" ] || fail "the program ran"

# 5. A start that fails later: the program runs, the starter's error is on stderr.
export FUNNEL_RUN_DIR=$dir/run5
FUNNEL_SERVER=/bin/false "$bin/funnel-run" bash -c 'echo ran' >"$dir/late.out" 2>"$dir/late.err" ||
  fail "the program failed: $(cat "$dir/late.err")"
[ "$(cat "$dir/late.out")" = ran ] || fail "the program did not run"
grep -q "^funnel-run: .*funnel-server" "$dir/late.err" || fail "the failed start is not told: $(cat "$dir/late.err")"
[ ! -e "$dir/run5/server.sock" ] || fail "a socket stays after the failed start"
echo PASS
