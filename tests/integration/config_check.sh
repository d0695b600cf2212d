#!/usr/bin/env bash
# nodecommd's configuration and logging: default < file < environment < flag, --print-config
# (text and JSON) with each value's source, the client library's NODECOMM_* names left alone,
# one-line errors naming the file line or variable, and sd-daemon priority prefixes.
#   config_check.sh BIN_DIR
set -u
BIN=$1
D=$BIN/nodecommd
T=$(mktemp -d /tmp/nc-config.XXXXXX)
trap 'rm -rf "$T"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }
# Run with none of the caller's daemon settings in the environment.
UNSET=(-u NODECOMMD_CONFIG -u JOURNAL_STREAM)
for v in $(env | sed -n 's/^\(NODECOMMD\?_[A-Z_]*\)=.*/\1/p'); do UNSET+=(-u "$v"); done
clean_env() { env "${UNSET[@]}" "$@"; }
expect() {  # expected-code description command...
  local want=$1 what=$2; shift 2
  OUT=$(clean_env "$@" 2>&1); local rc=$?
  if [ "$rc" -eq "$want" ]; then pass "$what"; else fail "$what: exit $rc, wanted $want: $OUT"; fi
}
has() {  # description pattern (extended regex, matched against one line of $OUT)
  if printf '%s\n' "$OUT" | grep -Eq -- "$2"; then pass "$1"; else fail "$1: no /$2/ in: $OUT"; fi
}
one_line() { [ "$(printf '%s\n' "$OUT" | wc -l)" -eq 1 ] && pass "$1 is one line" || fail "$1: $OUT"; }

cat >"$T/a.conf" <<'EOF'
# comment
[nodecommd]
chunk-size = 1M   # a comment after the value
log_level = "debug"
cores = none
EOF

# Precedence, one setting through all four layers.
expect 0 "flag wins" env NODECOMM_CHUNK_SIZE=2M "$D" --config "$T/a.conf" --chunk-size 4M --print-config
has "chunk-size from the flag" "^chunk-size = 4M +# flag --chunk-size$"
has "log_level read as log-level from the file" "^log-level = debug +# file $T/a.conf:4$"
has "the file is named" "^# config file: $T/a.conf \(read\)$"
expect 0 "env beats the file" env NODECOMM_CHUNK_SIZE=2M "$D" --config "$T/a.conf" --print-config
has "chunk-size from the environment" "^chunk-size = 2M +# env NODECOMM_CHUNK_SIZE$"
expect 0 "the file beats the default" "$D" --config "$T/a.conf" --print-config
has "chunk-size from the file" "^chunk-size = 1M +# file $T/a.conf:3$"
has "untouched settings are defaults" "^pipeline-depth = 8 +# default$"
expect 0 "defaults" "$D" --config none --print-config
has "chunk-size default" "^chunk-size = 524288 +# default$"
has "--config none reads nothing" "^# config file: none \(not read\)$"
expect 0 "NODECOMMD_CONFIG names the file" env NODECOMMD_CONFIG="$T/a.conf" "$D" --print-config
has "file from NODECOMMD_CONFIG" "^chunk-size = 1M +# file $T/a.conf:3$"
expect 0 "--config beats NODECOMMD_CONFIG" env NODECOMMD_CONFIG=/nonexistent "$D" --config "$T/a.conf" --print-config

# The client library's variables are not the daemon's; NODECOMMD_ names are.
expect 0 "client variables ignored" env NODECOMM_IDLE=spin NODECOMM_INSTANCE=other NODECOMM_FUSION=off \
  NODECOMM_PRIORITY_POLICY=lifo NODECOMM_RUNTIME_DIR=/x NODECOMM_FUSION_THRESHOLD=1K NODECOMM_FUSION_CYCLE_US=9 \
  "$D" --config none --print-config
for s in idle instance fusion priority-policy runtime-dir fusion-threshold fusion-cycle-us; do
  has "$s ignores NODECOMM_*" "^$s = .*# default$"
done
expect 0 "NODECOMMD_ variables" env NODECOMMD_IDLE=spin NODECOMMD_INSTANCE=svc NODECOMMD_FUSION=off \
  NODECOMM_TRANSPORT=loopback "$D" --config none --print-config
has "NODECOMMD_IDLE" "^idle = spin +# env NODECOMMD_IDLE$"
has "NODECOMMD_INSTANCE" "^instance = svc +# env NODECOMMD_INSTANCE$"
has "NODECOMMD_FUSION" "^fusion = off +# env NODECOMMD_FUSION$"
has "NODECOMM_TRANSPORT" "^transport = loopback +# env NODECOMM_TRANSPORT$"

# JSON.
expect 0 "--print-config --json" env NODECOMM_LANES=8 "$D" --config "$T/a.conf" --print-config --json
has "JSON names the file" "\"config_file\": \"$T/a.conf\""
has "JSON source env" "\"from\": \"NODECOMM_LANES\""
has "JSON source file" "\"source\": \"file\""
expect 2 "--json alone is refused" "$D" --json

# --print-config output is a configuration file that gives the same values.
clean_env env NODECOMM_LANES=8 "$D" --config "$T/a.conf" --print-config >"$T/printed.conf" 2>&1
expect 0 "printed configuration reads back" "$D" --config "$T/printed.conf" --print-config
if diff <(sed 's/ *#.*//' "$T/printed.conf" | grep -v '^$') <(printf '%s\n' "$OUT" | sed 's/ *#.*//' | grep -v '^$') >/dev/null; then
  pass "printed configuration round-trips"
else
  fail "printed configuration differs: $OUT"
fi

# Errors: exit 2, one line, naming where the value came from.
expect 2 "a missing explicit file" "$D" --config "$T/missing.conf"
one_line "missing file error"; has "missing file named" "$T/missing.conf"
expect 2 "a missing NODECOMMD_CONFIG file" env NODECOMMD_CONFIG="$T/missing.conf" "$D" --print-config
if [ ! -e /etc/nodecomm/nodecommd.conf ]; then
  expect 0 "a missing default file is fine" "$D" --print-config
  has "default file not found" "^# config file: /etc/nodecomm/nodecommd.conf \(not found\)$"
fi
printf 'chunk-size = 1M\nno-such-setting = 3\n' >"$T/bad.conf"
expect 2 "an unknown setting" "$D" --config "$T/bad.conf" --print-config
one_line "unknown setting error"; has "unknown setting names file:line" "$T/bad.conf:2: unknown setting 'no-such-setting'"
printf 'chunk-size = 1M\nchunk_size = 2M\n' >"$T/dup.conf"
expect 2 "a repeated setting" "$D" --config "$T/dup.conf" --print-config
has "repeated setting named" "$T/dup.conf:2: 'chunk-size' is already set on line 1"
printf '\n\nidle = fast\n' >"$T/val.conf"
expect 2 "a bad value in the file" "$D" --config "$T/val.conf" --print-config
one_line "bad file value error"; has "bad file value names file:line" "$T/val.conf:3 \(idle\)"
printf 'transport\n' >"$T/syntax.conf"
expect 2 "a line without =" "$D" --config "$T/syntax.conf" --print-config
expect 2 "a bad size in the environment" env NODECOMM_CHUNK_SIZE=12Q "$D" --config none --print-config
one_line "bad env size error"; has "bad env size names the variable" "NODECOMM_CHUNK_SIZE: bad size '12Q'"
expect 2 "a bad ring in the environment" env NODECOMM_RING_CAPACITY=100 "$D" --config none --print-config
has "bad ring names the variable" "NODECOMM_RING_CAPACITY: must be a power of two"
expect 2 "a bad flag still fails first" env NODECOMM_CHUNK_SIZE=12Q "$D" --config none --bogus
has "the flag error" "--bogus"

# A running daemon uses the file: log-level = debug from it, in the journal format.
RT=$T/rt
printf 'log-level = debug\ntransport = loopback\ncores = none\nidle = backoff\n' >"$T/run.conf"
env "${UNSET[@]}" "$D" --config "$T/run.conf" --runtime-dir "$RT" --log-format journal 2>"$T/run.log" &
pid=$!
for _ in $(seq 100); do [ -f "$RT/nodecommd.ready" ] && break; sleep 0.1; done
[ -f "$RT/nodecommd.ready" ] && pass "daemon from the file is ready" || fail "daemon not ready: $(cat "$T/run.log")"
# A second daemon on the same directory fails: an error line in the journal format.
OUT=$(clean_env "$D" --config "$T/run.conf" --runtime-dir "$RT" --log-format journal 2>&1); rc=$?
[ "$rc" -eq 1 ] && pass "second daemon exits 1" || fail "second daemon exit $rc: $OUT"
has "error line has <3> and the instance and node" "^<3>nodecommd\[default node 0/1\] error: instance 'default' is already running"
kill -TERM $pid; wait $pid; rc=$?
[ "$rc" -eq 0 ] && pass "SIGTERM exits 0" || fail "SIGTERM exit $rc"
OUT=$(cat "$T/run.log")
has "debug lines from the file's log-level" "^<7>nodecommd\[default node 0/1\] debug: "
has "info lines are <6>" "^<6>nodecommd\[default node 0/1\] info: ready: socket "
has "the start-up line says where settings came from" "info: config file $T/run.conf \(read\); 4 setting\(s\) from the file, 0 from the environment, 2 from flags"
bad=$(grep -Ev '^<[3467]>nodecommd\[' "$T/run.log" || true)
[ -z "$bad" ] && pass "every journal line has a priority" || fail "lines without priority: $bad"

# auto: prefixes only when JOURNAL_STREAM names stderr.
run_briefly() {  # log-file env...
  local log=$1; shift
  : >"$log"
  local stream
  stream=$(stat -c '%d:%i' "$log")
  env "${UNSET[@]}" "$@" JOURNAL_STREAM_VALUE="$stream" sh -c 'JOURNAL_STREAM=${JOURNAL_STREAM_VALUE}; [ "$NC_MATCH" = yes ] || JOURNAL_STREAM=1:2; export JOURNAL_STREAM; exec "$0" "$@"' \
    "$D" --config none --transport loopback --cores none --runtime-dir "$RT" 2>>"$log" &
  local p=$!
  for _ in $(seq 100); do grep -q "ready: socket" "$log" && break; sleep 0.1; done
  kill -TERM $p; wait $p
}
run_briefly "$T/auto-yes.log" NC_MATCH=yes
grep -q '^<6>nodecommd\[.*ready: socket' "$T/auto-yes.log" && pass "auto: prefixes under the journal" ||
  fail "auto under JOURNAL_STREAM: $(cat "$T/auto-yes.log")"
run_briefly "$T/auto-no.log" NC_MATCH=no
grep -q '^nodecommd\[.*ready: socket' "$T/auto-no.log" && pass "auto: plain when JOURNAL_STREAM is another stream" ||
  fail "auto with another JOURNAL_STREAM: $(cat "$T/auto-no.log")"

echo "config_check: $failures failure(s)"
[ "$failures" -eq 0 ]
