// Who a connected peer is, beyond its uid: the groups admission (allow_groups) and
// administration (admin_group) check.
#pragma once

#include <sys/types.h>

#include <vector>

#include "nodecomm/ipc/socket.hpp"

namespace nodecomm::daemon {

// The groups of the peer of `fd`: its primary gid (SO_PEERCRED) and its supplementary groups
// (SO_PEERGROUPS), both as they were at connect.
std::vector<gid_t> peer_groups(int fd, const ipc::PeerCredentials& cred);

}  // namespace nodecomm::daemon
