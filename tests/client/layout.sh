#!/usr/bin/env bash
# layout.sh BIN_DIR [PRELOAD]
# FUNNEL_CLIENT_LAYOUT (doc/reliability.md, "Host and device addresses"): funnel-run starts a
# program with the low layout, so its libraries and mappings lie below 112 TiB (from 42 TiB up;
# the executable and its heap stay near 85 TiB in either layout), far from the top of the
# address space (127 TiB) where the server's CUDA driver puts device memory; with
# FUNNEL_CLIENT_LAYOUT=default they lie at the top as usual; a bad value is refused by name;
# a server started from the low layout leaves it.
set -u
bin=$1 preload=${2:-}
# shellcheck source=tests/client/sim_env.sh
. "$(dirname "$0")/sim_env.sh"
sim_env "$bin" "$preload"
fail() {
  echo "FAIL: $*"
  exit 1
}
# The program's own mappings, one start address (hex) per line, without the main stack,
# vdso and vsyscall, which the kernel places at the top in either layout.
starts() { grep -vE '\[(stack|vdso|vvar|vsyscall)\]' "$1" | cut -d- -f1; }
limit=$((16#700000000000))  # 112 TiB
"$bin/funnel-run" /bin/cat /proc/self/maps >"$dir/low.maps" 2>"$dir/low.err" || fail "funnel-run: $(cat "$dir/low.err")"
high=0
while read -r a; do [ $((16#$a)) -ge $limit ] && high=$((high + 1)); done < <(starts "$dir/low.maps")
[ "$high" -eq 0 ] || fail "$high mappings above 112 TiB with the low layout: $(grep -c . "$dir/low.maps") in all"
grep -q libcudart "$dir/low.maps" || fail "the client runtime is not mapped: $(head -5 "$dir/low.maps")"
FUNNEL_CLIENT_LAYOUT=default "$bin/funnel-run" /bin/cat /proc/self/maps >"$dir/default.maps" 2>&1 ||
  fail "funnel-run with FUNNEL_CLIENT_LAYOUT=default: $(cat "$dir/default.maps")"
libc=$(grep -m1 'libc\.so' "$dir/default.maps" | cut -d- -f1)
if [ -z "$libc" ] || [ $((16#$libc)) -lt $limit ]; then fail "with the default layout libc is at 0x$libc, not at the top"; fi
if FUNNEL_CLIENT_LAYOUT=sideways "$bin/funnel-run" /bin/true 2>"$dir/bad.err"; then fail "a bad value was accepted"; fi
grep -q "FUNNEL_CLIENT_LAYOUT='sideways'.*low | default" "$dir/bad.err" || fail "unclear refusal: $(cat "$dir/bad.err")"
# A server that a process of the low layout starts (a rank's MPI hooks, the client runtime)
# would inherit it: it runs itself again with the usual one, so that its mappings (the CUDA
# driver's device memory among them) stay at the top, away from its clients'.
export FUNNEL_RUN_DIR=$dir/run2 FUNNEL_LOG_DIR=$dir/log2
stop_both() {
  local r
  for r in run2 run; do FUNNEL_RUN_DIR=$dir/$r timeout 5 "$bin/funnelctl" shutdown >/dev/null 2>&1; done
  rm -rf "$dir"
}
trap stop_both EXIT
setarch "$(uname -m)" -L "$bin/funnel-run" /bin/true 2>"$dir/inherit.err" ||
  fail "funnel-run under setarch -L: $(cat "$dir/inherit.err")"
slog=$(ls "$dir"/log2/funnel-server-*.log 2>/dev/null | head -1)
spid=${slog##*-}
spid=${spid%.log}
[ -n "$slog" ] && [ -r "/proc/$spid/personality" ] || fail "no running server in $dir/run2 (log '$slog')"
pers=$(cat "/proc/$spid/personality")
(((16#$pers & 16#200000) == 0)) || fail "the server started from the low layout kept it (personality $pers)"
slibc=$(grep -m1 'libc\.so' "/proc/$spid/maps" | cut -d- -f1)
if [ -z "$slibc" ] || [ $((16#$slibc)) -lt $limit ]; then fail "the server's libc is at 0x$slibc, not at the top"; fi
echo "PASS: low layout: every mapping below 112 TiB ($(grep -c . "$dir/low.maps") mappings); default: libc at 0x$libc;" \
  "a server started from the low layout has the usual one (libc at 0x$slibc)"
