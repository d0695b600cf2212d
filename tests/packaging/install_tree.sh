#!/usr/bin/env bash
# Installs the build tree into PREFIX with `cmake --install` and checks the layout: programs,
# library, headers, CMake package, nodecomm.pc, systemd unit (ExecStart= in PREFIX),
# libmlsl with its headers, mlsl.pc and CMake package (when the build has NODECOMM_MLSL),
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
# libmlsl (the MLSL-compatible API, mlsl/install.cmake) when the build has it: beside
# libnodecomm, which it finds through RUNPATH $ORIGIN; its headers, mlsl.pc and CMake package.
if grep -q '^NODECOMM_MLSL:BOOL=ON' "$BUILD/CMakeCache.txt"; then
  for f in include/mlsl.hpp include/mlsl.h share/doc/nodecomm/MLSL.md; do
    [ -e "$PREFIX/$f" ] && pass "installed $f" || fail "missing $f"
  done
  for f in libmlsl.so libmlsl.so.1 pkgconfig/mlsl.pc cmake/mlsl/mlslConfig.cmake \
           cmake/mlsl/mlslConfigVersion.cmake cmake/mlsl/mlslTargets.cmake; do
    [ -e "$LIBDIR/$f" ] && pass "installed ${LIBDIR#"$PREFIX"/}/$f" || fail "missing $LIBDIR/$f"
  done
  dyn=$(readelf -d "$LIBDIR/libmlsl.so.1" 2>&1)
  printf '%s\n' "$dyn" | grep -q 'SONAME.*\[libmlsl\.so\.1\]' && printf '%s\n' "$dyn" | grep -q 'R.*PATH.*\[\$ORIGIN\]$' &&
    pass "libmlsl.so.1: SONAME libmlsl.so.1, RUNPATH \$ORIGIN" || fail "libmlsl.so.1 dynamic section: $dyn"
  ldd "$LIBDIR/libmlsl.so.1" | grep -q "libnodecomm.so.0 => $PREFIX/" &&
    pass "libmlsl finds the installed libnodecomm" || fail "libmlsl: $(ldd "$LIBDIR/libmlsl.so.1" | grep nodecomm)"
  grep -qx "prefix=$PREFIX" "$LIBDIR/pkgconfig/mlsl.pc" && pass "mlsl.pc names the prefix" ||
    fail "mlsl.pc: $(cat "$LIBDIR/pkgconfig/mlsl.pc")"
  grep -rq "$(cd "$BUILD" && pwd)\|/work/" "$LIBDIR/cmake/mlsl" && fail "the mlsl CMake package names build paths" ||
    pass "the mlsl CMake package is relocatable"
  # mlsl.pc and the Python module's _libpath.py name the prefix (which may lie in the build
  # tree, as the tests' does), and nothing else of the build.
  pymod=$(find "$PREFIX" -path '*/mlsl/__init__.py' | head -1)
  [ -n "$pymod" ] && pass "installed the Python module mlsl" || fail "no Python module mlsl under $PREFIX"
  cat "$LIBDIR/pkgconfig/mlsl.pc" ${pymod:+"$(dirname "$pymod")"/*.py} | sed "s#$PREFIX##g" |
    grep -q "$(cd "$BUILD" && pwd)\|/work/" && fail "mlsl.pc or the Python module mlsl names build paths" ||
    pass "mlsl.pc and the Python module mlsl name no build path"
fi
echo "install_tree: $failures failure(s)"
[ "$failures" -eq 0 ]
