// An in-memory network of N simulated daemons for the inter-node algorithms' unit tests,
// driven round-robin in one thread. Sends complete only once matched (rendezvous, the
// strictest MPI behaviour), and a seeded random share of matches is held back each poll, so
// the state machines see completions in many orders.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "net/p2p.hpp"
#include "nodecomm/proto/types.hpp"

namespace nodecomm::daemon::test {

class FakeNetwork {
 public:
  FakeNetwork(uint32_t nodes, uint32_t lanes, uint32_t seed)
      : nodes_(nodes), lanes_(lanes), rng_(seed) {}

  struct Message {
    P2pRequest id;
    const void* data;
    size_t bytes;
  };
  struct Receive {
    P2pRequest id;
    void* data;
    size_t bytes;
  };
  using Key = std::tuple<uint32_t, uint32_t, uint32_t, int>;  // lane, from, to, tag

  P2pRequest send(Key key, const void* data, size_t bytes) {
    sends_[key].push_back({next_, data, bytes});
    return next_++;
  }
  P2pRequest recv(Key key, void* data, size_t bytes) {
    recvs_[key].push_back({next_, data, bytes});
    return next_++;
  }
  // Matches the oldest send with the oldest receive of each key, skipping some at random.
  void poll() {
    for (auto it = recvs_.begin(); it != recvs_.end();) {
      auto& queue = it->second;
      auto& sent = sends_[it->first];
      while (!queue.empty() && !sent.empty()) {
        if (std::uniform_int_distribution<int>(0, 3)(rng_) == 0) break;  // later
        const Message m = sent.front();
        const Receive r = queue.front();
        if (short_messages_) {
          ASSERT_LE(m.bytes, r.bytes) << "a message longer than its receive";
        } else {
          ASSERT_EQ(m.bytes, r.bytes) << "message sizes disagree";
        }
        std::memcpy(r.data, m.data, m.bytes);
        completed_.insert(m.id);
        completed_.insert(r.id);
        sent.pop_front();
        queue.pop_front();
      }
      if (sent.empty()) sends_.erase(it->first);
      it = queue.empty() ? recvs_.erase(it) : std::next(it);
    }
  }
  bool done(P2pRequest id) { return completed_.erase(id) > 0; }
  // Receives may be longer than their messages, as MPI allows (variable-size records).
  void allow_short_messages() { short_messages_ = true; }
  bool idle() const {
    for (const auto& [key, q] : sends_) {
      if (!q.empty()) return false;
    }
    for (const auto& [key, q] : recvs_) {
      if (!q.empty()) return false;
    }
    return true;
  }
  uint32_t nodes() const { return nodes_; }
  uint32_t lanes() const { return lanes_; }

 private:
  uint32_t nodes_;
  uint32_t lanes_;
  std::mt19937 rng_;
  bool short_messages_ = false;
  P2pRequest next_ = 1;
  std::map<Key, std::deque<Message>> sends_;
  std::map<Key, std::deque<Receive>> recvs_;
  std::set<P2pRequest> completed_;
};

class FakeEndpoint final : public PointToPoint {
 public:
  FakeEndpoint(FakeNetwork& net, uint32_t rank) : net_(net), rank_(rank) {}
  uint32_t rank() const override { return rank_; }
  uint32_t size() const override { return net_.nodes(); }
  uint32_t lanes() const override { return net_.lanes(); }
  int max_tag() const override { return 32767; }
  P2pRequest isend(uint32_t lane, uint32_t peer, int tag, const void* data, size_t bytes) override {
    EXPECT_LT(lane, lanes());
    EXPECT_LE(tag, max_tag());
    return net_.send({lane, rank_, peer, tag}, data, bytes);
  }
  P2pRequest irecv(uint32_t lane, uint32_t peer, int tag, void* data, size_t bytes) override {
    return net_.recv({lane, peer, rank_, tag}, data, bytes);
  }
  void poll() override { net_.poll(); }
  bool done(P2pRequest request) override { return net_.done(request); }

 private:
  FakeNetwork& net_;
  uint32_t rank_;
};

// Polls each unfinished node's endpoint and advances its algorithm, round-robin, until every
// one is done. Fails the test if they stop making progress within `max_rounds` rounds; returns
// early on a fatal failure (an ASSERT in a hook). Callers check HasFatalFailure() after it.
template <class Algorithm>
void drive_all(std::vector<std::unique_ptr<FakeEndpoint>>& endpoints,
               std::vector<std::unique_ptr<Algorithm>>& algorithms, int max_rounds = 1'000'000) {
  std::vector<bool> finished(algorithms.size(), false);
  size_t remaining = algorithms.size();
  for (int round = 0; remaining > 0; ++round) {
    ASSERT_LT(round, max_rounds) << "no progress: the algorithm hangs";
    for (size_t n = 0; n < algorithms.size(); ++n) {
      if (finished[n]) continue;
      endpoints[n]->poll();
      if (algorithms[n]->progress()) {
        finished[n] = true;
        --remaining;
      }
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

// Node n's contribution at element i for the algorithms' checks: small integers, so every
// order of combining is exact.
inline int64_t contribution(uint32_t node, size_t i, proto::RedOp op) {
  if (op == proto::RedOp::kProd) return static_cast<int64_t>((node + i) % 3) + 1;
  return static_cast<int64_t>((i * 7 + size_t{node} * 13) % 101) - 50;
}

// The combination of every node's contribution at element i (sum, prod, min or max).
inline int64_t reference(uint32_t nodes, size_t i, proto::RedOp op) {
  int64_t acc = contribution(0, i, op);
  for (uint32_t n = 1; n < nodes; ++n) {
    const int64_t v = contribution(n, i, op);
    if (op == proto::RedOp::kSum) acc += v;
    if (op == proto::RedOp::kProd) acc *= v;
    if (op == proto::RedOp::kMin) acc = std::min(acc, v);
    if (op == proto::RedOp::kMax) acc = std::max(acc, v);
  }
  return acc;
}

// Element i of a buffer of dtype t, as the small integers the checks use.
inline void store(proto::DType t, void* buffer, size_t i, int64_t v) {
  switch (t) {
    case proto::DType::kF32:
      static_cast<float*>(buffer)[i] = static_cast<float>(v);
      break;
    case proto::DType::kF64:
      static_cast<double*>(buffer)[i] = static_cast<double>(v);
      break;
    case proto::DType::kI32:
      static_cast<int32_t*>(buffer)[i] = static_cast<int32_t>(v);
      break;
    case proto::DType::kI64:
      static_cast<int64_t*>(buffer)[i] = v;
      break;
    default:
      static_cast<uint8_t*>(buffer)[i] = static_cast<uint8_t>(v);
      break;
  }
}

inline int64_t load(proto::DType t, const void* buffer, size_t i) {
  switch (t) {
    case proto::DType::kF32:
      return static_cast<int64_t>(static_cast<const float*>(buffer)[i]);
    case proto::DType::kF64:
      return static_cast<int64_t>(static_cast<const double*>(buffer)[i]);
    case proto::DType::kI32:
      return static_cast<const int32_t*>(buffer)[i];
    case proto::DType::kI64:
      return static_cast<const int64_t*>(buffer)[i];
    default:
      return static_cast<const uint8_t*>(buffer)[i];
  }
}

}  // namespace nodecomm::daemon::test
