// What every step of a collective works with (collectives.hpp, pipelined_hooks.hpp): the job,
// the communicator, the staging pool and the inter-node operations.
#pragma once

#include "algorithms/inter_node.hpp"
#include "engine/job.hpp"
#include "engine/staging.hpp"
#include "net/transport.hpp"

namespace nodecomm::daemon {

struct CollectiveContext {
  Job& job;
  Communicator& comm;
  StagingPool& staging;
  InterNode& transport;  // the inter-node operations over the transport
};

// The staging memory could not be had (StagingPool::acquire threw std::bad_alloc). A
// TransportError, so that a failure inside a transfer's callbacks fails it like any other.
class StagingExhausted : public TransportError {
 public:
  using TransportError::TransportError;
};

}  // namespace nodecomm::daemon
