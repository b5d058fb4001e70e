#!/usr/bin/env bash
# check_refused_documented.sh LIBCUDART DOC
# Every runtime call funnel's libcudart.so.13 still refuses (its weak stubs) is listed in DOC's
# "Runtime calls still refused" section, and every call listed there is still refused: the list
# stays true as calls are served (issue 30's done-when).
set -euo pipefail
lib=$1 doc=$2
stubs=$(nm -D --defined-only "$lib" | awk '$2 == "W" {sub(/@.*/, "", $3); print $3}' | sort -u)
# The section's lists: lines made only of backticked names separated by commas.
listed=$(sed -n '/^## Runtime calls still refused/,$p' "$doc" | grep -E '^`[A-Za-z_0-9]+`(, `[A-Za-z_0-9]+`)*$' |
  tr ',' '\n' | tr -d ' `' | sort -u)
[ -n "$stubs" ] || { echo "FAIL: no weak stubs read from $lib"; exit 1; }
missing=$(comm -23 <(echo "$stubs") <(echo "$listed"))
stale=$(comm -13 <(echo "$stubs") <(echo "$listed"))
rc=0
if [ -n "$missing" ]; then
  echo "FAIL: refused by $lib but not listed in $doc:"; echo "$missing"; rc=1
fi
if [ -n "$stale" ]; then
  echo "FAIL: listed as refused in $doc but served by $lib:"; echo "$stale"; rc=1
fi
[ "$rc" -eq 0 ] && echo "PASS: the $(echo "$stubs" | wc -l) refused runtime calls are the ones $doc lists"
exit "$rc"
