#!/usr/bin/env bash
# check_driver_symbols.sh LIB SYMBOL_LIST: funnel's client driver exports exactly the NVIDIA
# driver's functions (unversioned, as the NVIDIA driver's are) and its marker, soname libcuda.so.1.
set -eu
lib=$1 list=$2
got=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^funnel_client_driver$' | LC_ALL=C sort)
if ! diff -u <(LC_ALL=C sort "$list") <(printf "%s\n" "$got"); then
  echo "FAIL: exported symbols differ from $list"
  exit 1
fi
nm -D --defined-only "$lib" | grep -q ' funnel_client_driver$' || { echo "FAIL: no funnel_client_driver marker"; exit 1; }
readelf -d "$lib" | grep -q 'Library soname: \[libcuda.so.1\]' || { echo "FAIL: SONAME"; exit 1; }
echo "PASS: $(printf "%s\n" "$got" | wc -l) driver functions and the marker, soname libcuda.so.1"
