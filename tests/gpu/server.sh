# Sourced by the GPU suite's scripts that share one funnel-server among several clients
# (run.sh, compat.sh, libs.sh).  Needs BIN.
#   gpu_start_server RUN_DIR LOG_FILE   starts `funnel-server --backend cuda --foreground` on a
#                                       fresh RUN_DIR, sets SERVER_PID; fails if its socket does
#                                       not appear within 30 s (or the server exits first)
#   gpu_stop_server                     SIGTERM, up to 10 s, then SIGKILL; returns the server's
#                                       exit status, 137 when it had to be killed
# shellcheck shell=bash
SERVER_PID=""
gpu_start_server() {
  rm -rf "$1"
  "$BIN/funnel-server" --backend cuda --foreground --run-dir "$1" >"$2" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 300); do
    [[ -S $1/server.sock ]] && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  [[ -S $1/server.sock ]]
}
gpu_stop_server() {
  [[ -n $SERVER_PID ]] || return 0
  local rc=0
  kill -TERM "$SERVER_PID" 2>/dev/null
  for _ in $(seq 100); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -KILL "$SERVER_PID" 2>/dev/null
    wait "$SERVER_PID" 2>/dev/null
    rc=137
  else
    wait "$SERVER_PID"
    rc=$?
  fi
  SERVER_PID=""
  return "$rc"
}
