#pragma once

#include <cstdint>
#include <ctime>

namespace nodecomm::ipc {

inline uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace nodecomm::ipc
