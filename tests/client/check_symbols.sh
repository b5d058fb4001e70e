#!/usr/bin/env bash
# check_symbols.sh LIB SYMBOL_LIST: the library exports exactly the real libcudart.so.13's
# symbols, each versioned @@libcudart.so.13.
set -eu
lib=$1 list=$2
# funnel's own C API (funnel/funnel.h: funnel_*) is exported beside them.
got=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^libcudart.so.13$' | grep -v '^funnel_' | sort)
bad=$(printf '%s\n' "$got" | grep -v '@@libcudart.so.13$' || true)
[ -z "$bad" ] || { echo "FAIL: unversioned symbols: $bad"; exit 1; }
if ! diff -u <(sort "$list") <(printf "%s\n" "$got" | sed "s/@@libcudart.so.13$//" | sort); then
  echo "FAIL: exported symbols differ from $list"; exit 1
fi
readelf -d "$lib" | grep -q 'Library soname: \[libcudart.so.13\]' || { echo "FAIL: SONAME"; exit 1; }
echo PASS
