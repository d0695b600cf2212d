// Who a client accepts as its daemon. A socket path is only a name: in a directory someone
// else could create first (/tmp/nodecomm-<uid> for a user without XDG_RUNTIME_DIR, a shared
// --runtime-dir), an impostor could listen there and read every hello, tuning and job name
// sent to it, and hand out memory of its own. The client therefore asks the kernel who is
// listening (SO_PEERCRED, fixed at connect) before it sends anything.
#pragma once

#include <string>

namespace nodecomm::ipc {

// The environment variable that names the daemon's uid (a number or a user name). When set,
// only that uid is accepted; when unset: root, this process's own uid, and the uid of the
// packaged service's user `nodecomm` (systemd/nodecomm.sysusers) when it exists.
inline constexpr const char* kDaemonUidEnv = "NODECOMM_DAEMON_UID";
inline constexpr const char* kServiceUser = "nodecomm";

// Empty when the peer of the connected socket `fd` (at `socket_path`) runs as an accepted
// uid; else the refusal, naming the uid found (and its pid) and the uids accepted.
std::string check_daemon_peer(int fd, const std::string& socket_path);

}  // namespace nodecomm::ipc
