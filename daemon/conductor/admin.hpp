// Runtime administration over the control socket (nodecommctl set, trace start|stop): who may
// do it, which settings can change without a restart, and how a change of the inter-node
// algorithm reaches every daemon of a job at the same point. Daemon::on_admin and
// Daemon::apply_setting live in admin.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "conductor/peer_groups.hpp"
#include "config/tuning.hpp"
#include "nodecomm/ipc/socket.hpp"

namespace nodecomm::daemon {

// Settings `nodecommctl set` can change while the daemon runs.
const std::vector<std::string>& settable_keys();

// Root, the daemon's own uid, or a member of `admin_group` (name or gid; peer_groups).
// On refusal `why` says who was refused and who would be allowed.
bool may_administer(int fd, const ipc::PeerCredentials& cred, const std::string& admin_group,
                    std::string& why);

}  // namespace nodecomm::daemon
