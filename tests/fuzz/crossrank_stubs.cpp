// Only in the libFuzzer build of the cross-rank fuzzer, which compiles the engine's sources
// rather than linking the daemon library (the main build's replay links the real ones).
// The engine's negotiated scheduler (engine_schedule.cpp) agrees on algorithm settings with
// admin.cpp's helpers, which bring the whole daemon with them. It runs only for communicators
// that span nodes, never here: these stand in for them and stop the fuzzer if that changes.
#include <cstdio>
#include <cstdlib>

#include "admin.hpp"

namespace nodecomm::daemon {

AgreedAlgorithm agreed_algorithm(const AlgorithmTuning&) {
  std::fprintf(stderr, "crossrank_fuzz: the negotiated scheduler ran on one node\n");
  std::abort();
}

AlgorithmTuning with_agreed_algorithm(AlgorithmTuning, const AgreedAlgorithm&) {
  std::fprintf(stderr, "crossrank_fuzz: the negotiated scheduler ran on one node\n");
  std::abort();
}

}  // namespace nodecomm::daemon
