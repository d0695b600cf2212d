// Runtime administration over the control socket (nodecommctl set, trace start|stop): who may
// do it, which settings can change without a restart, and how a change of the inter-node
// algorithm reaches every daemon of a job at the same point. Daemon::on_admin and
// Daemon::apply_setting live in admin.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "allreduce_algorithms.hpp"
#include "nodecomm/ipc/socket.hpp"

namespace nodecomm::daemon {

// The inter-node algorithm settings that every daemon of a job must share: both ends of a
// ring step must cut the same slices (chunk-size), pick the same algorithm (small-bytes,
// allreduce-algorithm) and use the same lanes (endpoints). Node 0's are sent in every
// scheduling round record and applied by every daemon before it starts that round's
// transfers, so `nodecommctl set chunk-size` on node 0 changes the whole job between two
// transfers, never in the middle of one. pipeline-depth is local (slices in flight here).
struct AgreedAlgorithm {
  uint64_t chunk_bytes;  // 0: none sent (keep the local settings)
  uint64_t small_bytes;
  uint32_t allreduce;  // AllreduceAlgorithmKind
  uint32_t endpoints;
};
static_assert(sizeof(AgreedAlgorithm) == 24);

AgreedAlgorithm agreed_algorithm(const AlgorithmTuning& tuning);
// `local` with the agreed fields of `agreed` (unless it carries none).
AlgorithmTuning with_agreed_algorithm(AlgorithmTuning local, const AgreedAlgorithm& agreed);

// Settings `nodecommctl set` can change while the daemon runs.
const std::vector<std::string>& settable_keys();

// The groups of the peer of `fd`: its primary gid (SO_PEERCRED) and its supplementary groups
// (SO_PEERGROUPS), both as they were at connect.
std::vector<gid_t> peer_groups(int fd, const ipc::PeerCredentials& cred);

// Root, the daemon's own uid, or a member of `admin_group` (name or gid; peer_groups).
// On refusal `why` says who was refused and who would be allowed.
bool may_administer(int fd, const ipc::PeerCredentials& cred, const std::string& admin_group,
                    std::string& why);

}  // namespace nodecomm::daemon
