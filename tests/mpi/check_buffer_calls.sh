#!/usr/bin/env bash
# check_buffer_calls.sh LIB MPI_H DOC: every MPI call of MPI_H with a message buffer argument
# (void *buf, sendbuf, recvbuf, ...) is either one libfunnel_mpi.so (LIB) wraps, so that device
# buffers are staged, or one DOC (doc/mpi.md) lists under "Calls that do not take device buffers
# yet", and no call is both.  Fails naming the calls that are neither, or both.
set -eu
lib=$1 mpih=$2 doc=$3
calls=$(python3 - "$mpih" <<'PY'
import re, sys
src = re.sub(r'/\*.*?\*/', '', open(sys.argv[1]).read(), flags=re.S)
names = set()
for m in re.finditer(r'\bint\s+(MPI_\w+)\s*\(([^;]*?)\)', src, flags=re.S):
    if re.search(r'\bvoid\s*\*\s*(buf|buffer|ibuf|sendbuf|recvbuf|inbuf|outbuf|inoutbuf|origin_addr|result_addr|compare_addr)\b', m.group(2)):
        names.add(m.group(1))
# MPI_T_*: the tool interface's handles; MPI_Buffer_detach: the address of a pointer, not a buffer.
print('\n'.join(sorted(n for n in names if not n.startswith('MPI_T_') and n != 'MPI_Buffer_detach')))
PY
)
wrapped=$(nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//' | grep '^MPI_' | sort -u)
# shellcheck disable=SC2016  # the backticks are Markdown's, matched literally
listed=$(sed -n '/^Calls that do not take device buffers yet/,/^$/p' "$doc" | grep -o '`MPI_[A-Za-z_]*`' | tr -d '`' | sort -u)
[ -n "$calls" ] || { echo "FAIL: no MPI call with a buffer argument found in $mpih"; exit 1; }
[ -n "$listed" ] || { echo "FAIL: $doc has no list of the calls that do not take device buffers yet"; exit 1; }
neither=$(comm -23 <(echo "$calls") <(sort -u <(echo "$wrapped") <(echo "$listed")))
both=$(comm -12 <(echo "$wrapped") <(echo "$listed"))
[ -z "$neither" ] || { echo "FAIL: calls with buffers neither wrapped nor listed in $doc:"; echo "$neither"; exit 1; }
[ -z "$both" ] || { echo "FAIL: calls listed in $doc as not taking device buffers, but wrapped:"; echo "$both"; exit 1; }
echo "PASS: $(echo "$calls" | wc -l) calls with buffers: $(comm -12 <(echo "$calls") <(echo "$wrapped") | wc -l) wrapped, $(echo "$listed" | wc -l) listed"
