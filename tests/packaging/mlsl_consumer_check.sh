#!/usr/bin/env bash
# A program written for MLSL, outside the tree, builds against the installed nodecomm in PREFIX
# through the mlsl CMake package (find_package(mlsl 1.0) -> mlsl::mlsl) and through
# `pkg-config --cflags --libs mlsl`, loads libmlsl and libnodecomm from PREFIX only, and runs
# under the installed nodecomm-launch on 2 nodes x 2 ranks. The installed Python module `mlsl`
# loads the installed libmlsl.
#   mlsl_consumer_check.sh PREFIX SOURCE_DIR [PYTHON PYTHON_DIR]
# SOURCE_DIR is the nodecomm checkout: the C++ program is examples/mlsl/mlsl_train.cpp (run with
# model parts 2) where it exists, else tests/packaging/mlsl_consumer/mlsl_consumer.cpp; the C
# program is tests/packaging/mlsl_consumer/mlsl_consumer.c. PYTHON_DIR: where the Python
# packages are installed under PREFIX (relative); without it the Python check is skipped.
set -u
PREFIX=$1
SRC=$2
PYTHON=${3:-}
PYDIR=${4:-}
T=$(mktemp -d /tmp/mlsl-consumer.XXXXXX)
trap 'rm -rf "$T"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }
# Nothing from the build tree or the environment may help.
unset CMAKE_PREFIX_PATH PKG_CONFIG_PATH LD_LIBRARY_PATH CPATH C_INCLUDE_PATH CPLUS_INCLUDE_PATH \
      LIBRARY_PATH PYTHONPATH

CONSUMER=$SRC/tests/packaging/mlsl_consumer
if [ -f "$SRC/examples/mlsl/mlsl_train.cpp" ]; then
  CXX_PROG=$SRC/examples/mlsl/mlsl_train.cpp CXX_ARGS=(2)
else
  CXX_PROG=$CONSUMER/mlsl_consumer.cpp CXX_ARGS=()
fi
echo "C++ program: $CXX_PROG ${CXX_ARGS[*]}"
PC=$(find "$PREFIX" -name mlsl.pc | head -1)
[ -n "$PC" ] && pass "installed $(realpath --relative-to="$PREFIX" "$PC")" || { fail "no mlsl.pc under $PREFIX"; exit 1; }

if cmake -S "$CONSUMER" -B "$T/cmake" -DCMAKE_PREFIX_PATH="$PREFIX" -DCMAKE_BUILD_TYPE=Release \
         -DMLSL_CONSUMER_SOURCE="$CXX_PROG" >"$T/cmake.log" 2>&1 &&
   cmake --build "$T/cmake" -j 2 >>"$T/cmake.log" 2>&1; then
  pass "consumer builds with find_package(mlsl 1.0) and mlsl::mlsl"
else
  fail "consumer through CMake: $(cat "$T/cmake.log")"
fi
PKG_CONFIG_PATH=$(dirname "$PC")
export PKG_CONFIG_PATH
if flags=$(pkg-config --cflags --libs mlsl) && libdir=$(pkg-config --variable=libdir mlsl) &&
   version=$(pkg-config --modversion mlsl); then
  echo "pkg-config --cflags --libs mlsl: $flags"
  [ "$version" = 1.0.0 ] && pass "mlsl.pc: version 1.0.0" || fail "mlsl.pc version $version"
  grep -qx "prefix=$PREFIX" "$PC" && pass "mlsl.pc names the prefix" || fail "mlsl.pc: $(cat "$PC")"
  if c++ -std=c++98 -O2 "$CXX_PROG" -o "$T/mlsl_pc_cpp" $flags -Wl,-rpath,"$libdir" 2>"$T/pc.log" &&
     cc -std=c99 -O2 "$CONSUMER/mlsl_consumer.c" -o "$T/mlsl_pc_c" $flags -Wl,-rpath,"$libdir" 2>>"$T/pc.log"; then
    pass "consumer builds with pkg-config (mlsl $version)"
  else
    fail "consumer through pkg-config: $(cat "$T/pc.log")"
  fi
else
  fail "pkg-config mlsl: $(pkg-config --print-errors --libs mlsl 2>&1)"
fi
unset PKG_CONFIG_PATH

for prog in "$T/cmake/mlsl_consumer_cpp" "$T/cmake/mlsl_consumer_c" "$T/mlsl_pc_cpp" "$T/mlsl_pc_c"; do
  [ -x "$prog" ] || continue
  name=$(basename "$prog")
  args=()
  case "$name" in *_cpp) args=("${CXX_ARGS[@]}") ;; esac
  # The loader finds both libraries in PREFIX: libmlsl through the program's RUNPATH,
  # libnodecomm through libmlsl's ($ORIGIN).
  libs=$(ldd "$prog" | grep -E 'lib(mlsl|nodecomm)\.so')
  if printf '%s\n' "$libs" | grep -q "libmlsl.so.1 => $PREFIX/" &&
     printf '%s\n' "$libs" | grep -q "libnodecomm.so.0 => $PREFIX/"; then
    pass "$name loads libmlsl and libnodecomm from the prefix"
  else
    fail "$name loads: $libs"
  fi
  out=$("$PREFIX/bin/nodecomm-launch" --nodes 2 --ranks-per-node 2 --timeout 120 -- "$prog" "${args[@]}" 2>&1); rc=$?
  if [ "$rc" -eq 0 ] && [ "$(printf '%s\n' "$out" | grep -c 'exited normally')" -eq 4 ]; then
    pass "$name runs on 2x2 under the installed launcher"
  else
    fail "$name on 2x2 under the installed launcher: exit $rc: $out"
  fi
done

# The installed Python module loads the installed library (no daemon needed to load it).
if [ -z "$PYDIR" ] || [ -z "$PYTHON" ]; then
  echo "skip: the Python module (no interpreter or no module install directory given)"
elif [ ! -f "$PREFIX/$PYDIR/mlsl/__init__.py" ]; then
  fail "no Python module at $PREFIX/$PYDIR/mlsl"
else
  out=$(PYTHONPATH="$PREFIX/$PYDIR" "$PYTHON" - "$PREFIX/" <<'EOF' 2>&1
import sys
import mlsl
prefix = sys.argv[1]
env = mlsl.MLSL()
version = env.get_version()
libs = sorted({line.split()[-1] for line in open("/proc/self/maps")
               if "libmlsl.so" in line or "libnodecomm.so" in line})
print("module:", mlsl.__file__)
print("version:", version)
print("libraries:", libs)
ok = (mlsl.__file__.startswith(prefix) and version == 65536 and len(libs) == 2 and
      all(p.startswith(prefix) for p in libs))
sys.exit(0 if ok else 1)
EOF
  ); rc=$?
  echo "$out"
  [ "$rc" -eq 0 ] && pass "the installed Python module loads the installed libmlsl" ||
    fail "Python module: exit $rc"
fi
echo "mlsl_consumer_check: $failures failure(s)"
[ "$failures" -eq 0 ]
