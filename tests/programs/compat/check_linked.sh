#!/usr/bin/env bash
# check_linked.sh BIN_DIR: every program named in BIN_DIR/programs.txt (a line's first word)
# exists, is executable and needs libcudart.so.13 (shared runtime: funnel-run can only serve
# those), with no static runtime linked in.  No GPU needed (ctest compat.linked).
set -u
dir=$1
[[ -f $dir/programs.txt ]] || { echo "FAIL: $dir/programs.txt missing"; exit 1; }
n=0 bad=0
while read -r p _marks; do  # a line: the name, then marks such as `fault`
  [[ -z $p ]] && continue
  n=$((n + 1))
  f=$dir/$p
  if [[ ! -x $f ]]; then
    echo "FAIL $p: not built ($f)"; bad=$((bad + 1)); continue
  fi
  needed=$(readelf -d "$f" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  if ! grep -qx 'libcudart.so.13' <<<"$needed"; then
    echo "FAIL $p: does not need libcudart.so.13 (needs: ${needed//$'\n'/ })"; bad=$((bad + 1)); continue
  fi
  # A static cudart leaves its internal symbols in the binary's symbol table.
  if readelf -sW "$f" 2>/dev/null | grep -q 'cudart[0-9]*::\|_ZN6cudart'; then
    echo "FAIL $p: contains a static CUDA runtime"; bad=$((bad + 1)); continue
  fi
  echo "ok $p"
done <"$dir/programs.txt"
echo "compat programs: $n, bad $bad"
[[ $n -gt 0 && $bad -eq 0 ]]
