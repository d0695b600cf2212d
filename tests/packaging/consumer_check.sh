#!/usr/bin/env bash
# A program outside the tree builds against the installed nodecomm in PREFIX, through its CMake
# package (find_package(nodecomm) -> nodecomm::nodecomm) and through pkg-config, and runs under
# the installed nodecomm-launch on 1 node x 2 ranks. As root it also runs the installed
# nodecommd the way the unit does: as an unprivileged user without any capability,
# with root's ranks attached to it.
#   consumer_check.sh PREFIX CONSUMER_SOURCE_DIR
set -u
PREFIX=$1
SRC=$2
T=$(mktemp -d /tmp/nc-consumer.XXXXXX)
svc_pid=""
cleanup() { [ -n "$svc_pid" ] && kill -KILL "$svc_pid" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }
PC=$(find "$PREFIX" -name nodecomm.pc | head -1)
# Nothing from the build tree or the environment may help.
unset CMAKE_PREFIX_PATH PKG_CONFIG_PATH LD_LIBRARY_PATH

if cmake -S "$SRC" -B "$T/cmake" -DCMAKE_PREFIX_PATH="$PREFIX" -DCMAKE_BUILD_TYPE=Release >"$T/cmake.log" 2>&1 &&
   cmake --build "$T/cmake" -j 2 >>"$T/cmake.log" 2>&1; then
  pass "consumer builds with find_package(nodecomm)"
else
  fail "consumer through CMake: $(cat "$T/cmake.log")"
fi
export PKG_CONFIG_PATH=$(dirname "$PC")
cflags=$(pkg-config --cflags nodecomm) && libs=$(pkg-config --libs nodecomm) &&
  libdir=$(pkg-config --variable=libdir nodecomm) && version=$(pkg-config --modversion nodecomm)
if cc -std=c11 -O2 $cflags "$SRC/consumer.c" -o "$T/consumer_pc" $libs -Wl,-rpath,"$libdir" 2>"$T/pc.log" &&
   c++ -std=c++20 -O2 $cflags "$SRC/consumer.cpp" -o "$T/consumer_pc_cpp" $libs -Wl,-rpath,"$libdir" 2>>"$T/pc.log"; then
  pass "consumer builds with pkg-config (nodecomm $version)"
else
  fail "consumer through pkg-config: $(cat "$T/pc.log")"
fi
unset PKG_CONFIG_PATH

for prog in "$T/cmake/consumer_c" "$T/cmake/consumer_cpp" "$T/consumer_pc" "$T/consumer_pc_cpp"; do
  [ -x "$prog" ] || continue
  out=$("$PREFIX/bin/nodecomm-launch" --nodes 1 --ranks-per-node 2 --timeout 30 -- "$prog" 2>&1); rc=$?
  if [ "$rc" -eq 0 ] && [ "$(printf '%s\n' "$out" | grep -c 'of 2: allreduce ok (3)')" -eq 2 ]; then
    pass "$(basename "$prog") runs under the installed launcher"
  else
    fail "$(basename "$prog") under the launcher: exit $rc: $out"
  fi
done

# The service's privilege model, without systemd: an unprivileged daemon without any
# capability (each client's segment is a memfd passed over the socket, nothing to chown).
if [ "$(id -u)" -ne 0 ] || ! command -v setpriv >/dev/null || ! id nobody >/dev/null 2>&1; then
  echo "skip: unprivileged daemon (needs root, setpriv and the user nobody)"
elif [ -x "$T/cmake/consumer_c" ]; then
  chmod 755 "$T"
  mkdir -p "$T/run" && chown nobody "$T/run"
  # nobody runs a copy: PREFIX lies in the build tree, which may be out of its reach (a
  # checkout in root's 0700 home).
  source "$(dirname "$0")/../integration/other_uid_copy.sh"
  copy_for_other_uid "$T/svc" "$PREFIX/bin/nodecommd" || fail "cannot copy nodecommd to $T/svc"
  setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups --no-new-privs \
    --inh-caps=-all --ambient-caps=-all --bounding-set=-all \
    env NODECOMM_TRANSPORT=loopback NODECOMM_RUNTIME_BASE="$T/run" NODECOMMD_INSTANCE=svc \
    LD_LIBRARY_PATH="$T/svc/lib" "$T/svc/bin/nodecommd" --config none --cores none --idle backoff 2>"$T/svc.log" &
  svc_pid=$!
  for _ in $(seq 100); do [ -f "$T/run/svc/nodecommd.ready" ] && break; sleep 0.1; done
  owner=$(stat -c %U "$T/run/svc/nodecommd.sock" 2>/dev/null)
  [ "$owner" = nobody ] && pass "the daemon runs as nobody" || fail "daemon socket owner '$owner': $(cat "$T/svc.log")"
  pids=()
  # The clients accept a daemon of root, their own uid or the user nodecomm by default; this
  # one stands in for the service user as nobody (issue 16 point 7: SO_PEERCRED check).
  for r in 0 1; do
    NODECOMM_DAEMON_UID=nobody \
    NODECOMM_RUNTIME_BASE="$T/run" NODECOMM_INSTANCE=svc NODECOMM_JOB=svc NODECOMM_LOCAL_RANK=$r \
      NODECOMM_LOCAL_SIZE=2 NODECOMM_TIMEOUT_SEC=20 NODECOMM_IDLE=backoff \
      "$T/cmake/consumer_c" >"$T/rank$r.log" 2>&1 &
    pids+=($!)
  done
  ok=0
  for p in "${pids[@]}"; do wait "$p" && ok=$((ok + 1)); done
  [ "$ok" -eq 2 ] && pass "root's ranks run against the unprivileged daemon" ||
    fail "ranks against the unprivileged daemon: $(cat "$T"/rank*.log "$T/svc.log")"
  left=$(ls /dev/shm | grep -E "^nodecomm\.svc\." | grep -vE '\.(counters|trace)$' || true)
  [ -z "$left" ] && pass "no segment name in /dev/shm" || fail "segments in /dev/shm: $left"
  kill -TERM "$svc_pid"; wait "$svc_pid"; rc=$?; svc_pid=""
  [ "$rc" -eq 0 ] && pass "the unprivileged daemon stops cleanly" || fail "daemon exit $rc: $(cat "$T/svc.log")"
fi
echo "consumer_check: $failures failure(s)"
[ "$failures" -eq 0 ]
