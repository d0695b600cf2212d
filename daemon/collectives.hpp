// The hierarchical collectives, in three steps each:
//   stage_in:      read the node's send buffers (once, into daemon-private staging);
//   start_network: run the inter-node part among the daemons on the staging buffers;
//   stage_out:     write each local rank's receive buffer from staging.
// Reading every input before writing any output makes every in-place layout safe, and only
// the node's aggregate crosses the network. Staging is laid out in the communicator's
// node-major order (CommLayout), so each node's part is one contiguous run on the network.
#pragma once

#include "job.hpp"
#include "staging.hpp"
#include "transport.hpp"

namespace nodecomm::daemon {

struct CollectiveContext {
  Job& job;
  Communicator& comm;
  StagingPool& staging;
  Transport& transport;
};

// Returns true when the operation is already complete and delivered (small single-node
// fast paths); otherwise staging holds the node's input.
bool stage_in(CollectiveContext& ctx, Operation& op);
TransportHandle start_network(CollectiveContext& ctx, Operation& op);
// Writes results and releases the staging buffers.
void stage_out(CollectiveContext& ctx, Operation& op);
// Releases staging after a failure.
void release_staging(CollectiveContext& ctx, Operation& op);

}  // namespace nodecomm::daemon
