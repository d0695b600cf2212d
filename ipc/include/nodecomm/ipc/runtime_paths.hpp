// Where a daemon instance keeps its socket and ready file, shared by daemon, client and tools.
#pragma once

#include <string>

namespace nodecomm::ipc {

inline constexpr const char* kSocketFileName = "nodecommd.sock";
inline constexpr const char* kReadyFileName = "nodecommd.ready";

// The directory that holds instances when none is given: $NODECOMM_RUNTIME_BASE, else
// /run/nodecomm for root, else $XDG_RUNTIME_DIR/nodecomm, else /tmp/nodecomm-<uid>.
std::string default_runtime_base();
// `base`/`instance`.
std::string instance_runtime_dir(const std::string& instance);
std::string socket_path(const std::string& runtime_dir);
std::string ready_path(const std::string& runtime_dir);
// Shared-memory names of an instance start with this (its counters and trace buffer; client
// segments are anonymous memfds and have no name).
std::string segment_prefix(const std::string& instance);
// The instance's counters segment and trace buffer (proto/counters.hpp): shm names under the
// same prefix, so that nodecommctl finds every instance in /dev/shm and the launcher's cleanup
// of a crashed daemon's names covers them.
std::string counters_shm_name(const std::string& instance);
std::string trace_shm_name(const std::string& instance);

}  // namespace nodecomm::ipc
