// Whether this daemon can afford a client's segment before it asks the kernel for the pages.
//
// fallocate on a memfd fails cleanly with ENOMEM only where the kernel has no one to kill:
// under a memory cgroup limit with the OOM killer on (the default), the charge that does not
// fit wakes the cgroup's OOM killer instead, and its victim is the daemon itself (it is the
// process in its cgroup that allocates). So the daemon refuses a segment that its cgroup
// limits (v1 or v2, every level up to the mount's root) or the node's available memory cannot
// hold, with the numbers. A level whose OOM killer is disabled (cgroup v1 oom_kill_disable)
// is left to fallocate, which then reports ENOMEM exactly.
#pragma once

#include <cstdint>
#include <string>

namespace nodecomm::daemon {

// What the daemon keeps free for its own allocations after a segment (staging, heap).
inline constexpr uint64_t kMemoryReserveBytes = 16ULL << 20;

// "" when `bytes` more of shared memory fit; otherwise why not, naming the limit, its usage
// and where it comes from (a cgroup directory, or /proc/meminfo).
std::string memory_shortfall(uint64_t bytes);

}  // namespace nodecomm::daemon
