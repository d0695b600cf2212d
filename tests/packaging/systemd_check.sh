#!/usr/bin/env bash
# The installed systemd files, checked offline with systemd's own tools.
#   systemd_check.sh verify PREFIX     systemd-analyze verify on each unit (nodecommd.service,
#                                      nodecomm-rendezvous.service); systemd-sysusers and
#                                      systemd-tmpfiles apply their files to a scratch root
#   systemd_check.sh security PREFIX   systemd-analyze security --offline=true on each unit:
#                                      exposure <= 3.0
# Exits 77 (skipped) where systemd-analyze is missing or cannot run here.
set -u
MODE=$1
PREFIX=$2
UNITS="nodecommd.service nodecomm-rendezvous.service"
command -v systemd-analyze >/dev/null || { echo "skip: no systemd-analyze (apt-get install systemd)"; exit 77; }
for name in $UNITS; do
  [ -f "$PREFIX/lib/systemd/system/$name" ] || { echo "FAIL: $PREFIX/lib/systemd/system/$name not installed"; exit 1; }
done
T=$(mktemp -d /tmp/nc-systemd.XXXXXX)
trap 'rm -rf "$T"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

case $MODE in
verify)
  for name in $UNITS; do
    UNIT=$PREFIX/lib/systemd/system/$name
    # systemd-analyze needs a usable runtime directory even offline; a container without one
    # cannot run it at all.
    out=$(SYSTEMD_LOG_LEVEL=notice systemd-analyze verify "$UNIT" 2>&1); rc=$?
    if [ "$rc" -ne 0 ] && printf '%s\n' "$out" | grep -qiE "Failed to (initialize|set up|setup) manager|Operation not permitted|No such file or directory.*/run/systemd"; then
      echo "skip: systemd-analyze cannot run in this environment: $out"
      exit 77
    fi
    # Only the unit's own lines count: systemd-analyze also reports on the host's units.
    mine=$(printf '%s\n' "$out" | grep -F "$name" || true)
    if [ "$rc" -eq 0 ] && [ -z "$mine" ]; then
      pass "systemd-analyze verify $UNIT"
    else
      fail "systemd-analyze verify $name (exit $rc): $out"
    fi
  done
  # sysusers.d and tmpfiles.d, applied to a scratch root.
  mkdir -p "$T/root/etc" "$T/root/run"
  if systemd-sysusers --root="$T/root" "$PREFIX/lib/sysusers.d/nodecomm.conf" >"$T/sysusers.log" 2>&1 &&
     grep -q '^nodecomm:x:[0-9]*:[0-9]*:nodecomm node daemon:/:/usr/sbin/nologin$' "$T/root/etc/passwd"; then
    pass "systemd-sysusers creates the nodecomm user"
  else
    fail "systemd-sysusers: $(cat "$T/sysusers.log" "$T/root/etc/passwd" 2>/dev/null)"
  fi
  if systemd-tmpfiles --root="$T/root" --create "$PREFIX/lib/tmpfiles.d/nodecomm.conf" >"$T/tmpfiles.log" 2>&1 &&
     [ "$(stat -c '%a %U' "$T/root/run/nodecomm" 2>/dev/null)" = "755 $(stat -c %U "$T/root/run/nodecomm" 2>/dev/null)" ] &&
     [ -d "$T/root/run/nodecomm" ]; then
    pass "systemd-tmpfiles creates /run/nodecomm"
  else
    fail "systemd-tmpfiles: $(cat "$T/tmpfiles.log")"
  fi
  ;;
security)
  for name in $UNITS; do
    UNIT=$PREFIX/lib/systemd/system/$name
    out=$(systemd-analyze security --offline=true --no-pager "$UNIT" 2>&1); rc=$?
    score=$(printf '%s\n' "$out" | sed -n "s/.*Overall exposure level for $name: \([0-9.]*\).*/\1/p")
    if [ -z "$score" ]; then
      if printf '%s\n' "$out" | grep -qiE "unrecognized option|Failed to (initialize|set up|setup) manager"; then
        echo "skip: systemd-analyze security --offline cannot run here: $out"
        exit 77
      fi
      fail "$name: no exposure level in: $out"
    else
      printf '%s\n' "$out" | grep -E '^✗' | sed 's/^/  /'
      echo "$name exposure level: $score"
      awk -v s="$score" 'BEGIN { exit !(s <= 3.0) }' && pass "$name exposure $score <= 3.0" ||
        fail "$name exposure $score > 3.0"
    fi
  done
  ;;
*)
  echo "usage: systemd_check.sh verify|security PREFIX"
  exit 2
  ;;
esac
echo "systemd_check $MODE: $failures failure(s)"
[ "$failures" -eq 0 ]
