// The narrow interface between the daemon's engine and the network between daemons.
//
// The engine knows nothing of MPI: it asks a Transport to start an inter-node operation on a
// daemon-private buffer and polls it. The MPI implementation (transport_mpi.cpp) is the only
// code that includes mpi.h; the loopback implementation lets unit tests run the same engine
// in one process. New inter-node algorithms (pipelined rings over several endpoints) go
// behind this interface without touching the client API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/tuning.hpp"
#include "net/allreduce_hooks.hpp"
#include "nodecomm/proto/types.hpp"

namespace nodecomm::daemon {

using TransportHandle = uint64_t;
// A set of daemons that run inter-node operations together; kAllNodes is every daemon, and
// create_group() makes others for communicators that span fewer nodes.
using NodeComm = uint32_t;
inline constexpr NodeComm kAllNodes = 0;

class TransportError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual uint32_t node_index() const = 0;
  virtual uint32_t node_count() const = 0;
  virtual std::string name() const = 0;

  // Reduces `count` elements of `buffer` in place across all nodes, with the algorithm the
  // tuning picks (the ring whenever `wire` compresses, see AllreduceSpec::wire). The transport
  // calls hooks.prepare for every range before it reads it and hooks.done once a range holds the
  // result (see allreduce_algorithms.hpp); `buffer` must stay valid until test() reports
  // completion. Operations are matched across nodes by the order in which they are started, so
  // every daemon must start them in the same order.
  virtual TransportHandle start_allreduce(NodeComm comm, void* buffer, size_t count,
                                          proto::DType dtype, proto::RedOp op,
                                          proto::Compression wire, const AllreduceHooks& hooks) = 0;
  // Reduces `count` elements of `buffer` across all nodes into `buffer` on `root_node`.
  virtual TransportHandle start_reduce(NodeComm comm, void* buffer, size_t count,
                                       proto::DType dtype, proto::RedOp op, uint32_t root_node) = 0;
  // Reduces buffer (sum of node_counts elements) across nodes; node n ends up with its
  // node_counts[n] elements of the result at the start of `buffer`.
  //
  // Counts, byte counts and displacements are size_t everywhere in this interface: MPI's are
  // int, and a transport carries larger ones itself (chunked_transfers.hpp), never truncated.
  virtual TransportHandle start_reduce_scatter(NodeComm comm, void* buffer,
                                               std::vector<size_t> node_counts, proto::DType dtype,
                                               proto::RedOp op) = 0;
  // Copies `bytes` of `buffer` on root_node to `buffer` on every node.
  virtual TransportHandle start_broadcast(NodeComm comm, void* buffer, size_t bytes,
                                          uint32_t root_node) = 0;
  // Node n's bytes [displs[n], +bytes[n]) of `buffer` reach every node's `buffer`.
  virtual TransportHandle start_allgatherv(NodeComm comm, void* buffer, std::vector<size_t> bytes,
                                           std::vector<size_t> displs) = 0;
  // Node n's bytes [displs[n], +bytes[n]) of `buffer` reach root_node's `buffer`.
  virtual TransportHandle start_gatherv(NodeComm comm, void* buffer, std::vector<size_t> bytes,
                                        std::vector<size_t> displs, uint32_t root_node) = 0;
  // root_node's bytes [displs[n], +bytes[n]) of `buffer` reach node n's `buffer` there.
  virtual TransportHandle start_scatterv(NodeComm comm, void* buffer, std::vector<size_t> bytes,
                                         std::vector<size_t> displs, uint32_t root_node) = 0;
  // send [sdispls[n], +sbytes[n]) goes to node n, which receives it at its own recv
  // [rdispls[me], +rbytes[me]).
  virtual TransportHandle start_alltoallv(NodeComm comm, const void* send,
                                          std::vector<size_t> sbytes, std::vector<size_t> sdispls,
                                          void* recv, std::vector<size_t> rbytes,
                                          std::vector<size_t> rdispls) = 0;
  virtual TransportHandle start_barrier(NodeComm comm) = 0;
  // Every node's `bytes` at records + comm_rank * bytes reach every node's `records`: a small
  // allgather with the least latency the transport has (the scheduler's rounds).
  virtual TransportHandle start_exchange(NodeComm comm, void* records, size_t bytes) {
    const uint32_t n = comm_size(comm);
    std::vector<size_t> sizes(n, bytes);
    std::vector<size_t> displs(n);
    for (uint32_t i = 0; i < n; ++i) displs[i] = i * bytes;
    return start_allgatherv(comm, records, std::move(sizes), std::move(displs));
  }
  // Called once per engine pass before any test(): work shared by every handle (polling
  // the network once) is done once per pass.
  virtual void begin_pass() {}
  // Out-of-band failure notices between daemons, outside every operation's ordering: a
  // daemon whose job lost a rank tells every other daemon at once, so their ranks get an
  // error naming it instead of waiting for their timeout. `tag` identifies the job, `rank` the
  // world rank whose communicators fail, `status` the error their members get.
  virtual void send_notice(uint64_t /*tag*/, uint32_t /*rank*/, proto::Status /*status*/,
                           const std::string& /*text*/) {}
  // A notice received since the last call, if any.
  virtual bool poll_notice(uint64_t& /*tag*/, uint32_t& /*rank*/, proto::Status& /*status*/,
                           std::string& /*text*/) {
    return false;
  }
  // Liveness of the other daemons. Sends this daemon's heartbeat to every peer when
  // `interval_ns` has passed since the last, and returns the peers not heard from for
  // `timeout_ns`, each once, with a message naming the node, its daemon's pid and host.
  // A lost peer's messages never arrive, so what is in flight with it never completes.
  struct LostPeer {
    uint32_t node;
    std::string text;
  };
  virtual std::vector<LostPeer> check_peers(uint64_t /*now_ns*/, uint64_t /*interval_ns*/,
                                            uint64_t /*timeout_ns*/) {
    return {};
  }
  // Gathers `bytes` from every node into `recv` (node_count * bytes, in node order).
  virtual TransportHandle start_allgather(const void* send, size_t bytes, void* recv) = 0;
  // This daemon's index within `comm` (node order) and the number of daemons in it.
  virtual uint32_t comm_rank(NodeComm comm) const = 0;
  virtual uint32_t comm_size(NodeComm comm) const = 0;
  // Collective over every daemon of `parent`: for each entry of `include`, in order, a new
  // NodeComm of the daemons that pass true (ranked in parent order). Non-blocking: poll with
  // test(), then take_groups() gives one NodeComm per entry (kAllNodes where excluded).
  // Creating communicators is blocking in MPI; a daemon serving several communicators could
  // otherwise block on one while a peer blocks on another, and both would wait forever.
  virtual TransportHandle start_split_groups(NodeComm parent, std::vector<bool> include) = 0;
  virtual std::vector<NodeComm> take_groups(TransportHandle handle) = 0;
  virtual void free_group(NodeComm comm) = 0;
  // True once the operation is complete (the handle is then released). Throws TransportError.
  virtual bool test(TransportHandle handle) = 0;
  // Operations started and not yet reported complete.
  virtual size_t in_flight() const = 0;
  // Algorithm parameters for operations started from now on.
  virtual void set_tuning(const AlgorithmTuning& tuning) { tuning_ = tuning; }
  const AlgorithmTuning& tuning() const { return tuning_; }
  // Grows whenever a message of an operation in flight completes, so the caller can tell
  // progress (keep polling hard) from waiting (back off).
  virtual uint64_t activity() const { return 0; }
  // Lanes (endpoints) this transport opened to every peer: the most tuning.endpoints can use.
  virtual uint32_t lanes() const { return 1; }

 protected:
  AlgorithmTuning tuning_;
};

// A single node: every operation is complete as soon as it starts.
std::unique_ptr<Transport> make_loopback_transport();

// Initialises MPI (MPI_THREAD_MULTIPLE, see start_split_groups) and returns a transport over
// MPI_COMM_WORLD, one rank per node, with `lanes` duplicated communicators per node group for
// the point-to-point algorithms. Finalizes MPI when destroyed.
std::unique_ptr<Transport> make_mpi_transport(int* argc, char*** argv, uint32_t lanes);

}  // namespace nodecomm::daemon
