#!/usr/bin/env bash
# The MLSL variables the layer honours or reports (docs/MLSL.md, "Environment variables"): the
# example trains correctly with message priorities on (LIFO and FIFO), statistics and debug
# logging; rank 0 names each ignored variable once; Statistics::Print writes mlsl_stats.log.
#   mlsl_env_check.sh BIN_DIR WORK_DIR
set -uo pipefail
BIN=${1:?usage: mlsl_env_check.sh BIN_DIR WORK_DIR}
WORK=${2:?usage: mlsl_env_check.sh BIN_DIR WORK_DIR}
mkdir -p "$WORK" && cd "$WORK" || exit 1
failed=0
fail() {
  echo "mlsl_env_check: FAILED: $1"
  echo "$out" | tail -25 | sed 's/^/    /'
  failed=1
}

for mode in 1 0; do
  rm -f mlsl_stats.log
  out=$(env NODECOMM_TIMEOUT_SEC=60 MLSL_MSG_PRIORITY=1 MLSL_MSG_PRIORITY_MODE=$mode \
        MLSL_MSG_PRIORITY_THRESHOLD=1000 MLSL_STATS=1 MLSL_LOG_LEVEL=2 MLSL_NUM_SERVERS=4 \
        MLSL_LARGE_MSG_CHUNKS=8 timeout --kill-after=10 150 "$BIN/nodecomm-launch" --timeout 120 \
        --nodes 2 --ranks-per-node 2 -- "$BIN/mlsl_train" 2 1 2>&1)
  status=$?
  [ "$status" -eq 0 ] || fail "priority mode $mode: exit status $status"
  [ "$(echo "$out" | grep -c 'exited normally')" -eq 4 ] ||
    fail "priority mode $mode: not every rank exited normally"
  for var in MLSL_NUM_SERVERS MLSL_LARGE_MSG_CHUNKS; do
    [ "$(echo "$out" | grep -c "mlsl: $var=[0-9]* is ignored under nodecomm")" -eq 1 ] ||
      fail "priority mode $mode: $var is not reported exactly once"
  done
  grep -q 'mlsl\[0\]: exchange between operation' <<<"$out" ||
    fail "priority mode $mode: MLSL_LOG_LEVEL=2 printed no exchange plan"
  grep -q '^total' mlsl_stats.log 2>/dev/null ||
    fail "priority mode $mode: Statistics::Print wrote no mlsl_stats.log"
  [ "$failed" -eq 0 ] && echo "mlsl_env_check: ok: MLSL_MSG_PRIORITY=1 mode $mode," \
                             "MLSL_STATS=1, MLSL_LOG_LEVEL=2, ignored variables reported"
done
exit $failed
