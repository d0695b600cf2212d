#!/usr/bin/env bash
# Installs the build tree into PREFIX with `cmake --install` and checks the layout: programs,
# library, headers, CMake package, nodecomm.pc, systemd unit (ExecStart= in PREFIX),
# sysusers.d/tmpfiles.d files, configuration and documentation.
#   install_tree.sh BUILD_DIR PREFIX
set -u
BUILD=$1
PREFIX=$2
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

rm -rf "$PREFIX"
if cmake --install "$BUILD" --prefix "$PREFIX" >"$PREFIX.log" 2>&1; then
  pass "cmake --install --prefix $PREFIX"
else
  fail "cmake --install: $(cat "$PREFIX.log")"
  exit 1
fi
PC=$(find "$PREFIX" -name nodecomm.pc | head -1)
LIBDIR=$(dirname "$(dirname "$PC")")
for f in bin/nodecommd bin/nodecomm-launch bin/nodecomm-bench bin/nodecommctl include/nodecomm.h include/nodecomm.hpp \
         lib/systemd/system/nodecommd.service lib/systemd/system/nodecomm-rendezvous.service \
         lib/sysusers.d/nodecomm.conf lib/tmpfiles.d/nodecomm.conf \
         etc/nodecomm/nodecommd.conf share/doc/nodecomm/OPERATIONS.md share/doc/nodecomm/README.md \
         share/doc/nodecomm/examples/nodecommd.conf; do
  [ -e "$PREFIX/$f" ] && pass "installed $f" || fail "missing $f"
done
for f in libnodecomm.so pkgconfig/nodecomm.pc cmake/nodecomm/nodecommConfig.cmake \
         cmake/nodecomm/nodecommConfigVersion.cmake cmake/nodecomm/nodecommTargets.cmake; do
  [ -e "$LIBDIR/$f" ] && pass "installed ${LIBDIR#"$PREFIX"/}/$f" || fail "missing $LIBDIR/$f"
done
grep -qx "ExecStart=$PREFIX/bin/nodecommd" "$PREFIX/lib/systemd/system/nodecommd.service" &&
  pass "unit runs the installed nodecommd" || fail "unit ExecStart: $(grep ExecStart "$PREFIX/lib/systemd/system/nodecommd.service")"
grep -qx "ExecStart=/usr/bin/ompi-server --no-daemonize -r /run/nodecomm/rendezvous.uri" \
  "$PREFIX/lib/systemd/system/nodecomm-rendezvous.service" && pass "rendezvous unit runs ompi-server" ||
  fail "rendezvous unit ExecStart: $(grep ExecStart "$PREFIX/lib/systemd/system/nodecomm-rendezvous.service")"
grep -qx "prefix=$PREFIX" "$PC" && pass "nodecomm.pc names the prefix" || fail "nodecomm.pc: $(cat "$PC")"
grep -rq "$(cd "$BUILD" && pwd)\|/work/" "$LIBDIR/cmake/nodecomm" && fail "CMake package names build paths" ||
  pass "CMake package is relocatable"
# Installed programs run from the prefix; the shipped configuration changes no setting.
out=$("$PREFIX/bin/nodecommd" --config "$PREFIX/etc/nodecomm/nodecommd.conf" --print-config 2>&1); rc=$?
if [ "$rc" -eq 0 ] && ! printf '%s\n' "$out" | grep -v '^#' | grep -vq '# default$'; then
  pass "the shipped configuration reads, and sets nothing"
else
  fail "shipped configuration: exit $rc: $out"
fi
ldd "$PREFIX/bin/nodecomm-bench" | grep -q "libnodecomm.so.0 => $PREFIX/" &&
  pass "nodecomm-bench finds the installed libnodecomm" || fail "nodecomm-bench: $(ldd "$PREFIX/bin/nodecomm-bench" | grep nodecomm)"
echo "install_tree: $failures failure(s)"
[ "$failures" -eq 0 ]
