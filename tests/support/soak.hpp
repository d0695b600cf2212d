// nodecomm-bench --soak SECONDS: a long mixed run that checks every result. Each iteration
// draws a collective, dtype, op, root, odd-ish count, communicator (the world or a split
// half), in place or out of place, arena or heap buffers, from a generator every rank seeds
// alike; some iterations post a batch of allreduces before waiting. The daemon's resident
// memory is sampled after a warm-up and at the end, so that a leak shows as growth.
#pragma once

#include <cstdint>
#include <string>

namespace nodecomm::bench {

// nodecomm-bench's transport interface (tools/bench/backend.hpp): nodecomm or MPI.
class Backend;

struct SoakConfig {
  double seconds = 0;
  uint64_t seed = 1;
  uint64_t max_bytes = uint64_t{2} << 20;  // largest buffer of one call
  std::string json_path;                   // one JSON summary line per rank 0, or empty
  bool memory_check = true;  // false: report RSS growth but do not fail on it (sanitizers)
  std::string stop_file;     // the soak ends early once this file exists (empty: never)
};

// Arena the soak needs for its largest calls and batches.
uint64_t soak_arena_bytes(const SoakConfig& config);

// Returns 0 when every result was exact and the daemon's memory stayed flat, 1 otherwise.
// Throws BackendError when an operation fails.
int run_soak(Backend& backend, const SoakConfig& config);

}  // namespace nodecomm::bench
