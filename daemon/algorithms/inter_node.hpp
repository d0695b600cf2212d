// The engine's inter-node operations: given the network (net/transport.hpp), starts each one
// either as one of our point-to-point algorithms (ring, recursive doubling, record exchange,
// chunked transfers for counts beyond the native library's) or as the native collective, and
// polls them all through one set of handles. This is where the algorithm is chosen, from the
// agreed tuning (InterNode::tuning) and sizes every daemon of the group knows alike, so that
// every daemon takes the same path for every operation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "algorithms/allreduce_algorithms.hpp"
#include "algorithms/collective_algorithms.hpp"
#include "algorithms/record_combine.hpp"
#include "net/transport.hpp"

namespace nodecomm::daemon {

class InterNode {
 public:
  explicit InterNode(Transport& net) : net_(net) {}
  InterNode(const InterNode&) = delete;
  InterNode& operator=(const InterNode&) = delete;

  Transport& net() { return net_; }
  // The algorithm parameters every daemon of the job agreed on (the configuration, then each
  // scheduling round's), applied to operations started from now on.
  void set_tuning(const AlgorithmTuning& tuning) { tuning_ = tuning; }
  const AlgorithmTuning& tuning() const { return tuning_; }

  // Reduces `count` elements of `buffer` in place across the group, with the algorithm the
  // tuning picks (the ring whenever `wire` compresses, see AllreduceSpec::wire). hooks.prepare
  // runs for every range before it is read and hooks.done once a range holds the result (see
  // allreduce_algorithms.hpp).
  // `link_loaded`: see choose_allreduce; every node must pass the same.
  // `choice_bytes`: the bytes the algorithm is chosen for, where this call is one part of a
  // larger transfer that shares the link with it (a scheduler chunk: its whole operation); 0:
  // this call's own. Every node must pass the same.
  TransportHandle start_allreduce(NodeComm comm, void* buffer, size_t count, proto::DType dtype,
                                  proto::RedOp op, proto::Compression wire,
                                  const AllreduceHooks& hooks, bool link_loaded = false,
                                  size_t choice_bytes = 0);
  // Every node's `bytes` at records + comm_rank * bytes reach every node's `records`: one
  // message to and from each peer, the least latency there is (the scheduler's rounds, the
  // operation summaries). Exchanges are a stream of their own, with tags apart from the
  // transfers', since daemons interleave the two streams differently.
  // Only the first `send_bytes` of this node's record are sent (0: all of it); see
  // make_record_exchange.
  TransportHandle start_exchange(NodeComm comm, void* records, size_t bytes, size_t send_bytes = 0);
  // Every node's record combined into all nodes' on every node, by recursive doubling
  // (record_combine.hpp); in the exchanges' stream of tags.
  TransportHandle start_combine(NodeComm comm, RecordCombineSpec spec);
  // send [sdispls[n], +sbytes[n]) goes to node n, which receives it at its own recv
  // [rdispls[me], +rbytes[me]).
  TransportHandle start_alltoallv(NodeComm comm, const void* send, std::vector<size_t> sbytes,
                                  std::vector<size_t> sdispls, void* recv,
                                  std::vector<size_t> rbytes, std::vector<size_t> rdispls);
  // As NativeCollectives, with counts beyond max_count() carried as chunked transfers.
  TransportHandle start_allgatherv(NodeComm comm, void* buffer, std::vector<size_t> bytes,
                                   std::vector<size_t> displs);
  TransportHandle start_gatherv(NodeComm comm, void* buffer, std::vector<size_t> bytes,
                                std::vector<size_t> displs, uint32_t root_node);
  TransportHandle start_scatterv(NodeComm comm, void* buffer, std::vector<size_t> bytes,
                                 std::vector<size_t> displs, uint32_t root_node);
  // reduce_scatter, allgather(v), broadcast and reduce with hooks, as allreduce: our pipelined
  // algorithms (collective_algorithms.hpp) or the native collective, as the tuning picks
  // (choose_pipelined), and always ours where a count is beyond the native max_count(). The
  // hooks' ranges are in elements of the whole buffer, with the meaning each algorithm gives
  // them there; the native ones prepare everything first and deliver everything at the end.
  // Node n's block of `node_counts` elements follows node n-1's; this node's block, reduced
  // over every node, is done() at its own place (native too).
  TransportHandle start_reduce_scatter(NodeComm comm, void* buffer, std::vector<size_t> node_counts,
                                       proto::DType dtype, proto::RedOp op,
                                       const AllreduceHooks& hooks);
  // Node n's `node_bytes[n]` follow node n-1's from byte 0 of `buffer`; ranges in bytes.
  TransportHandle start_allgather_blocks(NodeComm comm, void* buffer,
                                         std::vector<size_t> node_bytes,
                                         const AllreduceHooks& hooks);
  TransportHandle start_broadcast(NodeComm comm, void* buffer, size_t bytes, uint32_t root_node,
                                  const AllreduceHooks& hooks);
  TransportHandle start_reduce(NodeComm comm, void* buffer, size_t count, proto::DType dtype,
                               proto::RedOp op, uint32_t root_node, const AllreduceHooks& hooks);
  TransportHandle start_barrier(NodeComm comm) { return net_.start_barrier(comm); }
  // Node groups, as NodeGroups (free_group also forgets the group's tag counters).
  TransportHandle start_split_groups(NodeComm parent, std::vector<bool> include) {
    return net_.start_split_groups(parent, std::move(include));
  }
  std::vector<NodeComm> take_groups(TransportHandle handle) { return net_.take_groups(handle); }
  void free_group(NodeComm comm);

  // Called once per engine pass before any test(): the point-to-point requests are polled
  // once per pass, however many algorithms are in flight.
  void begin_pass() { pass_polled_ = false; }
  // True once the operation is complete (the handle is then released), whether it is one of
  // the algorithms here or the transport's. Throws TransportError.
  bool test(TransportHandle handle);
  // Operations started and not yet reported complete, here and in the transport.
  size_t in_flight() const { return algorithms_.size() + net_.in_flight(); }

 private:
  // Handles of the algorithms run here have this bit set, so they never collide with the
  // transport's.
  static constexpr TransportHandle kOwnHandle = TransportHandle{1} << 63;
  struct Group {
    uint64_t started = 0;    // point-to-point transfers started, for tags
    uint64_t exchanges = 0;  // exchanges started, for tags in the upper half
  };
  Group& group(NodeComm comm) { return groups_[comm]; }
  // Operations whose tag ranges can be told apart on `net`: half the tag space each for the
  // transfers and the exchanges.
  static int tag_windows(const PointToPoint& net);
  TransportHandle run(std::unique_ptr<AllreduceAlgorithm> algorithm, PointToPoint& net);
  // The next point-to-point transfer's tag base on `net` (start order, shared by every daemon).
  int next_tag_base(NodeComm comm, const PointToPoint& net);
  // The next record exchange's or combination's (their own stream, see start_exchange).
  int next_exchange_tag_base(NodeComm comm, const PointToPoint& net);
  // Point-to-point transfers of any size on the group's lanes (chunked_transfers.hpp), with a
  // tag window of their own like every other point-to-point operation.
  TransportHandle start_chunked(NodeComm comm, const std::vector<struct Transfer>& sends,
                                const std::vector<struct Transfer>& recvs);
  // gatherv (to_root) and scatterv beyond the native counts: each node's block travels between
  // it and the root as chunked point-to-point messages.
  TransportHandle start_rooted_chunked(NodeComm comm, uint8_t* base,
                                       const std::vector<size_t>& bytes,
                                       const std::vector<size_t>& displs, uint32_t root_node,
                                       bool to_root);
  bool fit(const std::vector<size_t>& values) const;

  struct Running {
    std::unique_ptr<AllreduceAlgorithm> algorithm;
    PointToPoint* net;
  };
  Transport& net_;
  AlgorithmTuning tuning_;
  std::unordered_map<NodeComm, Group> groups_;
  std::unordered_map<TransportHandle, Running> algorithms_;
  TransportHandle next_ = kOwnHandle | 1;
  bool pass_polled_ = false;  // the point-to-point requests were polled in this engine pass
};

}  // namespace nodecomm::daemon
