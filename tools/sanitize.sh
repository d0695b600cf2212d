#!/usr/bin/env bash
# Sanitizer runs: every test (unit and integration, real daemons and clients) under
# ASan+UBSan, and the ring tests under TSan.
#   bash tools/sanitize.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
ROOT=$PWD

cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNODECOMM_SANITIZE=address,undefined
cmake --build build-asan -j "${JOBS:-$(nproc)}"
# Open MPI keeps allocations for the process lifetime and unloads its components at
# MPI_Finalize; keep them loaded so its stacks symbolize, and suppress its leaks by library.
export OMPI_MCA_mca_base_component_disable_dlclose=1
export ASAN_OPTIONS=fast_unwind_on_malloc=0:detect_leaks=1
export LSAN_OPTIONS=suppressions=$ROOT/tests/sanitizers/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
(cd build-asan && ctest --output-on-failure --timeout 600)

cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNODECOMM_SANITIZE=thread
cmake --build build-tsan -j "${JOBS:-$(nproc)}" --target nodecomm_unit_tests
TSAN_OPTIONS=halt_on_error=1 build-tsan/bin/nodecomm_unit_tests --gtest_filter='Ring.*'
