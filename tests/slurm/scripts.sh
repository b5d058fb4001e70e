#!/usr/bin/env bash
# scripts.sh SOURCE_DIR
# funnel's Slurm scripts run by hand with a job's variables, without Slurm, against a fake
# funnel-server that records how it was started: the config's checks, the opt-in words, the
# GPUs (SLURM_JOB_GPUS -> CUDA_VISIBLE_DEVICES, --devices 0..n-1), a cuda job without GPUs,
# a server that fails to start, the task prolog's defaults and the user's own variables, the
# epilog with nothing to do.  Every script must exit 0 whatever happens.  Needs root (the
# prolog starts the server as another user); skips (77) otherwise.
set -u
src=$1
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (the prolog runs the server as the job's user)"; exit 77; }
command -v setpriv >/dev/null || { echo "SKIP: no setpriv"; exit 77; }
user=funneltest
if ! id "$user" >/dev/null 2>&1; then
  useradd --system --no-create-home --home-dir /nonexistent --shell /bin/bash "$user" ||
    { echo "SKIP: cannot create the test user $user"; exit 77; }
fi
uid=$(id -u "$user") gid=$(id -g "$user")
tmp=$(mktemp -d /tmp/funnel-slurm-scripts.XXXXXX)
chmod 755 "$tmp"
job=$((900000000 + RANDOM))
run_dir=/dev/shm/funnel-$uid-$job
cleanup() { rm -rf "$tmp" "$run_dir"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; echo "--- slurm.log"; cat "$tmp/log/slurm.log" 2>/dev/null; echo "FAIL: $*"; exit 1; }

# A prefix with the scripts and a fake funnel-server: it records its uid, environment and
# arguments, and exits with FAKE_RC (a file, so that the test can change it).
prefix=$tmp/prefix
mkdir -p "$prefix/bin" "$prefix/libexec/funnel/slurm"
cp "$src"/slurm/funnel-slurm-* "$prefix/libexec/funnel/slurm/"
cat >"$prefix/bin/funnel-server" <<EOF
#!/bin/bash
echo "uid \$(id -u) gid \$(id -g) cvd \${CUDA_VISIBLE_DEVICES:-unset} order \${CUDA_DEVICE_ORDER:-unset} job \${FUNNEL_JOB_ID:-unset} home \$HOME args \$*" >>$tmp/server.calls
echo "the fake server says no" >&2
exit \$(cat $tmp/fake_rc)
EOF
chmod -R a+rX "$tmp"
chmod 755 "$prefix/bin/funnel-server"
touch "$tmp/server.calls" && chmod 666 "$tmp/server.calls"
echo 0 >"$tmp/fake_rc"

conf=$tmp/funnel-slurm.conf
export FUNNEL_SLURM_CONF=$conf
write_conf() { printf '%s\n' "prefix=$prefix" "log_dir=$tmp/log" "$@" >"$conf"; chmod 644 "$conf"; }
# prolog|epilog VAR=VALUE...: the script with a job's variables; it must exit 0.
script() {
  local s=$1
  shift
  env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin FUNNEL_SLURM_CONF="$conf" SLURM_JOB_ID="$job" SLURM_JOB_UID="$uid" \
    SLURM_JOB_GID="$gid" SLURM_JOB_USER="$user" "$@" timeout 30 "$prefix/libexec/funnel/slurm/funnel-slurm-$s" \
    >"$tmp/$s.out" 2>&1
  local rc=$?
  [ "$rc" -eq 0 ] || fail "$s $* exited with $rc: $(cat "$tmp/$s.out")"
  [ -s "$tmp/$s.out" ] && fail "$s $* printed: $(cat "$tmp/$s.out")"
  return 0
}
calls() { grep -c . "$tmp/server.calls"; }
last_call() { tail -n 1 "$tmp/server.calls"; }
logged() { grep -q -- "$1" "$tmp/log/slurm.log" || fail "not logged: $1"; }

# Opt-in words.
write_conf backend=cuda
script prolog SLURM_JOB_COMMENT=project-x SLURM_JOB_GPUS=0
[ "$(calls)" -eq 0 ] || fail "a job without the word funnel got a server"
script prolog SLURM_JOB_COMMENT=nofunnel,funnelish SLURM_JOB_GPUS=0
[ "$(calls)" -eq 0 ] || fail "'nofunnel,funnelish' counted as funnel"
script prolog "SLURM_JOB_COMMENT=project-x, FUNNEL" SLURM_JOB_GPUS=0
[ "$(calls)" -eq 1 ] || fail "'project-x, FUNNEL' did not count as funnel"
script prolog "SLURM_JOB_CONSTRAINTS=intel&funnel" SLURM_JOB_GPUS=0
[ "$(calls)" -eq 2 ] || fail "the constraint intel&funnel did not count"
echo "ok: opt-in words"

# GPUs: the server sees the job's GPUs and serves all of them, as the job's user.
script prolog SLURM_JOB_COMMENT=funnel SLURM_JOB_GPUS=2,3 CUDA_VISIBLE_DEVICES=2,3
[ "$(last_call)" = "uid $uid gid $gid cvd 2,3 order PCI_BUS_ID job $job home / args --backend cuda --run-dir $run_dir --log-dir $tmp/log/jobs/$job --devices 0,1" ] ||
  fail "GPUs 2,3: the server was started as: $(last_call)"
[ "$(stat -c %U:%a "$tmp/log/jobs/$job")" = "$user:700" ] || fail "the job's log directory is $(stat -c %U:%a "$tmp/log/jobs/$job")"
logged "job $job: started funnel-server (pid ) as $user ($uid:$gid): --backend cuda"
echo "ok: GPUs"

# A cuda job without GPUs: none (no_gpus=skip), or every GPU (no_gpus=all); sim: sim devices.
n=$(calls)
script prolog SLURM_JOB_COMMENT=funnel
[ "$(calls)" -eq "$n" ] || fail "a cuda job without GPUs got a server"
logged "job $job: the job has no GPUs on this node"
write_conf backend=cuda no_gpus=all
script prolog SLURM_JOB_COMMENT=funnel
[ "$(last_call)" = "uid $uid gid $gid cvd unset order unset job $job home / args --backend cuda --run-dir $run_dir --log-dir $tmp/log/jobs/$job" ] ||
  fail "no_gpus=all: $(last_call)"
write_conf backend=sim sim_devices=3
script prolog SLURM_JOB_COMMENT=funnel
last_call | grep -q -- "cvd unset .*--backend sim .* --sim-devices 3$" || fail "sim without GPUs: $(last_call)"
script prolog SLURM_JOB_COMMENT=funnel SLURM_JOB_GPUS=0,1
last_call | grep -q -- "cvd unset .*--backend sim .* --sim-devices 2$" || fail "sim with 2 GPUs: $(last_call)"
echo "ok: no GPUs, sim"

# mode=always (nofunnel opts out), mode=off.
write_conf backend=sim mode=always
n=$(calls)
script prolog
[ "$(calls)" -eq $((n + 1)) ] || fail "mode=always: no server"
script prolog SLURM_JOB_COMMENT=nofunnel
[ "$(calls)" -eq $((n + 1)) ] || fail "mode=always: nofunnel got a server"
write_conf backend=sim mode=off
script prolog SLURM_JOB_COMMENT=funnel
[ "$(calls)" -eq $((n + 1)) ] || fail "mode=off: a server"
echo "ok: modes"

# A bad config line: logged (into a log directory that does not exist yet), no server, exit 0.
rm -rf "$tmp/log"
write_conf backend=gpu
n=$(calls)
script prolog SLURM_JOB_COMMENT=funnel
[ "$(calls)" -eq "$n" ] || fail "a bad config started a server"
logged "line 3: 'backend=gpu' is not valid"
# A server that fails: logged with its message, exit 0.
write_conf backend=sim
echo 1 >"$tmp/fake_rc"
script prolog SLURM_JOB_COMMENT=funnel
logged "job $job: funnel-server did not start (exit 1): the fake server says no"
# Root's jobs and a broken environment: nothing, exit 0.
n=$(calls)
script prolog SLURM_JOB_COMMENT=funnel SLURM_JOB_UID=0 SLURM_JOB_GID=0 SLURM_JOB_USER=root
script prolog SLURM_JOB_COMMENT=funnel SLURM_JOB_ID='1;rm -rf /'
[ "$(calls)" -eq "$n" ] || fail "a server for root's job or a malformed job id"
echo "ok: failures"

# The epilog with nothing to do, twice; with a stale run directory (a SIGKILLed server's).
script epilog
script epilog
setpriv --reuid="$uid" --regid="$gid" --clear-groups mkdir -m 0700 "$run_dir" || fail "cannot make $run_dir"
setpriv --reuid="$uid" --regid="$gid" --clear-groups touch "$run_dir/server.sock" "$run_dir/channel.1"
script epilog
[ -e "$run_dir" ] && fail "the epilog left $run_dir"
logged "job $job: funnel processes of the job: none; done: removed $run_dir"
# A symlink in its place is removed, not followed.
mkdir "$tmp/victim" && touch "$tmp/victim/keep"
ln -s "$tmp/victim" "$run_dir"
script epilog
if [ ! -e "$tmp/victim/keep" ] || [ -L "$run_dir" ]; then fail "the epilog followed a symlinked run directory"; fi
echo "ok: epilog"

# The task prolog (as the job's user): nothing without a server; the defaults with one; the
# user's own variables left alone.
write_conf backend=sim ranks_per_gpu=even
task_prolog() {
  env -i PATH=/usr/bin:/bin FUNNEL_SLURM_CONF="$conf" SLURM_JOB_ID="$job" "$@" \
    setpriv --reuid="$uid" --regid="$gid" --clear-groups timeout 10 "$prefix/libexec/funnel/slurm/funnel-slurm-task-prolog"
}
[ -z "$(task_prolog SLURM_LOCALID=0)" ] || fail "the task prolog printed something without a server"
setpriv --reuid="$uid" --regid="$gid" --clear-groups mkdir -m 0700 "$run_dir"
python3 -c "import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])" "$run_dir/server.sock" 2>/dev/null ||
  fail "cannot make a socket"
chown "$uid:$gid" "$run_dir/server.sock"
out=$(task_prolog SLURM_LOCALID=1 SLURM_STEP_ID=0 SLURM_GTIDS=4,5,6)
expected="export FUNNEL_RUN_DIR=$run_dir
export FUNNEL_BACKEND=sim
export FUNNEL_LOG_DIR=$tmp/log/jobs/$job
export FUNNEL_RANKS_PER_GPU=even
export MPI_LOCALNRANKS=3"
[ "$out" = "$expected" ] || fail "task prolog of an srun task: $out"
out=$(task_prolog SLURM_LOCALID=0 FUNNEL_GPU_MAP=1,0 FUNNEL_BACKEND=cuda)
[ "$out" = "export FUNNEL_RUN_DIR=$run_dir
export FUNNEL_LOG_DIR=$tmp/log/jobs/$job" ] || fail "task prolog of the batch script with the user's FUNNEL_GPU_MAP and FUNNEL_BACKEND: $out"
out=$(task_prolog SLURM_LOCALID=0 SLURM_STEP_ID=1 SLURM_GTIDS=0,1 FUNNEL_RANKS_PER_GPU=2 OMPI_COMM_WORLD_LOCAL_SIZE=2)
grep -q 'FUNNEL_RANKS_PER_GPU\|MPI_LOCALNRANKS' <<<"$out" && fail "the task prolog overrode the user's FUNNEL_RANKS_PER_GPU or a launcher's local size: $out"
script epilog
[ -e "$run_dir" ] && fail "the epilog left $run_dir"
echo "ok: task prolog"
echo "PASS"
