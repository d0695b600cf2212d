#!/usr/bin/env bash
# One command: install dependencies, build, and run the demo: a simulated cluster of 2 nodes
# with 2 training ranks each doing real, checked allreduce through nodecommd, and Open MPI
# run directly on the same 4 ranks as the baseline.
#   bash tools/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
BUILD_DIR=${BUILD_DIR:-build}
# Ninja for a new build directory, as tools/test.sh (the two share it).
command -v ninja >/dev/null 2>&1 && export CMAKE_GENERATOR=${CMAKE_GENERATOR:-Ninja}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" --target nodecommd nodecomm-launch nodecomm-bench
BIN=$BUILD_DIR/bin
echo "== nodecomm: 2 nodes x 2 ranks through nodecommd"
"$BIN/nodecomm-launch" --timeout 300 --nodes 2 --ranks-per-node 2 -- \
  "$BIN/nodecomm-bench" --op allreduce --check --min-bytes 8 --max-bytes 16M --factor 4 "$@"
echo
echo "== baseline: Open MPI MPI_Allreduce directly on the same 4 ranks"
MPIRUN_ROOT=()
[ "$(id -u)" -eq 0 ] && MPIRUN_ROOT=(--allow-run-as-root)
mpirun "${MPIRUN_ROOT[@]}" --oversubscribe --bind-to none --timeout 300 -np 4 \
  --mca btl self,vader,tcp "$BIN/nodecomm-bench" --backend mpi --op allreduce --check \
  --min-bytes 8 --max-bytes 16M --factor 4 "$@"
