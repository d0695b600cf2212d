// The pipelined inter-node reduce-scatter, allgather, broadcast and reduce
// (collective_algorithms.hpp) over the in-memory network of fake_network.hpp (rendezvous sends,
// matches held back at random), on 1-9 nodes with blocks of uneven and empty sizes. Every
// element of every node's result is checked against a reference computed here, and the hooks'
// contract is checked element by element: what each algorithm must prepare is prepared exactly
// once, before anything reads it, and what it must deliver is delivered exactly once, after
// it was prepared where the node has a contribution, and nothing else is.
#include "algorithms/collective_algorithms.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "fake_network.hpp"

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

enum class Kind { kReduceScatter, kAllgather, kBroadcast, kReduce };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kReduceScatter:
      return "reduce-scatter";
    case Kind::kAllgather:
      return "allgather";
    case Kind::kBroadcast:
      return "broadcast";
    default:
      return "reduce";
  }
}

// Byte i of node n's allgather block or of the broadcast root's buffer.
uint8_t byte_of(uint32_t node, size_t i) {
  return static_cast<uint8_t>((i * 31 + size_t{node} * 17 + 5) % 251);
}

struct CollectiveCase {
  Kind kind;
  std::vector<size_t> counts;  // reduce-scatter, allgather: per node; else {count, nodes}
  DType dtype = DType::kF32;
  RedOp op = RedOp::kSum;
  uint32_t root = 0;
  size_t chunk_bytes = 4096;
  uint32_t depth = 4;
  uint32_t lanes = 1;
};

void run_collective_case(const CollectiveCase& c, uint32_t seed) {
  const bool blocks = c.kind == Kind::kReduceScatter || c.kind == Kind::kAllgather;
  const auto n_nodes = static_cast<uint32_t>(blocks ? c.counts.size() : c.counts[1]);
  std::string counts_text;
  for (size_t v : c.counts) counts_text += std::to_string(v) + ",";
  SCOPED_TRACE(::testing::Message()
               << kind_name(c.kind) << " nodes " << n_nodes << " counts " << counts_text
               << " dtype " << proto::dtype_name(c.dtype) << " op " << proto::redop_name(c.op)
               << " root " << c.root << " chunk " << c.chunk_bytes << " depth " << c.depth
               << " lanes " << c.lanes << " seed " << seed);
  FakeNetwork net(n_nodes, c.lanes, seed);
  const DType dtype =
      c.kind == Kind::kAllgather || c.kind == Kind::kBroadcast ? DType::kU8 : c.dtype;
  const size_t elem = proto::dtype_size(dtype);
  std::vector<size_t> starts(1, 0);  // reduce-scatter, allgather: block n at starts[n]
  if (blocks) {
    for (size_t v : c.counts) starts.push_back(starts.back() + v);
  }
  const size_t total = blocks ? starts.back() : c.counts[0];
  const auto owner = [&](size_t i) {
    return static_cast<uint32_t>(std::upper_bound(starts.begin(), starts.end(), i) -
                                 starts.begin() - 1);
  };
  std::vector<std::vector<uint8_t>> buffers(n_nodes, std::vector<uint8_t>(total * elem + 1, 0xEE));
  std::vector<std::vector<uint8_t>> prepared(n_nodes, std::vector<uint8_t>(total, 0));
  std::vector<std::vector<uint8_t>> delivered(n_nodes, std::vector<uint8_t>(total, 0));
  std::vector<std::vector<uint8_t>> scratch(n_nodes);
  std::vector<std::unique_ptr<FakeEndpoint>> endpoints;
  std::vector<std::unique_ptr<AllreduceAlgorithm>> algorithms;
  AlgorithmTuning tuning;
  tuning.chunk_bytes = c.chunk_bytes;
  tuning.pipeline_depth = c.depth;
  tuning.endpoints = c.lanes;
  // Which elements node n must prepare and must get delivered.
  const auto must_prepare = [&](uint32_t n, size_t i) {
    switch (c.kind) {
      case Kind::kReduceScatter:
      case Kind::kReduce:
        return true;
      case Kind::kAllgather:
        return owner(i) == n;
      default:
        return n == c.root;
    }
  };
  const auto must_deliver = [&](uint32_t n, size_t i) {
    switch (c.kind) {
      case Kind::kReduceScatter:
        return owner(i) == n;
      case Kind::kReduce:
        return n == c.root;
      default:
        return true;
    }
  };
  for (uint32_t n = 0; n < n_nodes; ++n) {
    endpoints.push_back(std::make_unique<FakeEndpoint>(net, n));
    void* buffer = buffers[n].data();
    AllreduceHooks hooks;
    hooks.prepare = [&, n, buffer](size_t first, size_t count) {
      ASSERT_LE(first + count, total);
      for (size_t i = first; i < first + count; ++i) {
        ASSERT_TRUE(must_prepare(n, i)) << "element " << i << " prepared on node " << n;
        ASSERT_EQ(prepared[n][i]++, 0) << "element " << i << " prepared twice on node " << n;
        if (c.kind == Kind::kAllgather) {
          store(dtype, buffer, i, byte_of(n, i));
        } else if (c.kind == Kind::kBroadcast) {
          store(dtype, buffer, i, byte_of(c.root, i));
        } else {
          store(dtype, buffer, i, contribution(n, i, c.op));
        }
      }
    };
    hooks.done = [&, n](size_t first, size_t count) {
      ASSERT_LE(first + count, total);
      for (size_t i = first; i < first + count; ++i) {
        ASSERT_TRUE(must_deliver(n, i)) << "element " << i << " delivered on node " << n;
        if (must_prepare(n, i)) {
          ASSERT_EQ(prepared[n][i], 1) << "element " << i << " done before prepared on node " << n;
        }
        ASSERT_EQ(delivered[n][i]++, 0) << "element " << i << " delivered twice on node " << n;
      }
    };
    hooks.scratch = [&, n](size_t bytes) {
      EXPECT_TRUE(scratch[n].empty()) << "scratch asked for twice";
      scratch[n].resize(bytes);
      return static_cast<void*>(scratch[n].data());
    };
    const int tag_base = 3072;
    switch (c.kind) {
      case Kind::kReduceScatter:
        algorithms.push_back(make_ring_reduce_scatter(
            *endpoints[n], tag_base, BlocksSpec{buffer, c.counts, dtype, c.op}, hooks, tuning));
        break;
      case Kind::kAllgather:
        algorithms.push_back(make_ring_allgather(
            *endpoints[n], tag_base, BlocksSpec{buffer, c.counts, dtype, c.op}, hooks, tuning));
        break;
      case Kind::kBroadcast:
        algorithms.push_back(make_chain_broadcast(*endpoints[n], tag_base,
                                                  RootedSpec{buffer, total, dtype, c.op, c.root},
                                                  hooks, tuning));
        break;
      case Kind::kReduce:
        algorithms.push_back(make_chain_reduce(*endpoints[n], tag_base,
                                               RootedSpec{buffer, total, dtype, c.op, c.root},
                                               hooks, tuning));
        break;
    }
    if (::testing::Test::HasFatalFailure()) return;
  }
  drive_all(endpoints, algorithms);
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_TRUE(net.idle()) << "messages left unmatched";
  for (uint32_t n = 0; n < n_nodes; ++n) {
    for (size_t i = 0; i < total; ++i) {
      ASSERT_EQ(prepared[n][i], must_prepare(n, i) ? 1 : 0) << "node " << n << " element " << i;
      ASSERT_EQ(delivered[n][i], must_deliver(n, i) ? 1 : 0) << "node " << n << " element " << i;
      if (!must_deliver(n, i)) continue;
      int64_t want = 0;
      switch (c.kind) {
        case Kind::kAllgather:
          want = byte_of(owner(i), i);
          break;
        case Kind::kBroadcast:
          want = byte_of(c.root, i);
          break;
        default:
          want = reference(n_nodes, i, c.op);
          break;
      }
      ASSERT_EQ(load(dtype, buffers[n].data(), i), want) << "node " << n << " element " << i;
    }
    EXPECT_EQ(buffers[n][total * elem], 0xEE) << "node " << n << ": written past the end";
  }
}

// Block sizes for `nodes` nodes: uneven (ranks per node 3,1,2,... times a per-rank count), with
// an empty block among them when `with_empty`.
std::vector<size_t> uneven(uint32_t nodes, size_t per_rank, bool with_empty) {
  std::vector<size_t> counts;
  for (uint32_t n = 0; n < nodes; ++n) counts.push_back(per_rank * (1 + (n * 2) % 3));
  if (with_empty && nodes > 1) counts[nodes / 2] = 0;
  return counts;
}

// One test per node count, so that a run can pick layouts (the sanitizer stage leaves out the
// largest: tools/sanitize.sh).
class CollectiveAlgorithmsOnNodes : public ::testing::TestWithParam<uint32_t> {};

std::string nodes_name(const ::testing::TestParamInfo<uint32_t>& info) {
  return "nodes" + std::to_string(info.param);
}

INSTANTIATE_TEST_SUITE_P(Layouts, CollectiveAlgorithmsOnNodes, ::testing::Range(1u, 10u),
                         nodes_name);

// A ring algorithm on `nodes` nodes over uneven blocks of each size (with and without an empty
// block), unsliced and at pipeline depths 3 and 8 in `slice`-byte slices over 1 or 3 lanes.
void run_ring_over_sizes(Kind kind, DType dtype, uint32_t nodes,
                         std::initializer_list<size_t> per_ranks, size_t slice, uint32_t seed) {
  for (size_t per_rank : per_ranks) {
    for (bool with_empty : {false, true}) {
      for (uint32_t depth : {1u, 3u, 8u}) {
        run_collective_case({kind, uneven(nodes, per_rank, with_empty), dtype, RedOp::kSum, 0,
                             depth == 1 ? size_t{1} << 20 : slice, depth, depth == 3 ? 3u : 1u},
                            seed++);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

TEST_P(CollectiveAlgorithmsOnNodes, RingReduceScatterOverSizesAndPipelines) {
  run_ring_over_sizes(Kind::kReduceScatter, DType::kF32, GetParam(), {0, 1, 7, 1025}, 64,
                      1 + 100 * GetParam());
}

TEST(CollectiveAlgorithms, RingReduceScatterEveryOpAndType) {
  uint32_t seed = 100;
  for (DType dtype : {DType::kI32, DType::kI64, DType::kF64, DType::kF32}) {
    for (RedOp op : {RedOp::kSum, RedOp::kProd, RedOp::kMin, RedOp::kMax}) {
      run_collective_case({Kind::kReduceScatter, {301, 100, 203}, dtype, op, 0, 128, 4, 2}, seed++);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST_P(CollectiveAlgorithmsOnNodes, RingAllgatherOverSizesAndPipelines) {
  run_ring_over_sizes(Kind::kAllgather, DType::kU8, GetParam(), {0, 1, 13, 5003}, 100,
                      2000 + 100 * GetParam());
}

TEST_P(CollectiveAlgorithmsOnNodes, ChainBroadcastEveryRoot) {
  const uint32_t nodes = GetParam();
  uint32_t seed = 3000 + 100 * nodes;
  for (uint32_t root = 0; root < nodes; ++root) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{999}, size_t{40000}}) {
      for (uint32_t depth : {1u, 4u}) {
        run_collective_case({Kind::kBroadcast,
                             {count, nodes},
                             DType::kU8,
                             RedOp::kSum,
                             root,
                             depth == 1 ? size_t{1} << 20 : 512,
                             depth,
                             depth == 4 ? 2u : 1u},
                            seed++);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

TEST(CollectiveAlgorithms, ChainReduceEveryRootOpAndType) {
  uint32_t seed = 400;
  for (uint32_t nodes = 1; nodes <= 9; ++nodes) {
    for (uint32_t root : {0u, nodes - 1, nodes / 2}) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{10001}}) {
        run_collective_case(
            {Kind::kReduce, {count, nodes}, DType::kF32, RedOp::kSum, root, 1024, 3, 2}, seed++);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
  for (DType dtype : {DType::kI32, DType::kI64, DType::kF64}) {
    for (RedOp op : {RedOp::kSum, RedOp::kProd, RedOp::kMin, RedOp::kMax}) {
      run_collective_case({Kind::kReduce, {1001, 4}, dtype, op, 2, 128, 4, 1}, seed++);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(CollectiveAlgorithms, SliceCountIsCappedToTheTagRange) {
  // A million one-byte slices would need a million tags: bigger slices instead.
  run_collective_case({Kind::kBroadcast, {size_t{1} << 20, 3}, DType::kU8, RedOp::kSum, 1, 1, 8, 1},
                      7);
  run_collective_case(
      {Kind::kReduceScatter, {size_t{1} << 18, 5, 1}, DType::kF32, RedOp::kSum, 0, 1, 8, 1}, 8);
}

TEST(CollectiveAlgorithms, AutoPicksNativeOnlyForSmallBuffersOnThreeNodesOrMore) {
  AlgorithmTuning t;
  t.small_bytes = 1024;
  EXPECT_FALSE(choose_pipelined(t, 1024, 3));
  EXPECT_TRUE(choose_pipelined(t, 1025, 3));
  EXPECT_TRUE(choose_pipelined(t, 8, 2));
  t.collectives = CollectiveAlgorithmKind::kMpi;
  EXPECT_FALSE(choose_pipelined(t, size_t{1} << 30, 4));
  t.collectives = CollectiveAlgorithmKind::kPipelined;
  EXPECT_TRUE(choose_pipelined(t, 8, 4));
  EXPECT_EQ(parse_collective_algorithm("pipelined"), CollectiveAlgorithmKind::kPipelined);
  EXPECT_EQ(collective_algorithm_name(CollectiveAlgorithmKind::kMpi), "mpi");
  EXPECT_THROW(parse_collective_algorithm("tree"), std::invalid_argument);
}

}  // namespace
}  // namespace nodecomm::daemon
