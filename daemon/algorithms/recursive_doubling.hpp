// The recursive-doubling schedule shared by the allreduce (allreduce_algorithms.cpp) and the
// scheduler's record combination (record_combine.cpp): recursive doubling on the largest power
// of two p <= N. The first 2(N-p) nodes pair up beforehand (each even one hands its data to the
// odd one after it and sits out) and the odd ones hand the result back afterwards. After each
// exchange both partners hold the combination of the same two groups of nodes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "net/p2p.hpp"

namespace nodecomm::daemon {

struct DoublingStep {
  enum class Kind : uint8_t { kSend, kReceive, kReceiveAndCombine, kExchange };
  Kind kind;
  uint32_t peer;
  int tag;
  // kExchange and kReceiveAndCombine: the contiguous nodes [first, first + nodes) whose
  // combination arrives.
  uint32_t first;
  uint32_t nodes;

  bool combines() const { return kind == Kind::kExchange || kind == Kind::kReceiveAndCombine; }
};

// Node `rank`'s steps among `size` nodes, with tags from `tag_base` (at most 2 + log2(size)).
std::vector<DoublingStep> recursive_doubling_steps(uint32_t rank, uint32_t size, int tag_base);

// Walks a node's steps as far as completed messages allow, one send and one receive at a time.
class DoublingWalk {
 public:
  explicit DoublingWalk(std::vector<DoublingStep> steps) : steps_(std::move(steps)) {}

  // `post(step, send, recv)` starts the step's messages (setting the requests it starts);
  // `combine(step)` runs once a combining step's messages are complete. True once every step
  // is done (and on every call after).
  template <class Post, class Combine>
  bool advance(PointToPoint& net, Post&& post, Combine&& combine) {
    while (next_ <= steps_.size()) {
      if (send_ != 0 && net.done(send_)) send_ = 0;
      if (recv_ != 0 && net.done(recv_)) recv_ = 0;
      if (send_ != 0 || recv_ != 0) return false;
      if (next_ > 0 && steps_[next_ - 1].combines()) combine(steps_[next_ - 1]);
      if (next_ == steps_.size()) break;
      post(steps_[next_++], send_, recv_);
    }
    next_ = steps_.size() + 1;
    return true;
  }

 private:
  std::vector<DoublingStep> steps_;
  size_t next_ = 0;
  P2pRequest send_ = 0;
  P2pRequest recv_ = 0;
};

}  // namespace nodecomm::daemon
