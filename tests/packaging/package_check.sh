#!/usr/bin/env bash
# CPack builds the .deb from the build tree (installed under /usr), and the package declares its
# Debian dependencies and holds the right files (libmlsl's too, when the build has it).
#   package_check.sh BUILD_DIR
set -u
BUILD=$1
T=$(mktemp -d /tmp/nc-deb.XXXXXX)
trap 'rm -rf "$T"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }
command -v dpkg-deb >/dev/null || { echo "skip: no dpkg-deb"; exit 77; }

if cpack --config "$BUILD/CPackConfig.cmake" -G DEB -B "$T" >"$T/cpack.log" 2>&1; then
  pass "cpack -G DEB"
else
  fail "cpack: $(cat "$T/cpack.log")"
  exit 1
fi
DEB=$(ls "$T"/nodecomm_*.deb 2>/dev/null | head -1)
[ -n "$DEB" ] && pass "built $(basename "$DEB")" || { fail "no .deb in $T: $(ls "$T")"; exit 1; }
info=$(dpkg-deb -I "$DEB")
depends=$(printf '%s\n' "$info" | sed -n 's/^ Depends: //p')
echo "Depends: $depends"
for dep in openmpi-bin libopenmpi libhwloc libnuma libxxhash libhwy libfmt libstdc++6 libc6; do
  printf '%s\n' "$depends" | grep -q "$dep" && pass "depends on $dep" || fail "no $dep in Depends: $depends"
done
contents=$(dpkg-deb -c "$DEB" | awk '{print $6}')
for f in ./usr/bin/nodecommd ./usr/bin/nodecomm-launch ./usr/bin/nodecomm-bench ./usr/bin/nodecommctl ./usr/include/nodecomm.h \
         ./usr/include/nodecomm.hpp ./usr/lib/systemd/system/nodecommd.service \
         ./usr/lib/systemd/system/nodecomm-rendezvous.service ./usr/lib/sysusers.d/nodecomm.conf \
         ./usr/lib/tmpfiles.d/nodecomm.conf ./etc/nodecomm/nodecommd.conf; do
  printf '%s\n' "$contents" | grep -qx -- "$f" && pass "holds $f" || fail "no $f in the package"
done
printf '%s\n' "$contents" | grep -Eq '^\./usr/lib/(x86_64-linux-gnu/)?libnodecomm\.so\.0' && pass "holds libnodecomm" ||
  fail "no libnodecomm in the package"
printf '%s\n' "$contents" | grep -Eq '/(pkgconfig/nodecomm\.pc|cmake/nodecomm/nodecommConfig\.cmake)$' &&
  pass "holds nodecomm.pc and the CMake package" || fail "no nodecomm.pc / CMake package"
printf '%s\n' "$contents" | grep -q '/nodecomm/__init__\.py$' && pass "holds the Python package" ||
  fail "no Python package in the package"
# libmlsl (mlsl/install.cmake) when the build has it: the library beside libnodecomm, its
# headers, mlsl.pc, CMake package and the Python module, naming no build path.
if grep -q '^NODECOMM_MLSL:BOOL=ON' "$BUILD/CMakeCache.txt"; then
  for f in ./usr/include/mlsl.hpp ./usr/include/mlsl.h ./usr/share/doc/nodecomm/MLSL.md; do
    printf '%s\n' "$contents" | grep -qx -- "$f" && pass "holds $f" || fail "no $f in the package"
  done
  for f in 'libmlsl\.so\.1' 'libmlsl\.so' 'pkgconfig/mlsl\.pc' 'cmake/mlsl/mlslConfig\.cmake' \
           'cmake/mlsl/mlslConfigVersion\.cmake' 'cmake/mlsl/mlslTargets\.cmake'; do
    printf '%s\n' "$contents" | grep -Eq "^\./usr/lib/(x86_64-linux-gnu/)?$f\$" && pass "holds ${f//\\/}" ||
      fail "no ${f//\\/} in the package"
  done
  printf '%s\n' "$contents" | grep -q '/mlsl/__init__\.py$' && pass "holds the Python module mlsl" ||
    fail "no Python module mlsl in the package"
fi
# The torch backend links libtorch: it is installed by `cmake --install`, not packaged.
printf '%s\n' "$contents" | grep -q '_torch_backend' && fail "the .deb holds the torch backend" ||
  pass "no torch backend in the package"
printf '%s\n' "$depends" | grep -q 'libtorch' && fail "the .deb depends on libtorch: $depends" ||
  pass "no dependency on libtorch"
mkdir -p "$T/x" && dpkg-deb -x "$DEB" "$T/x" && dpkg-deb -e "$DEB" "$T/x/DEBIAN"
grep -qx 'ExecStart=/usr/bin/nodecommd' "$T/x/usr/lib/systemd/system/nodecommd.service" &&
  pass "the unit runs /usr/bin/nodecommd" || fail "unit: $(grep ExecStart "$T/x/usr/lib/systemd/system/nodecommd.service")"
grep -q '^prefix=/usr$' "$T"/x/usr/lib/*/pkgconfig/nodecomm.pc "$T"/x/usr/lib/pkgconfig/nodecomm.pc 2>/dev/null &&
  pass "nodecomm.pc names /usr" || fail "nodecomm.pc prefix"
if grep -q '^NODECOMM_MLSL:BOOL=ON' "$BUILD/CMakeCache.txt"; then
  mlsl_files=$(find "$T/x" -name mlsl.pc -o -path '*/cmake/mlsl/*' -o -path '*/mlsl/*.py')
  grep -q '^prefix=/usr$' $(printf '%s\n' "$mlsl_files" | grep 'mlsl\.pc$') 2>/dev/null &&
    pass "mlsl.pc names /usr" || fail "mlsl.pc prefix"
  [ -n "$mlsl_files" ] && grep -lq "$(cd "$BUILD" && pwd)\|/work/" $mlsl_files &&
    fail "build paths in $(grep -l "$(cd "$BUILD" && pwd)\|/work/" $mlsl_files)" ||
    pass "mlsl.pc, the mlsl CMake package and the Python module name no build path"
  readelf -d "$T"/x/usr/lib/*/libmlsl.so.1 "$T"/x/usr/lib/libmlsl.so.1 2>/dev/null | grep -q 'R.*PATH.*\[\$ORIGIN\]$' &&
    pass "libmlsl's RUNPATH is \$ORIGIN" || fail "libmlsl RUNPATH"
fi
grep -qx /etc/nodecomm/nodecommd.conf "$T/x/DEBIAN/conffiles" && pass "the configuration is a conffile" ||
  fail "conffiles: $(cat "$T/x/DEBIAN/conffiles" 2>/dev/null)"
[ -x "$T/x/DEBIAN/postinst" ] && grep -q systemd-sysusers "$T/x/DEBIAN/postinst" && pass "postinst creates the user" ||
  fail "no postinst"
echo "package_check: $failures failure(s)"
[ "$failures" -eq 0 ]
