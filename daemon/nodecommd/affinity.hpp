// CPU pinning with hwloc.
#pragma once

#include <string>

namespace nodecomm::daemon {

// Binds the whole process to the CPUs in `list` (hwloc list syntax, OS indices). Returns an
// empty string on success, else why not (unknown CPUs, outside the allowed set, ...).
std::string pin_to_cores(const std::string& list);

// The default place for a daemon: the last core of the machine's first NUMA domain (all its
// hardware threads), as an hwloc list such as "15" or "7,15"; empty if hwloc cannot tell.
// Training frameworks fill cores from the first one up, so the last core of the domain that
// usually holds the NIC is the least likely to be taken.
std::string default_daemon_cores();

}  // namespace nodecomm::daemon
