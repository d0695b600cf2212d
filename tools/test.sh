#!/usr/bin/env bash
# One command: install dependencies, build, and run every test (unit and integration).
#   bash tools/test.sh            # from the repository root
# Environment: BUILD_DIR (default build), JOBS (build parallelism, default nproc),
# CTEST_ARGS (extra ctest arguments, e.g. "-L unit"), SANITIZERS (0 skips the sanitizer stage).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
BUILD_DIR=${BUILD_DIR:-build}
# hwloc's GL component opens X displays :0, :1, ... in every process that loads a topology
# (mpirun, orted, MPI_Init), resolving a host name for each; on a bare system without
# /etc/hosts each lookup goes to DNS and a lost answer costs 5 s, which made the suite minutes
# longer there. nodecomm-launch and nodecommd set this themselves; the tests that run mpirun
# directly get it from here.
export HWLOC_COMPONENTS=${HWLOC_COMPONENTS:--gl}
# Ninja for a new build directory (an existing one keeps its generator): it compiles a target's
# sources while the libraries below it still build, which make does not.
command -v ninja >/dev/null 2>&1 && export CMAKE_GENERATOR=${CMAKE_GENERATOR:-Ninja}
# A unity build: each target's sources compile in batches, which parse the headers they share
# (GoogleTest, CLI11, fmt, nlohmann-json) once per batch instead of once per file; on 2 cores the
# build takes 150 s instead of 220 s. A developer's own build stays per file (the default).
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=ON -DCMAKE_UNITY_BUILD=ON
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}"
# The full correctness matrix (label "full") is opt-in: ctest -L full. The real-process tests
# labelled "sanitize" run in the sanitizer stage below, under ASan and UBSan, and here only when
# that stage is skipped.
exclude=full
[ "${SANITIZERS:-1}" != 0 ] && exclude='full|sanitize'
# The GoogleTest cases (the test names with a dot): each binary whole, in shards
# (tools/run-gtests.sh), unless CTEST_ARGS picks tests for ctest alone. The engine cases the
# sanitizer stage runs under ASan run there only; every unit case runs here.
gtests=()
if [ -z "${CTEST_ARGS:-}" ]; then
  pass=all
  [ "${SANITIZERS:-1}" != 0 ] && pass=release
  bash tools/run-gtests.sh "$BUILD_DIR" "$pass"
  gtests=(-E '[.]')
fi
cd "$BUILD_DIR"
# Two tests at a time: most wait on processes and sockets, not on the CPU. Those that measure
# time or kill processes against deadlines are RUN_SERIAL (tests/CMakeLists.txt).
ctest --output-on-failure --timeout 400 -LE "$exclude" "${gtests[@]}" -j "${CTEST_JOBS:-2}" \
  ${CTEST_ARGS:-}
cd ..
# Sanitizers: the unit and engine tests, the real-process tests labelled sanitize, the fuzzers
# and a soak under ASan+UBSan, and the ring tests under TSan (tools/sanitize.sh --ci).
# SANITIZERS=0 skips them, e.g. for a quick local run.
if [ "${SANITIZERS:-1}" != 0 ]; then
  bash tools/sanitize.sh --ci
fi
