# Sourced by the nodecommctl tests: pass/fail bookkeeping named after the test, and json.
#   TEST_NAME=ctl_live; source check_helpers.sh; ...; finish_checks
failures=0
pass() { echo "$TEST_NAME: ok: $*"; }
fail() {
  echo "$TEST_NAME: FAILED: $*"
  failures=$((failures + 1))
}
# json EXPR: evaluates a Python expression over the JSON on stdin, bound to d.
json() { python3 -c 'import json, sys; d = json.load(sys.stdin); print(eval(sys.argv[1]))' "$1"; }
# The exit status of the test: 0 when nothing failed.
finish_checks() {
  echo "$TEST_NAME: $failures failure(s)"
  [ "$failures" -eq 0 ]
}
