#!/usr/bin/env bash
# Sanitizer runs: the tests (real daemons and clients) under ASan+UBSan, and the ring tests
# under TSan.
#   bash tools/sanitize.sh          # every test under ASan+UBSan (slow)
#   bash tools/sanitize.sh --ci     # what CI runs (tools/test.sh): the unit tests and a set of
#                                   # integration tests covering every daemon path, a 20 s
#                                   # soak, and the ring tests under TSan
# Environment: JOBS (build parallelism, default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-all}
ROOT=$PWD
[ "$MODE" = --ci ] || bash tools/install-deps.sh

# -O1 keeps the sanitized build and its runs fast enough for CI; -g1 is enough for stacks.
SAN_FLAGS=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1"
           "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1" -DBUILD_TESTING=ON)
# Integration tests that cover the daemon's paths: every transport algorithm and scheduler
# mode, compression, communicators, the error, kill, limit and hostile-client tests, and a
# nodecommctl session.
# The engine's logic on every layout runs in one process under the sanitizers (label engine:
# several daemons over the in-memory transport); real processes for the MPI transport, the
# client library, failures and hostile clients.
CI_TESTS='^(allreduce_2x2|compress_(bf16|int8)_3x2|collectives_2x2|collectives_registered_2x2|cpp_api_2x2|errors_.*|error_.*|hostile_.*|limits|ctl_live_2x2)$'
CI_TARGETS=(nodecommd nodecomm-launch nodecomm nodecomm_unit_tests nodecomm_c_api_tests nodecomm_engine_tests
            allreduce_check
            collectives_check cpp_api_check schedule_check error_paths
            hostile_client hostile_segments hostile_control hostile_counts nodecomm-bench nodecommctl
            ctl_counters_test fuzz_decoder_replay fuzz_session_replay fuzz_crossrank_replay
            nodecomm_utility_tests)

# CI compiles Highway's kernels for AVX2 and the baseline only (HWY_DISABLED_TARGETS: SSSE3,
# SSE4, AVX3 and AVX3_DL, 2^12 + 2^11 + 2^8 + 2^7), which halves those files' sanitized build;
# the Release unit tests check every target bit for bit, and the full mode (no --ci)
# sanitizes every target.
HWY_FLAGS=""
[ "$MODE" = --ci ] && HWY_FLAGS="-DHWY_DISABLED_TARGETS=6528"
cmake -S . -B build-asan "${SAN_FLAGS[@]}" -DNODECOMM_SANITIZE=address,undefined \
  "-DCMAKE_CXX_FLAGS=$HWY_FLAGS" >/dev/null
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
if [ "$MODE" = --ci ]; then
  (cd build-asan && ctest --output-on-failure --timeout 400 -L 'unit|engine' -j 2)
  (cd build-asan && ctest --output-on-failure --timeout 400 -LE full -R "$CI_TESTS")
  # Every result checked; leaks are LeakSanitizer's to find at exit, since ASan's quarantine
  # makes the daemons' RSS grow by design.
  echo "== soak under ASan+UBSan: 20 s on 2x2"
  build-asan/bin/nodecomm-launch --timeout 120 --nodes 2 --ranks-per-node 2 -- \
    build-asan/bin/nodecomm-bench --soak 20 --soak-no-memory-check 2>&1 | grep -v ' info: '
else
  (cd build-asan && ctest --output-on-failure --timeout 600 -LE 'full|python|fuzz')
fi

# The rings' single-writer positions under TSan: threads and processes hammering one ring.
cmake -S . -B build-tsan "${SAN_FLAGS[@]}" -DNODECOMM_SANITIZE=thread >/dev/null
cmake --build build-tsan -j "${JOBS:-$(nproc)}" --target nodecomm_ring_tests
TSAN_OPTIONS=halt_on_error=1 build-tsan/bin/nodecomm_ring_tests
