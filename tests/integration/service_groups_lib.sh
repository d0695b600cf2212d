# What the service_groups*.sh tests share (sourced): the skips, the work directory and its
# cleanup, fail(), the Open MPI settings for singletons, and the rendezvous server.
#   service_groups_begin NAME CHECK_BINARY  # exits 77 without ompi-server or the check program
#   service_groups_server                   # ompi-server writing $DIR/uri
# Each node's log ($DIR/LABEL.log) starts with "<t> LABEL READY pid PID": cleanup SIGKILLs those
# processes and everything in $pids (a SIGKILLed timeout leaves its child running).

service_groups_begin() {
  SG_NAME=$1
  CHECK=$2
  if ! command -v ompi-server >/dev/null 2>&1; then
    echo "SKIP: ompi-server (Open MPI's rendezvous server, Debian package openmpi-bin) is missing"
    exit 77
  fi
  if [ ! -x "$CHECK" ]; then
    echo "SKIP: $CHECK was not built (tools/sanitize.sh --ci builds only its CI_TARGETS)"
    exit 77
  fi
  DIR=$(mktemp -d "/tmp/$SG_NAME.XXXXXX")
  pids=()
  trap cleanup EXIT
  # Singletons run as root only with these; each exchange (connect/accept) waits at most 2 s,
  # which is what a dead node 0's stale names cost a joiner.
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_MCA_pmix_base_exchange_timeout=2
}

cleanup() {
  local log pid
  for log in "$DIR"/*.log; do
    pid=$(awk '/ READY pid / { print $5 }' "$log" 2>/dev/null)
    [ -n "$pid" ] && pids+=("$pid")
  done
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$DIR"
}

fail() {
  echo "$SG_NAME: $*"
  for f in "$DIR"/*.log; do echo "== $f"; cat "$f"; done
  exit 1
}

service_groups_server() {
  # Not under timeout, for the reason above: killed at the end, however the script ends.
  ompi-server --no-daemonize -r "$DIR/uri" >"$DIR/server.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do [ -s "$DIR/uri" ] && break; sleep 0.1; done
  [ -s "$DIR/uri" ] || fail "ompi-server wrote no URI file within 10 s"
}
