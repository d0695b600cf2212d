#include <cstring>

#include "transport.hpp"

namespace nodecomm::daemon {
namespace {

class LoopbackTransport final : public Transport {
 public:
  uint32_t node_index() const override { return 0; }
  uint32_t node_count() const override { return 1; }
  std::string name() const override { return "loopback"; }
  TransportHandle start_allreduce(void*, size_t, proto::DType, proto::RedOp) override {
    return next_++;
  }
  TransportHandle start_allgather(const void* send, size_t bytes, void* recv) override {
    std::memcpy(recv, send, bytes);
    return next_++;
  }
  bool test(TransportHandle) override { return true; }
  size_t in_flight() const override { return 0; }

 private:
  TransportHandle next_ = 1;
};

}  // namespace

std::unique_ptr<Transport> make_loopback_transport() {
  return std::make_unique<LoopbackTransport>();
}

}  // namespace nodecomm::daemon
