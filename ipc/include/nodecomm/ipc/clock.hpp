#pragma once

#include <cstdint>
#include <ctime>

namespace nodecomm::ipc {

inline uint64_t clock_ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

inline uint64_t monotonic_ns() {
  return clock_ns(CLOCK_MONOTONIC);
}

// The monotonic clock as of the last timer tick (a few ms behind at most): for deadlines and
// rate limits of a second or more checked in spin loops, where CLOCK_MONOTONIC's 20-40 ns per
// read (on virtual machines) would slow every iteration. Never behind an earlier reading of
// itself; compare it only with its own readings.
inline uint64_t coarse_monotonic_ns() {
  return clock_ns(CLOCK_MONOTONIC_COARSE);
}

}  // namespace nodecomm::ipc
