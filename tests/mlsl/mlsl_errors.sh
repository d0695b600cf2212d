#!/usr/bin/env bash
# Misuse of the MLSL API ends the program as MLSL ends it: a message naming the rank and the
# call, then exit status 1 (docs/MLSL.md, "What differs"). One launch per mode of
# mlsl_api_check --mode;
# each must exit non-zero within its timeout and print its message. A collective mismatch
# (rank 0 AllReduce, rank 1 Bcast) must fail with nodecomm's mismatch text instead of hanging.
#   mlsl_errors.sh BIN_DIR
set -uo pipefail
BIN=${1:?usage: mlsl_errors.sh BIN_DIR}
export NODECOMM_TIMEOUT_SEC=20
failed=0

# mode layout regex-the-output-must-match
check() {
  local mode=$1 layout=$2 pattern=$3
  local nodes=${layout%x*} ranks=${layout#*x}
  local start=$SECONDS out status
  out=$(timeout --kill-after=10 120 "$BIN/nodecomm-launch" --timeout 90 --nodes "$nodes" \
        --ranks-per-node "$ranks" -- "$BIN/mlsl_api_check" --mode "$mode" 2>&1)
  status=$?
  local took=$((SECONDS - start))
  if [ "$status" -eq 0 ]; then
    echo "mlsl_errors: FAILED: --mode $mode on $layout exited 0 (expected a fatal error):"
    echo "$out" | tail -20 | sed 's/^/    /'
    failed=1
  elif [ "$status" -ge 124 ]; then
    echo "mlsl_errors: FAILED: --mode $mode on $layout timed out or was killed (status $status)"
    echo "$out" | tail -20 | sed 's/^/    /'
    failed=1
  # A here-string, not `echo | grep -q`: grep -q leaves at the first match, and under pipefail
  # the echo's SIGPIPE failed the pipeline (seen once in the fresh-machine check, 2026-12-06).
  elif ! grep -Eq -- "$pattern" <<<"$out"; then
    echo "mlsl_errors: FAILED: --mode $mode on $layout exited $status without /$pattern/:"
    echo "$out" | tail -20 | sed 's/^/    /'
    failed=1
  else
    echo "mlsl_errors: ok: --mode $mode on $layout: exit $status in ${took}s:" \
         "$(echo "$out" | grep -Em1 -- "$pattern" | cut -c1-200)"
  fi
}

# The library's fatal path prints "mlsl[<rank>]: <function>: <message>" (docs/MLSL.md).
check wait-twice 1x2 'mlsl\[[0-9]+\]: .*Wait.*not found'
check wait-null 1x2 'mlsl\[[0-9]+\]: .*Wait.*not found'
check test-then-wait 1x2 'mlsl\[[0-9]+\]: .*Wait.*not found'
check start-in-flight 1x2 'mlsl\[[0-9]+\]: .*StartGradientComm.*(again|in flight|not waited)'
check not-multiple 1x2 'mlsl\[[0-9]+\]: .*CreateDistribution'
check init-twice 1x2 'mlsl\[[0-9]+\]: .*Init.*once'
check idx-before-init 1x2 'mlsl\[[^]]*\]: .*GetProcessIdx'
check bad-root 1x2 'mlsl\[[0-9]+\]: .*Bcast.*root'
check unsupported-exchange 1x4 'mlsl\[[0-9]+\]: .*not supported'
check mismatch 1x2 'mismatched collective'
check mismatch 2x1 'mismatched collective'
exit $failed
