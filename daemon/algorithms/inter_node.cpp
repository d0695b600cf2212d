#include "algorithms/inter_node.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>

#include "algorithms/chunked_transfers.hpp"

namespace nodecomm::daemon {
namespace {

// The native allreduce (MPI_Iallreduce on the whole buffer), kept selectable so comparisons
// with the network library's own algorithms stay honest: the whole buffer is prepared before
// it starts and done once the transport reports it complete.
class NativeAllreduce final : public AllreduceAlgorithm {
 public:
  NativeAllreduce(Transport& net, NodeComm comm, const AllreduceSpec& spec,
                  const AllreduceHooks& hooks)
      : net_(net), count_(spec.count), hooks_(hooks) {
    if (count_ > 0) hooks.prepare(0, count_);
    handle_ = net.start_allreduce(comm, spec.buffer, spec.count, spec.dtype, spec.op);
  }
  bool progress() override {
    if (!net_.test(handle_)) return false;
    if (count_ > 0) hooks_.done(0, count_);
    return true;
  }

 private:
  Transport& net_;
  size_t count_;
  AllreduceHooks hooks_;
  TransportHandle handle_ = 0;
};

// A native collective between hooks, as NativeAllreduce: `begin` ran the hooks' prepare before
// the transport started, `end` runs what is to be delivered once it is complete.
class NativeCollective final : public AllreduceAlgorithm {
 public:
  NativeCollective(Transport& net, TransportHandle handle, std::function<void()> end)
      : net_(net), handle_(handle), end_(std::move(end)) {}
  bool progress() override {
    if (!net_.test(handle_)) return false;
    end_();
    return true;
  }

 private:
  Transport& net_;
  TransportHandle handle_;
  std::function<void()> end_;
};

// An operation that was complete when it started (a group of one node).
class Finished final : public AllreduceAlgorithm {
 public:
  bool progress() override { return true; }
};

}  // namespace

int InterNode::tag_windows(const PointToPoint& net) {
  return std::max(1, (net.max_tag() / kTagsPerOperation) / 2);
}

bool InterNode::fit(const std::vector<size_t>& values) const {
  const size_t most = net_.max_count();
  return std::all_of(values.begin(), values.end(), [most](size_t v) { return v <= most; });
}

TransportHandle InterNode::run(std::unique_ptr<AllreduceAlgorithm> algorithm, PointToPoint& net) {
  const TransportHandle handle = next_++;
  algorithms_.emplace(handle, Running{std::move(algorithm), &net});
  return handle;
}

int InterNode::next_tag_base(NodeComm comm, const PointToPoint& net) {
  // Tags are handed out in start order, which every daemon of the group shares.
  return static_cast<int>(group(comm).started++ % tag_windows(net)) * kTagsPerOperation;
}

int InterNode::next_exchange_tag_base(NodeComm comm, const PointToPoint& net) {
  // The upper half of the tag windows, apart from the transfers'.
  const int windows = tag_windows(net);
  return static_cast<int>(windows + group(comm).exchanges++ % windows) * kTagsPerOperation;
}

TransportHandle InterNode::start_allreduce(NodeComm comm, void* buffer, size_t count,
                                           proto::DType dtype, proto::RedOp op,
                                           proto::Compression wire, const AllreduceHooks& hooks,
                                           bool link_loaded, size_t choice_bytes) {
  PointToPoint& p2p = net_.p2p(comm);
  const AllreduceSpec spec{buffer, count, dtype, op, wire};
  const size_t bytes = count * proto::dtype_size(dtype);
  const int tag_base = next_tag_base(comm, p2p);
  if (p2p.size() == 1) {
    // One node holds the result already.
    if (count > 0) {
      hooks.prepare(0, count);
      hooks.done(0, count);
    }
    return run(std::make_unique<Finished>(), p2p);
  }
  // Compressed data goes around the ring, the only algorithm that re-encodes per step.
  AllreduceAlgorithmKind kind =
      spec.wire != proto::Compression::kNone
          ? AllreduceAlgorithmKind::kRing
          : choose_allreduce(tuning_, choice_bytes != 0 ? choice_bytes : bytes, p2p.size(),
                             link_loaded);
  // Recursive doubling sends the whole buffer as one message and the native allreduce takes
  // at most max_count() elements (MPI's int): beyond that the ring, whose slices stay far
  // below it, carries the operation.
  if ((kind == AllreduceAlgorithmKind::kRecursiveDoubling && bytes > net_.max_count()) ||
      (kind == AllreduceAlgorithmKind::kMpi && count > net_.max_count())) {
    kind = AllreduceAlgorithmKind::kRing;
  }
  switch (kind) {
    case AllreduceAlgorithmKind::kRecursiveDoubling:
      return run(make_recursive_doubling_allreduce(p2p, tag_base, spec, hooks), p2p);
    case AllreduceAlgorithmKind::kMpi:
      return run(std::make_unique<NativeAllreduce>(net_, comm, spec, hooks), p2p);
    default:
      return run(make_ring_allreduce(p2p, tag_base, spec, hooks, tuning_), p2p);
  }
}

TransportHandle InterNode::start_exchange(NodeComm comm, void* records, size_t bytes,
                                          size_t send_bytes) {
  PointToPoint& p2p = net_.p2p(comm);
  const int tag_base = next_exchange_tag_base(comm, p2p);
  if (p2p.size() == 1) return run(std::make_unique<Finished>(), p2p);  // its record is in place
  return run(
      make_record_exchange(p2p, tag_base, records, bytes, send_bytes == 0 ? bytes : send_bytes),
      p2p);
}

TransportHandle InterNode::start_combine(NodeComm comm, RecordCombineSpec spec) {
  PointToPoint& p2p = net_.p2p(comm);
  const int tag_base = next_exchange_tag_base(comm, p2p);
  if (p2p.size() == 1) return run(std::make_unique<Finished>(), p2p);  // its record is all
  return run(make_record_combine(p2p, tag_base, std::move(spec)), p2p);
}

TransportHandle InterNode::start_chunked(NodeComm comm, const std::vector<Transfer>& sends,
                                         const std::vector<Transfer>& recvs) {
  PointToPoint& p2p = net_.p2p(comm);
  Group& g = group(comm);
  const int tag = static_cast<int>(g.started++ % tag_windows(p2p)) * kTagsPerOperation;
  return run(make_chunked_transfers(p2p, tag, sends, recvs, net_.max_count()), p2p);
}

// Always point-to-point (chunked_transfers.hpp), never the native alltoallv: a node's send and
// receive sizes are its own, so whether they fit the native count is not something every
// daemon could decide alike, and a native collective on some daemons facing point-to-point
// messages on others would never match. Open MPI's alltoallv is pairwise messages too.
TransportHandle InterNode::start_alltoallv(NodeComm comm, const void* send,
                                           std::vector<size_t> sbytes, std::vector<size_t> sdispls,
                                           void* recv, std::vector<size_t> rbytes,
                                           std::vector<size_t> rdispls) {
  // The send buffer is only read (Transfer's data is not const for the receives' sake).
  auto* out = const_cast<uint8_t*>(static_cast<const uint8_t*>(send));
  auto* in = static_cast<uint8_t*>(recv);
  std::vector<Transfer> sends;
  std::vector<Transfer> recvs;
  for (uint32_t n = 0; n < sbytes.size(); ++n) {
    sends.push_back({n, out + sdispls[n], sbytes[n]});
    recvs.push_back({n, in + rdispls[n], rbytes[n]});
  }
  return start_chunked(comm, sends, recvs);
}

// The collectives below go native whenever every count fits one native call; otherwise as
// chunked point-to-point transfers. Each choice depends only on sizes every daemon of the
// group knows alike, so all of them take the same path.
TransportHandle InterNode::start_allgatherv(NodeComm comm, void* buffer, std::vector<size_t> bytes,
                                            std::vector<size_t> displs) {
  if (fit(bytes) && fit(displs)) {
    return net_.start_allgatherv(comm, buffer, std::move(bytes), std::move(displs));
  }
  // Every node's block to every other node.
  const uint32_t me = net_.comm_rank(comm);
  auto* base = static_cast<uint8_t*>(buffer);
  std::vector<Transfer> sends;
  std::vector<Transfer> recvs;
  for (uint32_t n = 0; n < bytes.size(); ++n) {
    if (n == me) continue;
    sends.push_back({n, base + displs[me], bytes[me]});
    recvs.push_back({n, base + displs[n], bytes[n]});
  }
  return start_chunked(comm, sends, recvs);
}

TransportHandle InterNode::start_rooted_chunked(NodeComm comm, uint8_t* base,
                                                const std::vector<size_t>& bytes,
                                                const std::vector<size_t>& displs,
                                                uint32_t root_node, bool to_root) {
  const uint32_t me = net_.comm_rank(comm);
  std::vector<Transfer> at_root;
  std::vector<Transfer> at_leaf;
  if (root_node == me) {
    for (uint32_t n = 0; n < bytes.size(); ++n) {
      if (n != me) at_root.push_back({n, base + displs[n], bytes[n]});
    }
  } else {
    at_leaf.push_back({root_node, base + displs[me], bytes[me]});
  }
  return to_root ? start_chunked(comm, at_leaf, at_root) : start_chunked(comm, at_root, at_leaf);
}

TransportHandle InterNode::start_gatherv(NodeComm comm, void* buffer, std::vector<size_t> bytes,
                                         std::vector<size_t> displs, uint32_t root_node) {
  if (fit(bytes) && fit(displs)) {
    return net_.start_gatherv(comm, buffer, std::move(bytes), std::move(displs), root_node);
  }
  return start_rooted_chunked(comm, static_cast<uint8_t*>(buffer), bytes, displs, root_node,
                              /*to_root=*/true);
}

TransportHandle InterNode::start_scatterv(NodeComm comm, void* buffer, std::vector<size_t> bytes,
                                          std::vector<size_t> displs, uint32_t root_node) {
  if (fit(bytes) && fit(displs)) {
    return net_.start_scatterv(comm, buffer, std::move(bytes), std::move(displs), root_node);
  }
  return start_rooted_chunked(comm, static_cast<uint8_t*>(buffer), bytes, displs, root_node,
                              /*to_root=*/false);
}

// Each choice below depends only on the agreed tuning and on sizes every daemon of the group
// knows alike, so all of them take the same path.
TransportHandle InterNode::start_reduce_scatter(NodeComm comm, void* buffer,
                                                std::vector<size_t> node_counts, proto::DType dtype,
                                                proto::RedOp op, const AllreduceHooks& hooks) {
  PointToPoint& p2p = net_.p2p(comm);
  const int tag_base = next_tag_base(comm, p2p);
  const size_t total = std::accumulate(node_counts.begin(), node_counts.end(), size_t{0});
  const size_t elem = proto::dtype_size(dtype);
  if (choose_pipelined(tuning_, total * elem, p2p.size()) || !fit(node_counts)) {
    const BlocksSpec spec{buffer, std::move(node_counts), dtype, op};
    return run(make_ring_reduce_scatter(p2p, tag_base, spec, hooks, tuning_), p2p);
  }
  const uint32_t me = p2p.rank();
  const size_t mine = me < node_counts.size() ? node_counts[me] : 0;
  const size_t at = std::accumulate(node_counts.begin(), node_counts.begin() + me, size_t{0});
  if (total > 0) hooks.prepare(0, total);
  const TransportHandle h =
      net_.start_reduce_scatter(comm, buffer, std::move(node_counts), dtype, op);
  // The native result starts at element 0; the hooks' contract has it at this node's block.
  auto end = [hooks, buffer, mine, at, elem] {
    auto* base = static_cast<uint8_t*>(buffer);
    if (mine == 0) return;
    std::memmove(base + at * elem, base, mine * elem);
    hooks.done(at, mine);
  };
  return run(std::make_unique<NativeCollective>(net_, h, std::move(end)), p2p);
}

TransportHandle InterNode::start_allgather_blocks(NodeComm comm, void* buffer,
                                                  std::vector<size_t> node_bytes,
                                                  const AllreduceHooks& hooks) {
  PointToPoint& p2p = net_.p2p(comm);
  const int tag_base = next_tag_base(comm, p2p);
  std::vector<size_t> displs(node_bytes.size(), 0);
  for (size_t n = 1; n < node_bytes.size(); ++n) displs[n] = displs[n - 1] + node_bytes[n - 1];
  const size_t total = displs.empty() ? 0 : displs.back() + node_bytes.back();
  if (choose_pipelined(tuning_, total, p2p.size()) || !fit(node_bytes) || !fit(displs)) {
    const BlocksSpec spec{buffer, std::move(node_bytes), proto::DType::kU8, proto::RedOp::kSum};
    return run(make_ring_allgather(p2p, tag_base, spec, hooks, tuning_), p2p);
  }
  const uint32_t me = p2p.rank();
  if (me < node_bytes.size() && node_bytes[me] > 0) hooks.prepare(displs[me], node_bytes[me]);
  auto end = [hooks, node_bytes, displs] {
    for (size_t n = 0; n < node_bytes.size(); ++n) {
      if (node_bytes[n] > 0) hooks.done(displs[n], node_bytes[n]);
    }
  };
  const TransportHandle h = net_.start_allgatherv(comm, buffer, node_bytes, displs);
  return run(std::make_unique<NativeCollective>(net_, h, std::move(end)), p2p);
}

TransportHandle InterNode::start_broadcast(NodeComm comm, void* buffer, size_t bytes,
                                           uint32_t root_node, const AllreduceHooks& hooks) {
  PointToPoint& p2p = net_.p2p(comm);
  const int tag_base = next_tag_base(comm, p2p);
  if (choose_pipelined(tuning_, bytes, p2p.size()) || bytes > net_.max_count()) {
    const RootedSpec spec{buffer, bytes, proto::DType::kU8, proto::RedOp::kSum, root_node};
    return run(make_chain_broadcast(p2p, tag_base, spec, hooks, tuning_), p2p);
  }
  if (p2p.rank() == root_node && bytes > 0) hooks.prepare(0, bytes);
  auto end = [hooks, bytes] {
    if (bytes > 0) hooks.done(0, bytes);
  };
  const TransportHandle h = net_.start_broadcast(comm, buffer, bytes, root_node);
  return run(std::make_unique<NativeCollective>(net_, h, std::move(end)), p2p);
}

TransportHandle InterNode::start_reduce(NodeComm comm, void* buffer, size_t count,
                                        proto::DType dtype, proto::RedOp op, uint32_t root_node,
                                        const AllreduceHooks& hooks) {
  PointToPoint& p2p = net_.p2p(comm);
  const int tag_base = next_tag_base(comm, p2p);
  if (choose_pipelined(tuning_, count * proto::dtype_size(dtype), p2p.size())) {
    const RootedSpec spec{buffer, count, dtype, op, root_node};
    return run(make_chain_reduce(p2p, tag_base, spec, hooks, tuning_), p2p);
  }
  if (count > 0) hooks.prepare(0, count);
  const bool at_root = p2p.rank() == root_node;
  auto end = [hooks, count, at_root] {
    if (at_root && count > 0) hooks.done(0, count);
  };
  // The transport carries any count of these itself.
  const TransportHandle h = net_.start_reduce(comm, buffer, count, dtype, op, root_node);
  return run(std::make_unique<NativeCollective>(net_, h, std::move(end)), p2p);
}

void InterNode::free_group(NodeComm comm) {
  if (comm != kAllNodes) groups_.erase(comm);
  net_.free_group(comm);
}

bool InterNode::test(TransportHandle handle) {
  auto it = algorithms_.find(handle);
  if (it == algorithms_.end()) return net_.test(handle);
  try {
    if (!pass_polled_) {
      it->second.net->poll();
      pass_polled_ = true;
    }
    if (!it->second.algorithm->progress()) return false;
  } catch (...) {
    // Its hooks must never run again: the engine fails and forgets the operation.
    algorithms_.erase(it);
    throw;
  }
  algorithms_.erase(it);
  return true;
}

}  // namespace nodecomm::daemon
