#include "algorithms/record_combine.hpp"

#include <fmt/format.h>

#include "algorithms/operation_tags.hpp"
#include "algorithms/recursive_doubling.hpp"
#include "net/transport.hpp"

namespace nodecomm::daemon {
namespace {

class RecordCombine final : public AllreduceAlgorithm {
 public:
  RecordCombine(PointToPoint& net, int tag_base, RecordCombineSpec spec)
      : net_(net),
        spec_(std::move(spec)),
        send_bytes_(spec_.send_bytes),
        walk_(recursive_doubling_steps(net.rank(), net.size(), tag_base)) {}

  bool progress() override {
    const auto post = [this](const DoublingStep& s, P2pRequest& send, P2pRequest& recv) {
      if (s.kind == DoublingStep::Kind::kSend || s.kind == DoublingStep::Kind::kExchange) {
        send = net_.isend(0, s.peer, s.tag, spec_.record, send_bytes_);
      }
      if (s.kind != DoublingStep::Kind::kSend) {
        uint8_t* into = s.kind == DoublingStep::Kind::kReceive ? spec_.record : spec_.incoming;
        recv = net_.irecv(0, s.peer, s.tag, into, spec_.capacity);
      }
    };
    const auto combine = [this](const DoublingStep& s) {
      send_bytes_ = spec_.combine(s.first, s.nodes);
      if (send_bytes_ > spec_.capacity) {
        throw TransportError(
            fmt::format("record combination: {} bytes to send from a {}-byte record", send_bytes_,
                        spec_.capacity));
      }
    };
    return walk_.advance(net_, post, combine);
  }

 private:
  PointToPoint& net_;
  RecordCombineSpec spec_;
  size_t send_bytes_;
  DoublingWalk walk_;
};

}  // namespace

std::unique_ptr<AllreduceAlgorithm> make_record_combine(PointToPoint& net, int tag_base,
                                                        RecordCombineSpec spec) {
  check_tags(net, tag_base);
  if (spec.send_bytes > spec.capacity || !spec.combine) {
    throw TransportError(fmt::format("record combination: {} bytes to send from a {}-byte record",
                                     spec.send_bytes, spec.capacity));
  }
  return std::make_unique<RecordCombine>(net, tag_base, std::move(spec));
}

}  // namespace nodecomm::daemon
