#!/usr/bin/env bash
# run_dir.sh BIN_DIR: the ranks of one mpirun agree on the run directory (FUNNEL_JOB_ID
# defaults from Open MPI's job id) and two mpiruns get different ones.
set -u
bin=$1
unset FUNNEL_RUN_DIR FUNNEL_JOB_ID SLURM_JOB_ID PBS_JOBID LSB_JOBID
mpirun=(mpirun --oversubscribe -np 3)
[ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root)
dirs() { "${mpirun[@]}" "$bin/funnelctl" config | awk '$1 == "FUNNEL_RUN_DIR" {print $NF}' | sort | uniq -c; }
a=$(dirs) b=$(dirs)
echo "job 1: $a"; echo "job 2: $b"
[ "$(wc -l <<<"$a")" -eq 1 ] && [ "$(awk '{print $1}' <<<"$a")" -eq 3 ] || { echo "FAIL: the ranks of job 1 disagree"; exit 1; }
[ "$(wc -l <<<"$b")" -eq 1 ] && [ "$(awk '{print $1}' <<<"$b")" -eq 3 ] || { echo "FAIL: the ranks of job 2 disagree"; exit 1; }
[ "$(awk '{print $2}' <<<"$a")" != "$(awk '{print $2}' <<<"$b")" ] || { echo "FAIL: two jobs share a run directory"; exit 1; }
grep -q "/funnel-$(id -u)-nojob" <<<"$a" && { echo "FAIL: no job id from mpirun"; exit 1; }
echo PASS
