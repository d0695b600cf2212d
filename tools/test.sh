#!/usr/bin/env bash
# One command: install dependencies, build, and run every test (unit and integration).
#   bash tools/test.sh            # from the repository root
# Environment: BUILD_DIR (default build), JOBS (build parallelism, default nproc),
# CTEST_ARGS (extra ctest arguments, e.g. "-L unit"), SANITIZERS (0 skips the sanitizer stage).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=ON
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}"
# Integration tests start several daemons and ranks each; on small machines they run one at a
# time so none starves another.
cd "$BUILD_DIR"
# The full correctness matrix (label "full") is opt-in: ctest -L full.
# Two tests at a time: most wait on processes and sockets, not on the CPU. Those that measure
# time or kill processes against deadlines are RUN_SERIAL (tests/CMakeLists.txt).
ctest --output-on-failure --timeout 400 -LE full -j "${CTEST_JOBS:-2}" ${CTEST_ARGS:-}
cd ..
# Sanitizers: the unit tests, the integration tests that cover the daemon's paths and a soak
# under ASan+UBSan, and the ring tests under TSan (tools/sanitize.sh --ci). SANITIZERS=0
# skips them, e.g. for a quick local run.
if [ "${SANITIZERS:-1}" != 0 ]; then
  bash tools/sanitize.sh --ci
fi
