// Transfers larger than one MPI message (issue 16, point 6): chunked_transfers cuts every
// block into messages of at most the limit, both sides alike, and nothing is truncated. An
// in-memory network matches messages per (sender, receiver, tag) in order, as MPI does, and
// insists that the sizes of matched messages agree.
#include "algorithms/chunked_transfers.hpp"

#include <gtest/gtest.h>

#include <climits>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "net/transport.hpp"

namespace nodecomm::daemon {
namespace {

class Network {
 public:
  explicit Network(bool copy) : copy_(copy) {}
  struct Message {
    P2pRequest id;
    uint8_t* data;
    size_t bytes;
  };
  using Key = std::tuple<uint32_t, uint32_t, int>;  // from, to, tag
  P2pRequest post(std::map<Key, std::deque<Message>>& queues, Key key, uint8_t* data,
                  size_t bytes) {
    largest_ = std::max(largest_, bytes);
    queues[key].push_back({next_, data, bytes});
    return next_++;
  }
  void poll() {
    for (auto& [key, recvs] : recvs_) {
      auto& sends = sends_[key];
      while (!recvs.empty() && !sends.empty()) {
        const Message s = sends.front();
        const Message r = recvs.front();
        ASSERT_EQ(s.bytes, r.bytes) << "matched messages disagree on their size";
        if (copy_) std::memcpy(r.data, s.data, s.bytes);
        if (!copy_) received_.push_back({r.data, r.bytes});
        done_.insert(s.id);
        done_.insert(r.id);
        sends.pop_front();
        recvs.pop_front();
      }
    }
  }
  bool done(P2pRequest id) { return done_.erase(id) > 0; }
  std::map<Key, std::deque<Message>> sends_;
  std::map<Key, std::deque<Message>> recvs_;
  std::vector<std::pair<uint8_t*, size_t>> received_;  // without copying: where, how much
  size_t largest_ = 0;

 private:
  bool copy_;
  P2pRequest next_ = 1;
  std::set<P2pRequest> done_;
};

class Endpoint final : public PointToPoint {
 public:
  Endpoint(Network& net, uint32_t rank, uint32_t size) : net_(net), rank_(rank), size_(size) {}
  uint32_t rank() const override { return rank_; }
  uint32_t size() const override { return size_; }
  uint32_t lanes() const override { return 1; }
  int max_tag() const override { return 32767; }
  P2pRequest isend(uint32_t, uint32_t peer, int tag, const void* data, size_t bytes) override {
    return net_.post(net_.sends_, {rank_, peer, tag},
                     const_cast<uint8_t*>(static_cast<const uint8_t*>(data)), bytes);
  }
  P2pRequest irecv(uint32_t, uint32_t peer, int tag, void* data, size_t bytes) override {
    return net_.post(net_.recvs_, {peer, rank_, tag}, static_cast<uint8_t*>(data), bytes);
  }
  void poll() override { net_.poll(); }
  bool done(P2pRequest request) override { return net_.done(request); }

 private:
  Network& net_;
  uint32_t rank_;
  uint32_t size_;
};

void run(std::vector<Endpoint>& endpoints, std::vector<std::unique_ptr<AllreduceAlgorithm>>& ops) {
  for (int round = 0; round < 100000; ++round) {
    bool all = true;
    for (size_t n = 0; n < ops.size(); ++n) {
      endpoints[n].poll();
      all = ops[n]->progress() && all;
    }
    if (all) return;
  }
  FAIL() << "chunked transfers did not complete";
}

TEST(ChunkedTransfers, MessageSizesTileTheBlock) {
  EXPECT_EQ(message_count(0, 10), 0u);
  EXPECT_EQ(message_count(10, 10), 1u);
  EXPECT_EQ(message_count(11, 10), 2u);
  EXPECT_EQ(message_bytes(11, 10, 0), 10u);
  EXPECT_EQ(message_bytes(11, 10, 1), 1u);
  const size_t limit = INT_MAX;
  EXPECT_EQ(message_count(limit, limit), 1u);
  EXPECT_EQ(message_count(limit + 1, limit), 2u);
  EXPECT_EQ(message_bytes(limit + 1, limit, 1), 1u);
  // 5 GiB + 3: three messages, none above INT_MAX, summing to the block.
  const size_t block = (size_t{5} << 30) + 3;
  size_t total = 0;
  for (size_t i = 0; i < message_count(block, limit); ++i) {
    EXPECT_LE(message_bytes(block, limit, i), limit);
    total += message_bytes(block, limit, i);
  }
  EXPECT_EQ(message_count(block, limit), 3u);
  EXPECT_EQ(total, block);
}

// Blocks of 2 GiB and more between two nodes, at MPI's real limit: the messages posted never
// exceed INT_MAX, and the receives tile each block exactly (no data is touched: the network
// only records where each message lands).
TEST(ChunkedTransfers, BlocksBeyondIntMaxGoAsIntSizedMessages) {
  Network net(/*copy=*/false);
  std::vector<Endpoint> endpoints{{net, 0, 2}, {net, 1, 2}};
  const size_t big = (size_t{1} << 31) + 12345;  // just over 2 GiB
  const size_t bigger = (size_t{9} << 30) + 1;
  // Addresses that are never dereferenced.
  auto* base0 = reinterpret_cast<uint8_t*>(uintptr_t{1} << 44);
  auto* base1 = reinterpret_cast<uint8_t*>(uintptr_t{1} << 45);
  std::vector<std::unique_ptr<AllreduceAlgorithm>> ops;
  ops.push_back(make_chunked_transfers(endpoints[0], 7, {{1, base0, big}},
                                       {{1, base0 + big, bigger}}, INT_MAX));
  ops.push_back(make_chunked_transfers(endpoints[1], 7, {{0, base1, bigger}},
                                       {{0, base1 + bigger, big}}, INT_MAX));
  run(endpoints, ops);
  EXPECT_LE(net.largest_, size_t{INT_MAX});
  size_t to0 = 0;
  size_t to1 = 0;
  uint8_t* next0 = base0 + big;
  uint8_t* next1 = base1 + bigger;
  for (const auto& [at, bytes] : net.received_) {
    if (at >= base1) {
      EXPECT_EQ(at, next1);
      next1 += bytes;
      to1 += bytes;
    } else {
      EXPECT_EQ(at, next0);
      next0 += bytes;
      to0 += bytes;
    }
  }
  EXPECT_EQ(to0, bigger);
  EXPECT_EQ(to1, big);
}

// An alltoallv over three nodes with a tiny message limit and uneven blocks (empty ones, one
// to itself): every byte arrives where it belongs.
TEST(ChunkedTransfers, AlltoallvWithSmallMessagesIsExact) {
  constexpr uint32_t kNodes = 3;
  constexpr size_t kLimit = 7;
  Network net(/*copy=*/true);
  std::vector<Endpoint> endpoints;
  for (uint32_t n = 0; n < kNodes; ++n) endpoints.emplace_back(net, n, kNodes);
  // bytes[from][to]
  const size_t bytes[kNodes][kNodes] = {{5, 0, 29}, {64, 7, 8}, {1, 100, 0}};
  std::vector<std::vector<uint8_t>> send(kNodes);
  std::vector<std::vector<uint8_t>> recv(kNodes);
  std::vector<std::unique_ptr<AllreduceAlgorithm>> ops;
  for (uint32_t me = 0; me < kNodes; ++me) {
    size_t out = 0;
    size_t in = 0;
    for (uint32_t n = 0; n < kNodes; ++n) {
      out += bytes[me][n];
      in += bytes[n][me];
    }
    send[me].resize(out);
    recv[me].assign(in, 0xEE);
    for (size_t i = 0; i < out; ++i) send[me][i] = static_cast<uint8_t>(me * 61 + i);
  }
  for (uint32_t me = 0; me < kNodes; ++me) {
    std::vector<Transfer> sends;
    std::vector<Transfer> recvs;
    size_t out = 0;
    size_t in = 0;
    for (uint32_t n = 0; n < kNodes; ++n) {
      sends.push_back({n, send[me].data() + out, bytes[me][n]});
      recvs.push_back({n, recv[me].data() + in, bytes[n][me]});
      out += bytes[me][n];
      in += bytes[n][me];
    }
    ops.push_back(make_chunked_transfers(endpoints[me], 3, sends, recvs, kLimit));
  }
  run(endpoints, ops);
  EXPECT_LE(net.largest_, kLimit);
  for (uint32_t me = 0; me < kNodes; ++me) {
    size_t in = 0;
    for (uint32_t from = 0; from < kNodes; ++from) {
      size_t offset = 0;  // where `from`'s block to `me` starts in its send buffer
      for (uint32_t n = 0; n < me; ++n) offset += bytes[from][n];
      for (size_t i = 0; i < bytes[from][me]; ++i) {
        ASSERT_EQ(recv[me][in + i], send[from][offset + i])
            << "node " << me << " byte " << i << " from node " << from;
      }
      in += bytes[from][me];
    }
  }
}

TEST(ChunkedTransfers, ABlockToItselfMustAgreeInSize) {
  Network net(/*copy=*/true);
  Endpoint endpoint(net, 0, 1);
  std::vector<uint8_t> a(10, 1);
  std::vector<uint8_t> b(10, 0);
  EXPECT_THROW(make_chunked_transfers(endpoint, 0, {{0, a.data(), 10}}, {{0, b.data(), 9}}, 4),
               TransportError);
  auto op = make_chunked_transfers(endpoint, 0, {{0, a.data(), 10}}, {{0, b.data(), 10}}, 4);
  EXPECT_TRUE(op->progress());
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace nodecomm::daemon
