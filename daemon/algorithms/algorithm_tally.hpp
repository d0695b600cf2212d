// Tallies of the inter-node algorithms: process-wide statistics that the counters publisher
// (observe/) reads in its housekeeping pass, so that the algorithms need no path upward.
#pragma once

#include <atomic>
#include <cstdint>

namespace nodecomm::daemon {

// relaxed atomics: independent statistics, read by the housekeeping pass.
struct AlgorithmTally {
  std::atomic<uint64_t> ring_allreduces{0};
  std::atomic<uint64_t> ring_slices{0};
  std::atomic<uint64_t> rd_allreduces{0};
  void count_ring(uint64_t slices) {
    ring_allreduces.fetch_add(1, std::memory_order_relaxed);  // relaxed: see above
    ring_slices.fetch_add(slices, std::memory_order_relaxed);
  }
  void count_rd() { rd_allreduces.fetch_add(1, std::memory_order_relaxed); }
};
AlgorithmTally& algorithm_tally();

}  // namespace nodecomm::daemon
