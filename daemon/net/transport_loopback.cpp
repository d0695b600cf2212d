// The transport of a daemon alone: one node, so every operation is complete as soon as it
// starts and a group of one already holds every result in place.
#include <map>

#include "net/transport.hpp"

namespace nodecomm::daemon {
namespace {

// Point-to-point with no peers: the inter-node runner completes a one-node group's algorithms
// without a message, so nothing is ever sent here.
class LoopbackPointToPoint final : public PointToPoint {
 public:
  uint32_t rank() const override { return 0; }
  uint32_t size() const override { return 1; }
  uint32_t lanes() const override { return 1; }
  int max_tag() const override { return 32767; }
  P2pRequest isend(uint32_t, uint32_t peer, int, const void*, size_t) override {
    throw TransportError("loopback transport: no node " + std::to_string(peer) + " to send to");
  }
  P2pRequest irecv(uint32_t, uint32_t peer, int, void*, size_t) override {
    throw TransportError("loopback transport: no node " + std::to_string(peer) +
                         " to receive from");
  }
  void poll() override {}
  bool done(P2pRequest) override { return false; }
};

class LoopbackTransport final : public Transport {
 public:
  std::string name() const override { return "loopback"; }

  uint32_t comm_rank(NodeComm) const override { return 0; }
  uint32_t comm_size(NodeComm) const override { return 1; }
  TransportHandle start_split_groups(NodeComm, std::vector<bool> include) override {
    std::vector<NodeComm> made;
    made.reserve(include.size());
    for (bool in : include) made.push_back(in ? next_comm_++ : kAllNodes);
    groups_.emplace(next_, std::move(made));
    return next_++;
  }
  std::vector<NodeComm> take_groups(TransportHandle handle) override {
    auto made = std::move(groups_[handle]);
    groups_.erase(handle);
    return made;
  }
  void free_group(NodeComm) override {}
  PointToPoint& p2p(NodeComm) override { return p2p_; }

  size_t max_count() const override { return SIZE_MAX; }
  // One node: every in-place operation already holds its result.
  TransportHandle start_allreduce(NodeComm, void*, size_t, proto::DType, proto::RedOp) override {
    return next_++;
  }
  TransportHandle start_reduce(NodeComm, void*, size_t, proto::DType, proto::RedOp,
                               uint32_t) override {
    return next_++;
  }
  TransportHandle start_reduce_scatter(NodeComm, void*, std::vector<size_t>, proto::DType,
                                       proto::RedOp) override {
    return next_++;
  }
  TransportHandle start_broadcast(NodeComm, void*, size_t, uint32_t) override { return next_++; }
  TransportHandle start_allgatherv(NodeComm, void*, std::vector<size_t>,
                                   std::vector<size_t>) override {
    return next_++;
  }
  TransportHandle start_gatherv(NodeComm, void*, std::vector<size_t>, std::vector<size_t>,
                                uint32_t) override {
    return next_++;
  }
  TransportHandle start_scatterv(NodeComm, void*, std::vector<size_t>, std::vector<size_t>,
                                 uint32_t) override {
    return next_++;
  }
  TransportHandle start_barrier(NodeComm) override { return next_++; }

  bool test(TransportHandle) override { return true; }
  size_t in_flight() const override { return 0; }

 private:
  TransportHandle next_ = 1;
  NodeComm next_comm_ = 1;
  std::map<TransportHandle, std::vector<NodeComm>> groups_;
  LoopbackPointToPoint p2p_;
};

}  // namespace

std::unique_ptr<Transport> make_loopback_transport() {
  return std::make_unique<LoopbackTransport>();
}

}  // namespace nodecomm::daemon
