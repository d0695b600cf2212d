#!/usr/bin/env bash
# The GoogleTest binaries, each run whole in shards, four processes at once: what ctest does
# with one process per test case (about 480 of them) costs a process start each, which is most
# of their time. The test command (tools/test.sh) and its sanitizer stage (tools/sanitize.sh)
# run them this way; `ctest -R NAME` still runs any one case on its own.
#   run-gtests.sh BUILD_DIR all|release|sanitizer
#     all        every case (the Release pass when the sanitizer stage is skipped)
#     release    every unit case, and the engine cases the sanitizer stage leaves out
#     sanitizer  every case but RELEASE_ONLY
# Each shard's output is in BUILD_DIR/Testing/<binary>.<shard>.log; a failing shard's is
# printed. Exit 1 when a shard fails or runs past 600 s.
set -uo pipefail
BUILD=${1:?usage: run-gtests.sh BUILD_DIR all|release|sanitizer}
PASS=${2:?usage: run-gtests.sh BUILD_DIR all|release|sanitizer}
# The cases that run in the Release pass only, so that each engine case runs in one pass: the
# 5-node engine layouts, the algorithm loops on 5 nodes or more (those on 2-4 nodes run under
# ASan too; the 5-node ones took 26 s there), EngineRaces' 60 tries of one race, and three long
# loops whose first rounds are all ASan sees anew (the error-feedback accuracy over many
# rounds, 26 s under ASan; a client inventing names up to the byte limit, 19 s).
RELEASE_ONLY='*/5x1_*:*/nodes5:*/nodes6:*/nodes7:*/nodes8:*/nodes9:EngineRaces.*'
RELEASE_ONLY+=':WireCodec.ErrorFeedbackKeepsAccumulatedErrorBounded'
RELEASE_ONLY+=':WireCodec.ErrorFeedbackFixesBiasedRounding'
RELEASE_ONLY+=':FeedbackState.ByteLimitHoldsForEveryNameAClientInvents'
case $PASS in
  all) FILTER='*' ENGINE_FILTER='*' ;;
  release) FILTER='*' ENGINE_FILTER=$RELEASE_ONLY ;;
  sanitizer) FILTER=-$RELEASE_ONLY ENGINE_FILTER=-$RELEASE_ONLY ;;
  *) echo "run-gtests.sh: pass '$PASS' is not all, release or sanitizer" >&2; exit 2 ;;
esac
BINARIES=(nodecomm_unit_tests nodecomm_engine_tests nodecomm_c_api_tests nodecomm_utility_tests)
pids=()
logs=()
mkdir -p "$BUILD/Testing"
for bin in "${BINARIES[@]}"; do
  shards=1
  filter=$FILTER
  case $bin in nodecomm_unit_tests | nodecomm_engine_tests) shards=2 ;; esac
  [ "$bin" = nodecomm_engine_tests ] && filter=$ENGINE_FILTER
  for ((shard = 0; shard < shards; ++shard)); do
    log=$BUILD/Testing/$bin.$shard.log
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$shard GTEST_FILTER=$filter \
      timeout 600 "$BUILD/bin/$bin" >"$log" 2>&1 &
    pids+=("$!")
    logs+=("$log")
  done
done
failed=0
for i in "${!pids[@]}"; do
  if wait "${pids[$i]}"; then
    grep -a '^\[  PASSED  \]' "${logs[$i]}" | sed "s|^|${logs[$i]##*/}: |"
  else
    echo "FAILED (exit $?): ${logs[$i]}"
    cat "${logs[$i]}"
    failed=1
  fi
done
exit "$failed"
