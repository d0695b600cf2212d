// The inter-node allreduce algorithms over an in-memory network of N simulated daemons,
// driven round-robin in one thread. Sends complete only once matched (rendezvous, the
// strictest MPI behaviour), and a seeded random share of matches is held back each poll, so
// the state machines see completions in many orders. Every element of every node's result
// is checked against a reference computed here, and every range must be prepared exactly
// once before it is read and delivered exactly once.
#include "algorithms/allreduce_algorithms.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "fake_network.hpp"
#include "net/transport.hpp"

namespace nodecomm::daemon {
namespace {

using proto::DType;
using proto::RedOp;
using test::contribution;
using test::drive_all;
using test::FakeEndpoint;
using test::FakeNetwork;
using test::load;
using test::reference;
using test::store;

struct Case {
  AllreduceAlgorithmKind kind;
  uint32_t nodes;
  size_t count;
  DType dtype;
  RedOp op;
  size_t chunk_bytes;
  uint32_t depth;
  uint32_t lanes;
};

void run_case(const Case& c, uint32_t seed) {
  SCOPED_TRACE(::testing::Message()
               << algorithm_name(c.kind) << " nodes " << c.nodes << " count " << c.count
               << " dtype " << proto::dtype_name(c.dtype) << " op " << proto::redop_name(c.op)
               << " chunk " << c.chunk_bytes << " depth " << c.depth << " lanes " << c.lanes
               << " seed " << seed);
  FakeNetwork net(c.nodes, c.lanes, seed);
  const size_t elem = proto::dtype_size(c.dtype);
  std::vector<std::vector<uint8_t>> buffers(c.nodes, std::vector<uint8_t>(c.count * elem + 1));
  std::vector<std::vector<uint8_t>> prepared(c.nodes, std::vector<uint8_t>(c.count, 0));
  std::vector<std::vector<uint8_t>> delivered(c.nodes, std::vector<uint8_t>(c.count, 0));
  std::vector<std::vector<uint8_t>> scratch(c.nodes);
  std::vector<std::unique_ptr<FakeEndpoint>> endpoints;
  std::vector<std::unique_ptr<AllreduceAlgorithm>> algorithms;
  AlgorithmTuning tuning;
  tuning.chunk_bytes = c.chunk_bytes;
  tuning.pipeline_depth = c.depth;
  tuning.endpoints = c.lanes;
  for (uint32_t n = 0; n < c.nodes; ++n) {
    endpoints.push_back(std::make_unique<FakeEndpoint>(net, n));
    void* buffer = buffers[n].data();
    AllreduceHooks hooks;
    hooks.prepare = [&, n, buffer](size_t first, size_t count) {
      for (size_t i = first; i < first + count; ++i) {
        ASSERT_EQ(prepared[n][i]++, 0) << "element " << i << " prepared twice on node " << n;
        store(c.dtype, buffer, i, contribution(n, i, c.op));
      }
    };
    hooks.done = [&, n](size_t first, size_t count) {
      for (size_t i = first; i < first + count; ++i) {
        ASSERT_EQ(prepared[n][i], 1) << "element " << i << " done before prepared on node " << n;
        ASSERT_EQ(delivered[n][i]++, 0) << "element " << i << " delivered twice on node " << n;
      }
    };
    hooks.scratch = [&, n](size_t bytes) {
      EXPECT_TRUE(scratch[n].empty()) << "scratch asked for twice";
      scratch[n].resize(bytes);
      return static_cast<void*>(scratch[n].data());
    };
    const AllreduceSpec spec{buffer, c.count, c.dtype, c.op};
    if (c.kind == AllreduceAlgorithmKind::kRing) {
      algorithms.push_back(make_ring_allreduce(*endpoints[n], 2048, spec, hooks, tuning));
    } else {
      algorithms.push_back(make_recursive_doubling_allreduce(*endpoints[n], 2048, spec, hooks));
    }
  }
  drive_all(endpoints, algorithms);
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_TRUE(net.idle()) << "messages left unmatched";
  for (uint32_t n = 0; n < c.nodes; ++n) {
    for (size_t i = 0; i < c.count; ++i) {
      ASSERT_EQ(prepared[n][i], 1) << "node " << n << " element " << i << " never prepared";
      ASSERT_EQ(delivered[n][i], 1) << "node " << n << " element " << i << " never delivered";
      ASSERT_EQ(load(c.dtype, buffers[n].data(), i), reference(c.nodes, i, c.op))
          << "node " << n << " element " << i;
    }
  }
}

// One test per node count, so that a run can pick layouts (the sanitizer stage leaves out the
// largest: tools/sanitize.sh).
class AllreduceRingOnNodes : public ::testing::TestWithParam<uint32_t> {};

INSTANTIATE_TEST_SUITE_P(Layouts, AllreduceRingOnNodes, ::testing::Values(1u, 2u, 3u, 4u, 5u, 7u),
                         [](const ::testing::TestParamInfo<uint32_t>& info) {
                           return "nodes" + std::to_string(info.param);
                         });

TEST_P(AllreduceRingOnNodes, OverSizesAndPipelines) {
  const uint32_t nodes = GetParam();
  uint32_t seed = 1000 + 100 * nodes;
  for (size_t count : {size_t{0}, size_t{1}, size_t{5}, size_t{7}, size_t{4099}, size_t{65537}}) {
    for (size_t chunk : {size_t{16}, size_t{4096}, size_t{1} << 20}) {
      // Thousands of one-element slices add nothing over hundreds: keep the suite quick.
      if (chunk == 16 && count > 4099) continue;
      for (uint32_t depth : {1u, 3u, 8u}) {
        run_case({AllreduceAlgorithmKind::kRing, nodes, count, DType::kF32, RedOp::kSum, chunk,
                  depth, depth == 3 ? 3u : 1u},
                 seed++);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(AllreduceAlgorithms, RingEveryOpAndIntegerType) {
  uint32_t seed = 100;
  for (DType dtype : {DType::kI32, DType::kI64, DType::kF64}) {
    for (RedOp op : {RedOp::kSum, RedOp::kProd, RedOp::kMin, RedOp::kMax}) {
      run_case({AllreduceAlgorithmKind::kRing, 3, 1001, dtype, op, 128, 4, 2}, seed++);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(AllreduceAlgorithms, RecursiveDoublingPowersOfTwoAndNot) {
  uint32_t seed = 200;
  for (uint32_t nodes : {1u, 2u, 3u, 4u, 5u, 6u, 7u, 8u, 9u}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{1000}}) {
      for (RedOp op : {RedOp::kSum, RedOp::kMax, RedOp::kProd}) {
        run_case(
            {AllreduceAlgorithmKind::kRecursiveDoubling, nodes, count, DType::kI64, op, 0, 1, 1},
            seed++);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(AllreduceAlgorithms, SliceCountIsCappedToTheTagRange) {
  // 1 MiB in 1-byte chunks would need a million tags: the ring takes bigger slices instead.
  run_case({AllreduceAlgorithmKind::kRing, 2, 1 << 18, DType::kF32, RedOp::kSum, 1, 8, 1}, 7);
}

TEST(AllreduceAlgorithms, AutoPicksRecursiveDoublingOnlyForSmallMessagesOnThreeNodesOrMore) {
  AlgorithmTuning t;
  t.small_bytes = 1024;
  EXPECT_EQ(choose_allreduce(t, 8, 4), AllreduceAlgorithmKind::kRecursiveDoubling);
  EXPECT_EQ(choose_allreduce(t, 1024, 3), AllreduceAlgorithmKind::kRecursiveDoubling);
  EXPECT_EQ(choose_allreduce(t, 1025, 4), AllreduceAlgorithmKind::kRing);
  EXPECT_EQ(choose_allreduce(t, 8, 2), AllreduceAlgorithmKind::kRing);
  // Other transfers on the network: their queue would hold every recursive-doubling step.
  EXPECT_EQ(choose_allreduce(t, 8, 4, true), AllreduceAlgorithmKind::kRing);
  EXPECT_EQ(choose_allreduce(t, 1024, 3, true), AllreduceAlgorithmKind::kRing);
  EXPECT_EQ(choose_allreduce(t, 8, kLoadedRingMaxNodes + 1, true),
            AllreduceAlgorithmKind::kRecursiveDoubling);     // the ring's steps would cost more
  t.allreduce = AllreduceAlgorithmKind::kRecursiveDoubling;  // asked for: taken regardless
  EXPECT_EQ(choose_allreduce(t, 8, 4, true), AllreduceAlgorithmKind::kRecursiveDoubling);
  t.allreduce = AllreduceAlgorithmKind::kMpi;
  EXPECT_EQ(choose_allreduce(t, 8, 4), AllreduceAlgorithmKind::kMpi);
  EXPECT_EQ(parse_algorithm("recursive-doubling"), AllreduceAlgorithmKind::kRecursiveDoubling);
  EXPECT_THROW(parse_algorithm("tree"), std::invalid_argument);
}

// Issue 20 item 4: auto's switch is the cost model's, and the model (tools/scale_model) and
// the daemon compute it alike: both must reproduce the one table the model wrote.
TEST(AllreduceAlgorithms, AutoSwitchIsTheModelsCrossover) {
  std::ifstream in(std::string(NODECOMM_TEST_DATA_DIR) + "/rd_switch_points.json");
  ASSERT_TRUE(in.good()) << "tests/data/rd_switch_points.json";
  const nlohmann::json table = nlohmann::json::parse(in);
  EXPECT_EQ(kMaxAutoSwitchBytes, table.at("max_auto_switch_bytes").get<size_t>());
  const auto& nodes = table.at("nodes");
  const auto& latency = table.at("latency_bytes");
  ASSERT_GT(nodes.size(), 5u);
  for (size_t i = 0; i < latency.size(); ++i) {
    for (size_t j = 0; j < nodes.size(); ++j) {
      const auto n = nodes[j].get<uint32_t>();
      const auto x = latency[i].get<size_t>();
      EXPECT_EQ(rd_switch_bytes(n, x), table.at("switch_bytes")[i][j].get<size_t>())
          << n << " nodes, latency-bytes " << x;
    }
  }
  AlgorithmTuning t;
  ASSERT_EQ(t.small_bytes, kAutoSmallBytes);
  EXPECT_EQ(rd_switch_bytes(2, t.latency_bytes), 0u);
  for (const uint32_t n : {3u, 4u, 8u, 4096u}) {
    const size_t s = std::min(rd_switch_bytes(n, t.latency_bytes), kMaxAutoSwitchBytes);
    EXPECT_EQ(choose_allreduce(t, s, n), AllreduceAlgorithmKind::kRecursiveDoubling) << n;
    EXPECT_EQ(choose_allreduce(t, s + 1, n), AllreduceAlgorithmKind::kRing) << n;
  }
  // Grows with the node count (the ring's 2(N-1) steps against log2(N)), up to the cap.
  EXPECT_GT(rd_switch_bytes(4096, t.latency_bytes), 50 * rd_switch_bytes(8, t.latency_bytes));
  EXPECT_EQ(allreduce_switch_bytes(t, 4096), kMaxAutoSwitchBytes);
  // The other collectives keep their fixed switch under auto; an explicit one applies to all.
  EXPECT_EQ(collective_switch_bytes(t), kAutoCollectiveSmallBytes);
  t.small_bytes = 1000;
  EXPECT_EQ(allreduce_switch_bytes(t, 4096), 1000u);
  EXPECT_EQ(collective_switch_bytes(t), 1000u);
}

}  // namespace
}  // namespace nodecomm::daemon
