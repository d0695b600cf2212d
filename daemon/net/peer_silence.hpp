// How long a peer daemon has been silent, as far as this daemon could have heard it. A daemon
// declares a peer lost after `--peer-timeout-sec` without a heartbeat; but time during which
// this daemon itself did not run its checks (descheduled for seconds on a starved host,
// stopped, or a host or VM that paused as a whole) is not the peer's silence: the peer may have
// been paused too, and its heartbeats of that time were never sent. Counting it made every
// daemon that woke first from a host-wide pause declare the others lost before they had run
// (CI, 2026-12-06: two jobs lost a node each at the same moment). Transport-neutral, so the
// rule is tested without MPI.
#pragma once

#include <cstdint>

namespace nodecomm::daemon {

class PeerSilenceClock {
 public:
  // Called at every check. Returns how far every peer's last-heard time moves forward: the
  // part of the gap since the previous check beyond `stall_ns`, 0 for a daemon that kept
  // checking. A peer that really died is still found one timeout of observed time later.
  uint64_t unobserved(uint64_t now_ns, uint64_t stall_ns) {
    const uint64_t gap =
        last_check_ns_ != 0 && now_ns > last_check_ns_ ? now_ns - last_check_ns_ : 0;
    last_check_ns_ = now_ns;
    return gap > stall_ns ? gap - stall_ns : 0;
  }

 private:
  uint64_t last_check_ns_ = 0;
};

// The last-heard time moved by `unobserved`, never past `now_ns`.
inline uint64_t forgive_unobserved(uint64_t last_heard_ns, uint64_t unobserved_ns,
                                   uint64_t now_ns) {
  const uint64_t moved = last_heard_ns + unobserved_ns;
  return moved < now_ns ? moved : now_ns;
}

}  // namespace nodecomm::daemon
