#!/usr/bin/env bash
# Sanitizer runs: the tests (real daemons and clients) under ASan+UBSan, and the ring tests
# under TSan. (The fuzzers have their own build: tools/fuzz.sh.)
#   bash tools/sanitize.sh          # every test under ASan+UBSan (slow)
#   bash tools/sanitize.sh --ci     # what the test command runs (tools/test.sh): the unit and
#                                   # engine tests, the real-process tests labelled sanitize,
#                                   # a 10 s soak, and the ring tests under TSan
# Environment: JOBS (build parallelism, default nproc), SAN_CXX (default clang++: its -O0 build
# takes two thirds of g++'s time, and its UBSan checks more, such as enum values; g++ works).
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-all}
ROOT=$PWD
[ "$MODE" = --ci ] || bash tools/install-deps.sh
command -v ninja >/dev/null 2>&1 && export CMAKE_GENERATOR=${CMAKE_GENERATOR:-Ninja}
SAN_CXX=${SAN_CXX:-clang++}
SAN_CC=${SAN_CXX/clang++/clang}
SAN_CC=${SAN_CC/g++/gcc}

# -O0 halves the sanitized build against -O1 and costs the tests little: they wait on
# processes and sockets. The kernels and their tests' reference loops stay at -O1
# (NODECOMM_HOT_OPT). -g1 is enough for stacks with lines. Unity batches as in tools/test.sh.
SAN_FLAGS=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O0 -g1"
           "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O0 -g1" -DNODECOMM_HOT_OPT=-O1 -DBUILD_TESTING=ON
           -DCMAKE_CXX_COMPILER="$SAN_CXX" -DCMAKE_C_COMPILER="$SAN_CC" -DCMAKE_UNITY_BUILD=ON)
# What --ci builds: the programs behind the unit and engine tests and behind label sanitize.
CI_TARGETS=(nodecommd nodecomm-launch nodecomm nodecomm_unit_tests nodecomm_c_api_tests
            nodecomm_engine_tests nodecomm_utility_tests ctl_counters_test
            allreduce_check collectives_check cpp_api_check schedule_check error_paths
            hostile_client hostile_segments hostile_control hostile_counts nodecomm-bench
            fuzz_decoder_replay fuzz_session_replay fuzz_crossrank_replay service_groups_check)

# CI compiles Highway's kernels for AVX2 and the baseline only (HWY_DISABLED_TARGETS: SSSE3,
# SSE4, AVX3 and AVX3_DL, 2^12 + 2^11 + 2^8 + 2^7), which halves those files' sanitized build;
# the Release unit tests check every target bit for bit, and the full mode (no --ci)
# sanitizes every target.
HWY_FLAGS=""
[ "$MODE" = --ci ] && HWY_FLAGS="-DHWY_DISABLED_TARGETS=6528"
# --ci leaves Gloo out of the sanitized bench: it is a baseline, and no test --ci runs uses it.
GLOO_FLAGS=(-DCMAKE_DISABLE_FIND_PACKAGE_Gloo=OFF)
[ "$MODE" = --ci ] && GLOO_FLAGS=(-DCMAKE_DISABLE_FIND_PACKAGE_Gloo=ON)
cmake -S . -B build-asan "${SAN_FLAGS[@]}" -DNODECOMM_SANITIZE=address,undefined \
  "-DCMAKE_CXX_FLAGS=$HWY_FLAGS" "${GLOO_FLAGS[@]}" >/dev/null
if [ "$MODE" = --ci ]; then
  cmake --build build-asan -j "${JOBS:-$(nproc)}" --target "${CI_TARGETS[@]}"
else
  cmake --build build-asan -j "${JOBS:-$(nproc)}"
fi
# Open MPI keeps allocations for the process lifetime and unloads its components at
# MPI_Finalize; keep them loaded so its stacks symbolize, and suppress its leaks by library.
export OMPI_MCA_mca_base_component_disable_dlclose=1
export ASAN_OPTIONS=fast_unwind_on_malloc=0:detect_leaks=1
export LSAN_OPTIONS=suppressions=$ROOT/tests/sanitizers/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The GoogleTest binaries run whole, all but the cases left to the Release pass
# (RELEASE_ONLY in tools/run-gtests.sh).
if [ "$MODE" = --ci ]; then
  bash tools/run-gtests.sh build-asan sanitizer
  # The other unit tests: scripts and corpus replays (GoogleTest cases are the names with a dot).
  (cd build-asan && ctest --output-on-failure --timeout 400 -L 'unit|engine' -E '[.]' -j 2)
  # Four at a time: these mostly wait on processes and sockets (about 1.2 cores busy at -j4),
  # and those with deadlines are RUN_SERIAL, alone whatever -j says.
  (cd build-asan && ctest --output-on-failure --timeout 400 -L sanitize -LE full -j 4)
  # Every result checked; leaks are LeakSanitizer's to find at exit, since ASan's quarantine
  # makes the daemons' RSS grow by design.
  echo "== soak under ASan+UBSan: 10 s on 2x2"
  build-asan/bin/nodecomm-launch --timeout 120 --nodes 2 --ranks-per-node 2 -- \
    build-asan/bin/nodecomm-bench --soak 10 --soak-no-memory-check 2>&1 | grep -v ' info: '
else
  (cd build-asan && ctest --output-on-failure --timeout 600 -LE 'full|python')
fi

# The rings' single-writer positions under TSan: threads and processes hammering one ring.
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" \
  -DBUILD_TESTING=ON -DNODECOMM_SANITIZE=thread >/dev/null
cmake --build build-tsan -j "${JOBS:-$(nproc)}" --target nodecomm_ring_tests
TSAN_OPTIONS=halt_on_error=1 build-tsan/bin/nodecomm_ring_tests
