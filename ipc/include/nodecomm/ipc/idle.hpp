// Idle strategy for polling loops: spin, then yield, then park.
//
// Spinning gives the lowest latency while work is flowing; yielding lets another runnable
// thread (a training process on an oversubscribed core) run; parking gives the core away
// until a wake-up or a deadline. Every loop reports how much work it did; any work resets
// the strategy to spinning.
#pragma once

#include <cstdint>
#include <string>

namespace nodecomm::ipc {

struct IdleConfig {
  uint32_t spins = 2000;          // busy iterations before yielding
  uint32_t yields = 200;          // sched_yield calls before parking
  uint64_t min_park_ns = 20'000;  // first park; doubles each time up to max_park_ns
  uint64_t max_park_ns = 1'000'000;

  // For a process that shares `usable_cpus()` with `runnable` polling processes (itself
  // included). When they outnumber the CPUs, a spinner holds a CPU that the process it waits
  // for needs, so spinning is cut to a few iterations and parks stay short.
  static IdleConfig for_load(unsigned runnable);
  // The load-shaped config for a mode: "auto" (for_load), "spin" (a dedicated core: the
  // defaults) or "backoff" (a shared machine, whatever the local count says: simulated
  // clusters run several daemons and all their ranks on the same cores). Throws
  // std::invalid_argument for another mode.
  static IdleConfig for_mode(const std::string& mode, unsigned runnable);
};

// CPUs this process may run on (its affinity mask).
unsigned usable_cpus();

class IdleStrategy {
 public:
  enum class Phase { kSpin, kYield, kPark };

  explicit IdleStrategy(IdleConfig config = {}) : config_(config) {}

  // Advances the strategy after a loop that did `work` units. Returns the phase the caller
  // should apply; for kPark, park_ns() is how long.
  Phase next(uint64_t work);
  uint64_t park_ns() const { return park_ns_; }
  void reset();
  // Applies the phase itself: pause instruction, sched_yield, or nanosleep(park_ns).
  void idle(uint64_t work);
  const IdleConfig& config() const { return config_; }

 private:
  IdleConfig config_;
  uint64_t spins_ = 0;
  uint64_t yields_ = 0;
  uint64_t park_ns_ = 0;
};

void cpu_relax();

}  // namespace nodecomm::ipc
