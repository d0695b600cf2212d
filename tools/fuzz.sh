#!/usr/bin/env bash
# Builds the fuzz targets (tests/fuzz) with clang, libFuzzer, ASan and UBSan (a clang ASan build
# of the project: NODECOMM_FUZZ), runs one for a bounded time, and prints how many inputs ran.
#   bash tools/fuzz.sh                 # the descriptor and ring decoder, 60 s, from the
#                                      # checked-in seed corpus tests/fuzz/corpus
#   bash tools/fuzz.sh 600             # longer
#   bash tools/fuzz.sh 60 session      # the daemon's ClientSession over a segment whose header,
#                                      # doorbells and ring lines the client scribbles, from
#                                      # tests/fuzz/corpus-session
#   bash tools/fuzz.sh 60 crossrank    # one operation as all of its ranks (1-4, on 1-4 nodes)
#                                      # submitted it: intake, matching and the cross-node
#                                      # check, from tests/fuzz/corpus-crossrank
# Environment: FUZZ_BUILD_DIR (default build-fuzz; an existing clang ASan build configured with
# NODECOMM_FUZZ=ON is used as it is), FUZZ_CXX (default clang++), FUZZ_JOBS
# (build parallelism, default 2), FUZZ_ARGS (extra libFuzzer flags).
# Exit status: 0 if no input crashed, hung or tripped a sanitizer or an oracle; 1 if one did
# (the reproducer is under $FUZZ_BUILD_DIR/artifacts/, replay it with
# `$FUZZ_BUILD_DIR/bin/nodecomm_<target>_fuzz FILE`); 77 if clang or libFuzzer is missing (a CTest
# skip; tools/install-deps.sh installs both).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-${FUZZ_SECONDS:-60}}
target=${2:-decoder}
case "$target" in
  decoder) seeds=tests/fuzz/corpus ;;
  session) seeds=tests/fuzz/corpus-session ;;
  crossrank) seeds=tests/fuzz/corpus-crossrank ;;
  *) echo "fuzz: unknown target '$target' (decoder, session or crossrank)" >&2; exit 2 ;;
esac
build=${FUZZ_BUILD_DIR:-build-fuzz}
cxx=${FUZZ_CXX:-clang++}

if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "fuzz: $cxx not found (bash tools/install-deps.sh installs clang); skipping" >&2
  exit 77
fi
probe_dir=$(mktemp -d)
trap 'rm -rf "$probe_dir"' EXIT
printf '#include <cstdint>\n#include <cstddef>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n' \
  > "$probe_dir/probe.cpp"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "$probe_dir/probe.cpp" -o "$probe_dir/probe" \
  >"$probe_dir/probe.log" 2>&1; then
  echo "fuzz: $cxx cannot link libFuzzer (-fsanitize=fuzzer; Debian: libclang-rt-dev); skipping" >&2
  cat "$probe_dir/probe.log" >&2
  exit 77
fi

if [ ! -f "$build/CMakeCache.txt" ]; then
  # -O1 (not tools/sanitize.sh's -O0): inputs per second matter here. Highway's kernels for
  # AVX2 and the baseline only, as tools/sanitize.sh --ci.
  command -v ninja >/dev/null 2>&1 && export CMAKE_GENERATOR=${CMAKE_GENERATOR:-Ninja}
  cmake -S . -B "$build" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="${cxx/clang++/clang}" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" \
    -DBUILD_TESTING=ON -DNODECOMM_SANITIZE=address,undefined -DNODECOMM_FUZZ=ON \
    -DCMAKE_CXX_FLAGS=-DHWY_DISABLED_TARGETS=6528 >/dev/null
fi
grep -q '^NODECOMM_FUZZ:BOOL=ON' "$build/CMakeCache.txt" ||
  { echo "fuzz: $build is not a clang ASan build with NODECOMM_FUZZ=ON" >&2; exit 2; }
cmake --build "$build" -j "${FUZZ_JOBS:-2}" --target "nodecomm_${target}_fuzz" >/dev/null

# New inputs go to the build directory's corpus; the checked-in seeds are only read.
work="$build/corpus-$target"
artifacts="$build/artifacts"
log="$build/fuzz-$target.log"
mkdir -p "$work" "$artifacts"
echo "fuzz: running nodecomm_${target}_fuzz for ${seconds} s (log: $log)"
start=$(date +%s)
set +e
# shellcheck disable=SC2086  # FUZZ_ARGS is a list of flags
ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
  "$build/bin/nodecomm_${target}_fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -max_len=4096 -print_final_stats=1 -artifact_prefix="$artifacts/" ${FUZZ_ARGS:-} \
  "$work" "$seeds" >"$log" 2>&1
rc=$?
set -e
elapsed=$(($(date +%s) - start))
executed=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)
rate=$(sed -n 's/^stat::average_exec_per_sec: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)
corpus=$(find "$work" -type f | wc -l)
if [ "$rc" -ne 0 ]; then
  tail -n 60 "$log" >&2
  echo "fuzz: FAILED after ${elapsed} s (libFuzzer exit $rc, ${executed:-?} inputs ran); reproducer:" \
    "$(find "$artifacts" -maxdepth 1 -type f -printf '%T@ %p\n' | sort -n | tail -n 1 | cut -d' ' -f2-)" >&2
  exit 1
fi
echo "fuzz: ${executed:-?} inputs in ${elapsed} s (${rate:-?}/s), ${corpus} corpus entries, no crashes, hangs or sanitizer reports"
