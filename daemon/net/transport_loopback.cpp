#include <cstring>
#include <map>

#include "net/transport.hpp"

namespace nodecomm::daemon {
namespace {

class LoopbackTransport final : public Transport {
 public:
  uint32_t node_index() const override { return 0; }
  uint32_t node_count() const override { return 1; }
  std::string name() const override { return "loopback"; }
  TransportHandle start_allreduce(NodeComm, void*, size_t count, proto::DType, proto::RedOp,
                                  proto::Compression, const AllreduceHooks& hooks) override {
    if (count > 0) {
      hooks.prepare(0, count);
      hooks.done(0, count);
    }
    return next_++;
  }
  // One node: every in-place operation already holds its result.
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
  TransportHandle start_alltoallv(NodeComm, const void* send, std::vector<size_t> sbytes,
                                  std::vector<size_t> sdispls, void* recv, std::vector<size_t>,
                                  std::vector<size_t> rdispls) override {
    if (send != recv) {
      std::memcpy(static_cast<char*>(recv) + rdispls[0],
                  static_cast<const char*>(send) + sdispls[0], sbytes[0]);
    }
    return next_++;
  }
  TransportHandle start_barrier(NodeComm) override { return next_++; }
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
  TransportHandle start_allgather(const void* send, size_t bytes, void* recv) override {
    std::memcpy(recv, send, bytes);
    return next_++;
  }
  bool test(TransportHandle) override { return true; }
  size_t in_flight() const override { return 0; }

 private:
  TransportHandle next_ = 1;
  NodeComm next_comm_ = 1;
  std::map<TransportHandle, std::vector<NodeComm>> groups_;
};

}  // namespace

std::unique_ptr<Transport> make_loopback_transport() {
  return std::make_unique<LoopbackTransport>();
}

}  // namespace nodecomm::daemon
