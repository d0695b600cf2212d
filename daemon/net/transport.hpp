// The network between daemons, as the engine's inter-node runner (algorithms/inter_node.hpp)
// sees it. Four narrow parts, in the manner of Gloo's context and NCCL's transports:
//   NodeGroups         which daemons run an operation together, and each group's point-to-point
//                      messaging (p2p.hpp), over which the algorithms run;
//   NativeCollectives  the collectives the network library implements itself (MPI's), for what
//                      no point-to-point algorithm of ours does better;
//   PeerNotices        failure notices between daemons and their liveness, outside every
//                      operation's ordering;
//   Transport          the three together, plus polling the handles they return.
// Choosing an algorithm and running it is not the transport's job: it lives with the algorithms.
// The MPI implementation (daemon/mpi/) is the only code that includes mpi.h;
// the loopback implementation runs the engine on one node.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/tuning.hpp"
#include "net/p2p.hpp"
#include "nodecomm/proto/types.hpp"

namespace nodecomm::daemon {

using TransportHandle = uint64_t;
// A set of daemons that run inter-node operations together; kAllNodes is every daemon, and
// start_split_groups() makes others for communicators that span fewer nodes.
using NodeComm = uint32_t;
inline constexpr NodeComm kAllNodes = 0;

class TransportError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class NodeGroups {
 public:
  virtual ~NodeGroups() = default;

  // This daemon's index within `comm` (node order) and the number of daemons in it.
  virtual uint32_t comm_rank(NodeComm comm) const = 0;
  virtual uint32_t comm_size(NodeComm comm) const = 0;
  // Collective over every daemon of `parent`: for each entry of `include`, in order, a new
  // NodeComm of the daemons that pass true (ranked in parent order). Non-blocking: poll with
  // Transport::test(), then take_groups() gives one NodeComm per entry (kAllNodes where
  // excluded). Creating communicators is blocking in MPI; a daemon serving several
  // communicators could otherwise block on one while a peer blocks on another, and both
  // would wait forever.
  virtual TransportHandle start_split_groups(NodeComm parent, std::vector<bool> include) = 0;
  virtual std::vector<NodeComm> take_groups(TransportHandle handle) = 0;
  virtual void free_group(NodeComm comm) = 0;
  // Point-to-point messaging among the daemons of `comm` (ranks as comm_rank), valid until
  // free_group(comm). Its messages never match a native collective's. Every group's
  // PointToPoint shares one progress: poll() on any of them advances the requests of all.
  virtual PointToPoint& p2p(NodeComm comm) = 0;
  // Lanes (endpoints) opened to every peer: the most tuning.endpoints can use.
  virtual uint32_t lanes() const { return 1; }
};

// Every operation is in place on a daemon-private buffer that must stay valid until
// Transport::test() reports completion. Operations of one group are matched across daemons by
// the order in which they are started, so every daemon must start them in the same order.
// Counts, byte counts and displacements are size_t: the native library's may be narrower
// (MPI's are int); a transport takes any value up to max_count() in every count and
// displacement, and beyond that the caller moves the data itself over point-to-point.
class NativeCollectives {
 public:
  virtual ~NativeCollectives() = default;

  // The largest count (elements or bytes) one native call takes.
  virtual size_t max_count() const = 0;
  // Reduces `count` (at most max_count()) elements of `buffer` across the group, in place.
  virtual TransportHandle start_allreduce(NodeComm comm, void* buffer, size_t count,
                                          proto::DType dtype, proto::RedOp op) = 0;
  // Reduces `count` elements of `buffer` across the group into `buffer` on `root_node` (any
  // count: a transport cuts it into several native calls itself).
  virtual TransportHandle start_reduce(NodeComm comm, void* buffer, size_t count,
                                       proto::DType dtype, proto::RedOp op, uint32_t root_node) = 0;
  // Reduces buffer (sum of node_counts elements, any counts) across the group; node n ends up
  // with its node_counts[n] elements of the result at the start of `buffer`.
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
  virtual TransportHandle start_barrier(NodeComm comm) = 0;
};

// What the groups this process left still hold (daemon/mpi/comm_retirement.hpp), for the
// counters: communicators retired and not yet quiet, and late messages dropped in them over
// the process's life.
struct RetiredComms {
  uint64_t retired = 0;
  uint64_t late_dropped = 0;
};

// Out-of-band messages between daemons, outside every operation's ordering.
class PeerNotices {
 public:
  virtual ~PeerNotices() = default;

  // A daemon whose job lost a rank tells every other daemon at once, so their ranks get an
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
  // Looks after the groups this transport freed (split groups): what peers still send in them
  // is dropped until they fall quiet (the MPI transport's comm_retirement.hpp). The service's
  // job groups are looked after by JobGroupFormer::tend. Called regularly; never blocks.
  virtual RetiredComms tend(uint64_t /*now_ns*/) { return {}; }
};

class Transport : public NodeGroups, public NativeCollectives, public PeerNotices {
 public:
  virtual std::string name() const = 0;
  // True once the operation (a native collective or a group creation) is complete; the
  // handle is then released. Throws TransportError.
  virtual bool test(TransportHandle handle) = 0;
  // Operations started and not yet reported complete.
  virtual size_t in_flight() const = 0;
  // Grows whenever a point-to-point message completes, so the caller can tell progress (keep
  // polling hard) from waiting (back off).
  virtual uint64_t activity() const { return 0; }

  // This daemon among all of them.
  uint32_t node_index() const { return comm_rank(kAllNodes); }
  uint32_t node_count() const { return comm_size(kAllNodes); }
};

// A single node: every operation is complete as soon as it starts.
std::unique_ptr<Transport> make_loopback_transport();

// Initialises MPI (MPI_THREAD_MULTIPLE, see NodeGroups::start_split_groups) and returns a
// transport over MPI_COMM_WORLD, one rank per node, with `lanes` duplicated communicators per
// node group for the point-to-point algorithms. MPI is finalized once the last MPI transport
// of the process is gone (not at all if one of them lost a peer). Daemons that mpirun did not
// start together form a group per job instead (net/job_groups.hpp).
std::unique_ptr<Transport> make_mpi_transport(int* argc, char*** argv, uint32_t lanes);

}  // namespace nodecomm::daemon
