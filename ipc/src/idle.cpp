#include "nodecomm/ipc/idle.hpp"

#include <sched.h>

#include <algorithm>
#include <ctime>
#include <stdexcept>

namespace nodecomm::ipc {

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

unsigned usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  const int n = CPU_COUNT(&set);
  return n > 0 ? static_cast<unsigned>(n) : 1;
}

IdleConfig IdleConfig::for_load(unsigned runnable) {
  IdleConfig c;
  if (runnable > usable_cpus()) {
    c.spins = 50;
    c.yields = 20;
    c.min_park_ns = 5'000;
    c.max_park_ns = 100'000;
  }
  return c;
}

IdleConfig IdleConfig::for_mode(const std::string& mode, unsigned runnable) {
  if (mode == "auto") return for_load(runnable);
  if (mode == "spin") return IdleConfig{};
  if (mode == "backoff") return for_load(~0U);
  throw std::invalid_argument("idle mode '" + mode + "' is not auto, spin or backoff");
}

void IdleStrategy::reset() {
  spins_ = 0;
  yields_ = 0;
  park_ns_ = 0;
}

IdleStrategy::Phase IdleStrategy::next(uint64_t work) {
  if (work > 0) {
    reset();
    return Phase::kSpin;
  }
  if (spins_ < config_.spins) {
    ++spins_;
    return Phase::kSpin;
  }
  if (yields_ < config_.yields) {
    ++yields_;
    return Phase::kYield;
  }
  park_ns_ = park_ns_ == 0 ? config_.min_park_ns : std::min(park_ns_ * 2, config_.max_park_ns);
  return Phase::kPark;
}

void IdleStrategy::idle(uint64_t work) {
  switch (next(work)) {
    case Phase::kSpin:
      cpu_relax();
      break;
    case Phase::kYield:
      sched_yield();
      break;
    case Phase::kPark: {
      timespec ts{static_cast<time_t>(park_ns_ / 1000000000ULL),
                  static_cast<long>(park_ns_ % 1000000000ULL)};
      nanosleep(&ts, nullptr);
      break;
    }
  }
}

}  // namespace nodecomm::ipc
