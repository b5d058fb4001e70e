#!/usr/bin/env bash
# tests/lint/shellcheck.sh SOURCE_DIR: the shell scripts that users and admins run -- the Slurm prolog,
# task prolog and epilog and their library (slurm/), scripts/, bench/ and every test suite's
# scripts (tests/*/*.sh) -- pass `shellcheck -S warning` (warnings and errors; style
# notes are not checked).  Exit 77 (skipped) where shellcheck is not installed
# (scripts/install-deps.sh installs it).
set -u -o pipefail
src=${1:?usage: shellcheck.sh SOURCE_DIR}
command -v shellcheck >/dev/null || { echo "SKIP: shellcheck not installed (apt-get install shellcheck)"; exit 77; }
cd "$src" || exit 2
files=(slurm/funnel-slurm-prolog slurm/funnel-slurm-epilog slurm/funnel-slurm-task-prolog slurm/funnel-slurm-lib.sh
       scripts/*.sh scripts/device/*.sh bench/*.sh bench/probes/*.sh tests/*/*.sh)
for f in "${files[@]}"; do
  [[ -f $f ]] || { echo "FAIL: $f is missing (tests/lint/shellcheck.sh lists it)"; exit 1; }
done
if shellcheck -x -S warning "${files[@]}"; then
  echo "PASS: ${#files[@]} scripts without shellcheck warnings"
else
  echo "FAIL: shellcheck warnings above (fix them, or disable one with a comment that says why)"
  exit 1
fi
