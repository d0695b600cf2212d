#include "algorithms/chunked_transfers.hpp"

#include <fmt/format.h>

#include <cstring>

#include "net/transport.hpp"

namespace nodecomm::daemon {

size_t message_count(size_t bytes, size_t max_message) {
  return bytes == 0 ? 0 : (bytes - 1) / max_message + 1;
}

size_t message_bytes(size_t bytes, size_t max_message, size_t index) {
  const size_t offset = index * max_message;
  return offset >= bytes ? 0 : std::min(max_message, bytes - offset);
}

namespace {

class ChunkedTransfers final : public AllreduceAlgorithm {
 public:
  ChunkedTransfers(PointToPoint& net, int tag, const std::vector<Transfer>& sends,
                   const std::vector<Transfer>& recvs, size_t max_message)
      : net_(net) {
    if (max_message == 0) throw TransportError("chunked transfer with a message limit of 0");
    const uint32_t me = net.rank();
    for (const Transfer& r : recvs) {
      if (r.peer == me) {
        for (const Transfer& s : sends) {
          if (s.peer != me) continue;
          if (s.bytes != r.bytes) {
            throw TransportError(
                fmt::format("chunked transfer: node {} sends itself {} bytes but receives {}", me,
                            s.bytes, r.bytes));
          }
          if (s.data != r.data && s.bytes > 0) std::memmove(r.data, s.data, s.bytes);
        }
        continue;
      }
      for (size_t i = 0; i < message_count(r.bytes, max_message); ++i) {
        pending_.push_back(net.irecv(0, r.peer, tag, r.data + i * max_message,
                                     message_bytes(r.bytes, max_message, i)));
      }
    }
    for (const Transfer& s : sends) {
      if (s.peer == me) continue;
      for (size_t i = 0; i < message_count(s.bytes, max_message); ++i) {
        pending_.push_back(net.isend(0, s.peer, tag, s.data + i * max_message,
                                     message_bytes(s.bytes, max_message, i)));
      }
    }
  }
  bool progress() override {
    std::erase_if(pending_, [this](P2pRequest r) { return net_.done(r); });
    return pending_.empty();
  }

 private:
  PointToPoint& net_;
  std::vector<P2pRequest> pending_;
};

}  // namespace

std::unique_ptr<AllreduceAlgorithm> make_chunked_transfers(PointToPoint& net, int tag,
                                                           const std::vector<Transfer>& sends,
                                                           const std::vector<Transfer>& recvs,
                                                           size_t max_message) {
  return std::make_unique<ChunkedTransfers>(net, tag, sends, recvs, max_message);
}

}  // namespace nodecomm::daemon
