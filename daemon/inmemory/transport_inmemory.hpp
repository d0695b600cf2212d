// A transport for several daemons in one process: the engine's whole multi-node path (job
// formation, matching, scheduling rounds, every collective, communicator creation, notices)
// runs against it in a test, with each daemon's loop in its own thread and no MPI.
//
// The daemons share an InMemoryWorld; each gets its own Transport from it. It keeps MPI's
// contract, so the engine cannot tell the difference:
//   node groups       kAllNodes is every node; start_split_groups makes new ones, ranked in
//                     parent order, and each daemon numbers its groups itself (as MPI does);
//   native collectives (reduce, reduce_scatter, broadcast, the v variants, barrier,
//                     MPI's own allreduce, split) are matched per group in start order, like
//                     nonblocking collectives on one communicator, and computed in memory by
//                     the daemon whose post completes the set. A mismatch (another kind, root
//                     or size at the same place) is a TransportError naming both sides;
//   point to point    the inter-node algorithms (ring, recursive doubling, record exchange,
//                     chunked transfers) run unchanged over an in-memory PointToPoint per
//                     group, with MPI's rendezvous: a send completes once a receive matched it;
//   notices           queued for every other node; liveness never loses a peer.
// One mutex guards the world: the daemons' threads only meet in it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "net/transport.hpp"

namespace nodecomm::daemon {

struct InMemoryOptions {
  uint32_t nodes = 1;
  uint32_t lanes = 4;  // point-to-point channels of every group, as DaemonConfig::lanes
  // The largest block one native call carries; larger ones go as chunked point-to-point
  // transfers, as MPI's int counts make them go (NODECOMM_TEST_MPI_MAX_COUNT's in-memory twin).
  size_t max_count = static_cast<size_t>(INT32_MAX);
};

class InMemoryWorld;

std::shared_ptr<InMemoryWorld> make_inmemory_world(const InMemoryOptions& options);
// Node `node`'s transport; every node of the world must have one before any starts work.
std::unique_ptr<Transport> make_inmemory_transport(std::shared_ptr<InMemoryWorld> world,
                                                   uint32_t node);

}  // namespace nodecomm::daemon
