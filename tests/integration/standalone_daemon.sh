# Sourced by tests that need a nodecommd of their own (loopback transport, own runtime
# directory), outside nodecomm-launch. Needs BIN and work (a scratch directory) set and a
# fail() function; sets daemon_pid.
#   start_standalone_daemon RUNTIME_DIR INSTANCE [NODECOMMD FLAGS...]
#   stop_standalone_daemon
start_standalone_daemon() {
  local rt=$1 instance=$2
  shift 2
  "$BIN/nodecommd" --config none --transport loopback --instance "$instance" \
    --runtime-dir "$rt" --cores none --idle backoff "$@" >"$work/daemon.log" 2>&1 &
  daemon_pid=$!
  for _ in $(seq 200); do
    [ -f "$rt/nodecommd.ready" ] && return 0
    kill -0 "$daemon_pid" 2>/dev/null || fail "nodecommd exited at start"
    sleep 0.1
  done
  fail "nodecommd not ready after 20 s"
}

# SIGTERM, then SIGKILL after 5 s.
stop_standalone_daemon() {
  if [ -n "${daemon_pid:-}" ] && kill -0 "$daemon_pid" 2>/dev/null; then
    kill -TERM "$daemon_pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$daemon_pid" 2>/dev/null || true
  fi
}
