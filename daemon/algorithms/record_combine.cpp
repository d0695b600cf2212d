#include "algorithms/record_combine.hpp"

#include <fmt/format.h>

#include <vector>

#include "algorithms/operation_tags.hpp"
#include "net/transport.hpp"

namespace nodecomm::daemon {
namespace {

class RecordCombine final : public AllreduceAlgorithm {
 public:
  RecordCombine(PointToPoint& net, int tag_base, RecordCombineSpec spec)
      : net_(net), spec_(std::move(spec)), send_bytes_(spec_.send_bytes) {
    // The pairing of the recursive doubling allreduce (allreduce_algorithms.cpp): of the first
    // 2 x extra nodes, each even one hands its record to the odd one after it; the rest run
    // the exchanges as virtual ranks 0 .. pow2-1.
    const uint32_t n = net.size();
    const uint32_t r = net.rank();
    uint32_t pow2 = 1;
    while (pow2 * 2 <= n) pow2 *= 2;
    extra_ = n - pow2;
    int levels = 0;
    for (uint32_t m = 1; m < pow2; m <<= 1) ++levels;
    const int post_tag = tag_base + 1 + levels;
    if (r < 2 * extra_ && r % 2 == 0) {
      steps_.push_back({Kind::kSend, r + 1, tag_base, 0, 0});
      steps_.push_back({Kind::kReceive, r + 1, post_tag, 0, 0});
      return;
    }
    if (r < 2 * extra_) steps_.push_back({Kind::kReceiveAndCombine, r - 1, tag_base, r - 1, 1});
    const uint32_t me = r < 2 * extra_ ? r / 2 : r - extra_;
    int level = 0;
    for (uint32_t mask = 1; mask < pow2; mask <<= 1, ++level) {
      const uint32_t partner = me ^ mask;
      // Before this exchange the partner holds its group of `mask` virtual ranks.
      const uint32_t base = partner & ~(mask - 1);
      const uint32_t first = real_first(base);
      steps_.push_back({Kind::kExchange, real_first(partner) + (partner < extra_ ? 1 : 0),
                        tag_base + 1 + level, first, real_first(base + mask) - first});
    }
    if (r < 2 * extra_) steps_.push_back({Kind::kSend, r - 1, post_tag, 0, 0});
  }

  bool progress() override {
    while (next_ <= steps_.size()) {
      if (send_ != 0 && net_.done(send_)) send_ = 0;
      if (recv_ != 0 && net_.done(recv_)) recv_ = 0;
      if (send_ != 0 || recv_ != 0) return false;
      if (next_ > 0) {
        const Step& s = steps_[next_ - 1];
        if (s.kind == Kind::kExchange || s.kind == Kind::kReceiveAndCombine) {
          send_bytes_ = spec_.combine(s.first, s.nodes);
          if (send_bytes_ > spec_.capacity) {
            throw TransportError(
                fmt::format("record combination: {} bytes to send from a "
                            "{}-byte record",
                            send_bytes_, spec_.capacity));
          }
        }
      }
      if (next_ == steps_.size()) {
        ++next_;
        return true;
      }
      const Step& s = steps_[next_++];
      if (s.kind == Kind::kSend || s.kind == Kind::kExchange) {
        send_ = net_.isend(0, s.peer, s.tag, spec_.record, send_bytes_);
      }
      if (s.kind != Kind::kSend) {
        uint8_t* into = s.kind == Kind::kReceive ? spec_.record : spec_.incoming;
        recv_ = net_.irecv(0, s.peer, s.tag, into, spec_.capacity);
      }
    }
    return true;
  }

 private:
  enum class Kind : uint8_t { kSend, kReceive, kReceiveAndCombine, kExchange };
  struct Step {
    Kind kind;
    uint32_t peer;
    int tag;
    uint32_t first;  // the nodes whose record arrives (kExchange, kReceiveAndCombine)
    uint32_t nodes;
  };

  // The lowest real node of virtual rank v (v = pow2 gives the node count).
  uint32_t real_first(uint32_t v) const { return v < extra_ ? 2 * v : v + extra_; }

  PointToPoint& net_;
  RecordCombineSpec spec_;
  size_t send_bytes_;
  uint32_t extra_ = 0;
  std::vector<Step> steps_;
  size_t next_ = 0;
  P2pRequest send_ = 0;
  P2pRequest recv_ = 0;
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
