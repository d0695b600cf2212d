#!/usr/bin/env bash
# A program written for MLSL builds from nodecomm's build tree by hand, the way its users built
# it against Intel's: the compiler, one include directory, -lmlsl. Nothing names nodecomm:
#   c++ -std=c++98 PROG.cpp -I BUILD/include -L BUILD/lib -lmlsl -Wl,-rpath,BUILD/lib
# (and -std=c++20), and its C twin with `cc -std=c89 -pedantic` over mlsl.h. Each executable
# needs libmlsl.so.1 and not libnodecomm (libmlsl brings it), and runs under the build tree's
# nodecomm-launch on 2 nodes x 2 ranks.
#   build_by_hand.sh BUILD_DIR SOURCE_DIR
# The C++ program is examples/mlsl/mlsl_train.cpp (run with model parts 2) where it exists,
# else tests/packaging/mlsl_consumer/mlsl_consumer.cpp; the C program is that directory's
# mlsl_consumer.c.
set -u
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$2" && pwd)
T=$(mktemp -d /tmp/mlsl-by-hand.XXXXXX)
trap 'rm -rf "$T"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }
# Nothing from the environment may help the compiler, the linker or the loader.
unset CPATH C_INCLUDE_PATH CPLUS_INCLUDE_PATH LIBRARY_PATH LD_LIBRARY_PATH

if [ -f "$SRC/examples/mlsl/mlsl_train.cpp" ]; then
  CXX_PROG=$SRC/examples/mlsl/mlsl_train.cpp CXX_ARGS=(2)
else
  CXX_PROG=$SRC/tests/packaging/mlsl_consumer/mlsl_consumer.cpp CXX_ARGS=()
fi
C_PROG=$SRC/tests/packaging/mlsl_consumer/mlsl_consumer.c
echo "C++ program: $CXX_PROG ${CXX_ARGS[*]}"

for f in include/mlsl.hpp include/mlsl.h lib/libmlsl.so lib/libmlsl.so.1; do
  [ -e "$BUILD/$f" ] && pass "the build tree has $f" || fail "the build tree has no $f"
done
[ -e "$BUILD/include/nodecomm.h" ] && fail "BUILD/include holds nodecomm.h: the check would not prove the headers stand alone"

# compile NAME COMPILER ARGS...: one program, exactly as a user of MLSL would build it.
compile() {
  local name=$1
  shift
  echo "+ $*"
  if "$@" >"$T/$name.log" 2>&1; then
    pass "$name builds by hand"
    [ -s "$T/$name.log" ] && echo "  (compiler output: $(cat "$T/$name.log"))"
    check_needed "$name"
  else
    fail "$name: $(cat "$T/$name.log")"
  fi
}
check_needed() {
  local needed
  needed=$(readelf -d "$T/$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
  if printf '%s\n' $needed | grep -qx 'libmlsl.so.1' && ! printf '%s\n' $needed | grep -q 'libnodecomm'; then
    pass "$1 needs libmlsl.so.1, not libnodecomm ($needed)"
  else
    fail "$1 NEEDED: $needed"
  fi
}
run_2x2() {
  local name=$1
  shift
  [ -x "$T/$name" ] || return
  local out rc
  out=$("$BUILD/bin/nodecomm-launch" --timeout 120 --nodes 2 --ranks-per-node 2 -- "$T/$name" "$@" 2>&1)
  rc=$?
  if [ "$rc" -eq 0 ] && [ "$(printf '%s\n' "$out" | grep -c 'exited normally')" -eq 4 ]; then
    pass "$name runs on 2x2"
  else
    fail "$name on 2x2: exit $rc: $out"
  fi
}

INC=(-I "$BUILD/include")
LINK=(-L "$BUILD/lib" -lmlsl -Wl,-rpath,"$BUILD/lib")
compile prog_cxx98 c++ -std=c++98 "$CXX_PROG" -o "$T/prog_cxx98" "${INC[@]}" "${LINK[@]}"
compile prog_cxx20 c++ -std=c++20 "$CXX_PROG" -o "$T/prog_cxx20" "${INC[@]}" "${LINK[@]}"
if [ -f "$BUILD/include/mlsl.h" ]; then
  compile prog_c89 cc -std=c89 -pedantic "$C_PROG" -o "$T/prog_c89" "${INC[@]}" "${LINK[@]}"
fi
run_2x2 prog_cxx98 "${CXX_ARGS[@]}"
run_2x2 prog_cxx20 "${CXX_ARGS[@]}"
run_2x2 prog_c89
echo "build_by_hand: $failures failure(s)"
[ "$failures" -eq 0 ]
