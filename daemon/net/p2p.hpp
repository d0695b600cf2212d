// Point-to-point messaging between the daemons of one node group: what the inter-node
// algorithms (allreduce_algorithms.hpp) need from a network, and nothing more. The MPI
// implementation lives in transport_mpi.cpp; tests use an in-memory one.
#pragma once

#include <cstddef>
#include <cstdint>

namespace nodecomm::daemon {

using P2pRequest = uint64_t;

class PointToPoint {
 public:
  virtual ~PointToPoint() = default;

  virtual uint32_t rank() const = 0;
  virtual uint32_t size() const = 0;
  // Independent channels to every peer (MLSL's endpoints). Messages on different lanes never
  // wait for each other; on one lane and tag they arrive in the order they were sent.
  virtual uint32_t lanes() const = 0;
  // The largest tag a message may carry (tags start at 0).
  virtual int max_tag() const = 0;

  // Start sending or receiving `bytes` at `data`, which must stay valid (and, for a receive,
  // untouched) until done() reports the request complete. Throw TransportError.
  virtual P2pRequest isend(uint32_t lane, uint32_t peer, int tag, const void* data,
                           size_t bytes) = 0;
  virtual P2pRequest irecv(uint32_t lane, uint32_t peer, int tag, void* data, size_t bytes) = 0;
  // Advances every outstanding request once.
  virtual void poll() = 0;
  // True if `request` completed by the last poll(); a completed request is then forgotten.
  virtual bool done(P2pRequest request) = 0;
};

}  // namespace nodecomm::daemon
