// The engine's allreduce paths between nodes, with every node in this process (cluster.hpp):
// each inter-node algorithm forced, and the scheduler under each priority policy with fusion
// on and off.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "algorithms/algorithm_tally.hpp"
#include "cluster.hpp"
#include "reference.hpp"

namespace nodecomm::engine_test {
namespace {

// Each inter-node allreduce algorithm forced for every size, on the uneven layout: the ring
// with small slices over several lanes, recursive doubling on 3 nodes, and the native
// allreduce (MPI_Iallreduce's place).
class AlgorithmTest : public ::testing::TestWithParam<std::string> {};

TEST_P(AlgorithmTest, AllreduceEveryDtypeOnUnevenLayout) {
  const std::string algo = GetParam();
  Cluster cluster(Layout{{3, 1, 2}}, [&](daemon::DaemonConfig& c) {
    c.tuning.allreduce = daemon::parse_algorithm(algo);
    c.sched.eager_bytes = 0;  // the algorithm for every size, none in the scheduling rounds
    if (algo == "ring") {
      c.tuning.chunk_bytes = 4096;
      c.tuning.pipeline_depth = 3;
      c.tuning.endpoints = 3;
    }
  });
  std::vector<std::string> failures = cluster.run([](Rank& r) {
    for (const Sample& s : kAllreduceSamples) {
      for (size_t count : {size_t{1}, size_t{2}, size_t{7}, size_t{4099}, size_t{65539}}) {
        if (count == 65539 && s.dtype != NC_F32) continue;
        allreduce_once(r, s.dtype, s.op, count, count % 2 == 1, count != 2);
      }
    }
  });
  for (size_t i = 0; i < failures.size() && i < 20; ++i) ADD_FAILURE() << failures[i];
}

INSTANTIATE_TEST_SUITE_P(Algorithms, AlgorithmTest, ::testing::Values("ring", "rd", "mpi"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// The scheduler under each priority policy with fusion on and off, on the uneven layout with
// small scheduling chunks and a small fusion threshold: batches of mixed allreduces (dtypes,
// ops, sizes from 1 element to several chunks, in place or not, random priorities) posted
// without waiting, so that the daemons reorder, chunk and fuse them alike; every element
// checked (schedule_check's case).
using SchedParam = std::tuple<proto::PriorityPolicy, bool>;
class SchedulerTest : public ::testing::TestWithParam<SchedParam> {};

// Three batches of 30 allreduces of mixed dtypes, ops, sizes and priorities, posted at once
// and checked element by element.
void mixed_batches(Rank& r) {
  constexpr int kBatches = 3;
  constexpr int kPerBatch = 30;
  const nc_dtype_t dtypes[] = {NC_F32, NC_F64, NC_I32, NC_I64};
  const nc_redop_t ops[] = {NC_SUM, NC_MIN, NC_MAX};
  const size_t counts[] = {1, 7, 100, 1000, 4099, 20000};
  for (int batch = 0; batch < kBatches; ++batch) {
    // The same plan on every rank: one seed per batch.
    std::mt19937 rng(static_cast<uint32_t>(batch) * 7919U + 1U);
    struct Planned {
      nc_dtype_t dtype;
      nc_redop_t op;
      size_t count;
      bool in_place;
      std::unique_ptr<Buf> send;
      std::unique_ptr<Buf> recv;
    };
    std::vector<Planned> plan;
    std::vector<nc_request_t> reqs;
    for (int k = 0; k < kPerBatch; ++k) {
      Planned p{dtypes[rng() % 4], ops[rng() % 3], counts[rng() % 6], rng() % 2 == 0, {}, {}};
      const int priority = static_cast<int>(rng() % 10);
      const size_t bytes = p.count * nc_dtype_size(p.dtype);
      p.send = std::make_unique<Buf>(r.ctx, bytes, true);
      p.recv = std::make_unique<Buf>(r.ctx, bytes, true);
      const int seed = r.rank + k * 7 + batch * 1000;
      with_dtype(p.dtype, [&]<class T>(T) { fill(p.send->as<T>(), p.count, seed, p.op); });
      void* out = p.in_place ? p.send->as<void>() : p.recv->as<void>();
      const nc_op_attr_t attr{priority, nullptr, NC_COMPRESS_NONE};
      nc_request_t req = 0;
      if (nc_allreduce(r.ctx, p.send->as<void>(), out, p.count, p.dtype, p.op, NC_COMM_WORLD, &attr,
                       &req) != NC_OK) {
        r.fail(fmt::format("batch {} op {}: posting: {}", batch, k, nc_last_error()));
        return;
      }
      reqs.push_back(req);
      plan.push_back(std::move(p));
    }
    if (nc_wait_all(r.ctx, reqs.size(), reqs.data(), nullptr) != NC_OK) {
      r.fail(fmt::format("batch {}: wait_all: {}", batch, nc_last_error()));
      return;
    }
    for (int k = 0; k < kPerBatch; ++k) {
      const Planned& p = plan[static_cast<size_t>(k)];
      std::vector<int> seeds;
      seeds.reserve(static_cast<size_t>(r.size));
      for (int q = 0; q < r.size; ++q) seeds.push_back(q + k * 7 + batch * 1000);
      with_dtype(p.dtype, [&]<class T>(T) {
        const T* got = p.in_place ? p.send->as<T>() : p.recv->as<T>();
        check(r,
              fmt::format("batch {} op {}: allreduce {} {} count {}", batch, k, dt(p.dtype),
                          op_name(p.op), p.count),
              got, p.count, [&](size_t i) { return reduced<T>(r.size, i, p.op, seeds); });
      });
    }
  }
}

TEST_P(SchedulerTest, MixedBatchesReorderedChunkedFused) {
  // Plain variables, not a structured binding: the lambda below captures them (C++20, which
  // clang 14 does not implement).
  const proto::PriorityPolicy policy = std::get<0>(GetParam());
  const bool fusion = std::get<1>(GetParam());
  Cluster cluster(Layout{{3, 1, 2}}, [&](daemon::DaemonConfig& c) {
    c.sched.policy = policy;
    c.sched.fusion = fusion;
    c.sched.chunk_bytes = size_t{16} * 1024;
    c.sched.fusion_threshold_bytes = size_t{4} * 1024;
  });
  std::vector<std::string> failures = cluster.run(mixed_batches);
  for (size_t i = 0; i < failures.size() && i < 20; ++i) ADD_FAILURE() << failures[i];
}

// Issue 18 point 2: beyond --sched-gather-nodes the rounds' records are combined by recursive
// doubling; six nodes (two beyond the largest power of two) with every round but the first so.
TEST(SchedulerCombined, MixedBatchesOnSixNodes) {
  Cluster cluster(Layout{{1, 2, 1, 1, 2, 1}}, [](daemon::DaemonConfig& c) {
    c.sched.gather_nodes = 1;
    c.sched.chunk_bytes = size_t{16} * 1024;
    c.sched.fusion_threshold_bytes = size_t{4} * 1024;
  });
  std::vector<std::string> failures = cluster.run(mixed_batches);
  for (size_t i = 0; i < failures.size() && i < 20; ++i) ADD_FAILURE() << failures[i];
}

// A large allreduce cut into scheduler chunks takes the algorithm of its whole size: its
// chunks share the link, so one under the recursive-doubling switch must not send its whole
// chunk at every step (256 KiB on 4 nodes at 500 Mbit/s: 33 % slower in 64 KiB chunks).
TEST(SchedulerChunks, ChunksTakeTheAlgorithmOfTheirWholeOperation) {
  constexpr size_t kChunk = size_t{16} * 1024;
  Cluster cluster(Layout{{1, 2, 1, 1}}, [&](daemon::DaemonConfig& c) {
    c.sched.chunk_bytes = kChunk;
    c.sched.eager_bytes = 0;
  });
  constexpr size_t kChunks = 12;
  const size_t rd_limit = daemon::rd_switch_bytes(4, daemon::AlgorithmTuning{}.latency_bytes);
  ASSERT_GE(rd_limit, kChunk);            // a chunk alone: recursive doubling
  ASSERT_LT(rd_limit, kChunks * kChunk);  // the operation: the ring
  daemon::AlgorithmTally& tally = daemon::algorithm_tally();
  const auto counts = [&] {
    return std::pair{tally.rd_allreduces.load(std::memory_order_relaxed),     // relaxed: the
                     tally.ring_allreduces.load(std::memory_order_relaxed)};  // daemons are idle
  };
  const auto [rd0, ring0] = counts();
  // Twelve chunks of 16 KiB (and one of a single element) on each of the 4 nodes: the ring.
  std::vector<std::string> failures = cluster.run([](Rank& r) {
    allreduce_once(r, NC_F32, NC_SUM, kChunks * kChunk / sizeof(float) + 1, false, false);
  });
  for (size_t i = 0; i < failures.size() && i < 20; ++i) ADD_FAILURE() << failures[i];
  const auto [rd1, ring1] = counts();
  EXPECT_EQ(rd1 - rd0, 0u);
  EXPECT_EQ(ring1 - ring0, 4u * (kChunks + 1));
  // One chunk's worth alone: recursive doubling, as for any allreduce of that size.
  failures = cluster.run(
      [](Rank& r) { allreduce_once(r, NC_F32, NC_SUM, kChunk / sizeof(float), true, false); });
  for (size_t i = 0; i < failures.size() && i < 20; ++i) ADD_FAILURE() << failures[i];
  const auto [rd2, ring2] = counts();
  EXPECT_EQ(rd2 - rd1, 4u);
  EXPECT_EQ(ring2 - ring1, 0u);
}

INSTANTIATE_TEST_SUITE_P(Policies, SchedulerTest,
                         ::testing::Combine(::testing::Values(proto::PriorityPolicy::kNone,
                                                              proto::PriorityPolicy::kDirect,
                                                              proto::PriorityPolicy::kLifo),
                                            ::testing::Bool()),
                         [](const ::testing::TestParamInfo<SchedParam>& info) {
                           return std::string(
                                      proto::priority_policy_name(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_fusion_on" : "_fusion_off");
                         });

}  // namespace
}  // namespace nodecomm::engine_test
