// CPU pinning with hwloc.
#pragma once

#include <string>

namespace nodecomm::daemon {

// Binds the whole process to the CPUs in `list` (hwloc list syntax, OS indices). Returns an
// empty string on success, else why not (unknown CPUs, outside the allowed set, ...).
std::string pin_to_cores(const std::string& list);

}  // namespace nodecomm::daemon
