// Issue 18 point 2: the scheduler's round records combine instead of gather, so that a round
// costs log2(N) messages per daemon. Checked here: a record is sent only as far as it is used,
// a received one is checked before any of it is read, the combination of any two is the same
// bits whichever comes first, and records combined by recursive doubling over an in-memory
// network of 1 to 13 nodes end the same on every node, equal to a reference computed here
// (ready bits ANDed, rooms at their least, every announcement counted, eager parts summed).
#include "engine/round_record.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "algorithms/record_combine.hpp"
#include "fake_network.hpp"
#include "kernels/reduce.hpp"

namespace nodecomm::daemon {
namespace {

using test::drive_all;
using test::FakeEndpoint;
using test::FakeNetwork;

OpSummary summary(uint64_t seq, uint64_t count) {
  OpSummary s{};
  s.seq = seq;
  s.count = count;
  s.collective = static_cast<uint8_t>(proto::Collective::kAllreduce);
  s.dtype = static_cast<uint8_t>(proto::DType::kF32);
  return s;
}

RoundRecord own_record(uint32_t node) {
  RoundRecord r{};
  r.nodes = 1;
  r.lead_node = node;
  r.malformed_node = kNoNode;
  r.gather_nodes = 8;
  r.floor_low = 1;
  r.floor_high = 1;
  return r;
}

// Appends an eager part of `values` (f32) after the announcements (all made already).
void add_eager(RoundRecord& r, uint64_t seq, const std::vector<float>& values) {
  size_t at = size_t{r.announced} * sizeof(Announcement);
  for (uint32_t k = 0; k < r.eager; ++k) at += (size_t{r.eager_ops[k].bytes} + 7) / 8 * 8;
  const auto bytes = static_cast<uint32_t>(values.size() * sizeof(float));
  std::memcpy(r.tail + at, values.data(), bytes);
  r.eager_ops[r.eager++] = {seq, static_cast<uint32_t>(at), bytes};
}

// Sums f32 parts of every seq: what the engine does for f32 sum allreduces.
bool sum_f32(uint64_t, uint8_t* into, const uint8_t* other, uint32_t bytes) {
  accumulate(proto::DType::kF32, proto::RedOp::kSum, into, other, bytes / sizeof(float));
  return true;
}

std::vector<uint8_t> used_bytes(const RoundRecord& r) {
  const auto* p = reinterpret_cast<const uint8_t*>(&r);
  return {p, p + round_record_bytes(r)};
}

TEST(RoundRecordFormat, SentAsFarAsUsed) {
  RoundRecord r = own_record(0);
  EXPECT_EQ(round_record_bytes(r), offsetof(RoundRecord, tail));
  add_announcement(r, announce(summary(7, 1), 0));
  add_announcement(r, announce(summary(8, 1), 0));
  EXPECT_EQ(announcement(r, 1).low.seq, 8u);
  EXPECT_EQ(round_record_bytes(r), offsetof(RoundRecord, tail) + 2 * sizeof(Announcement));
  add_eager(r, 8, {1.5F});
  EXPECT_EQ(round_record_bytes(r), offsetof(RoundRecord, tail) + 2 * sizeof(Announcement) + 4);
  EXPECT_EQ(round_record_problem(r, 1), "");
  ASSERT_NE(find_eager(r, 8), nullptr);
  EXPECT_EQ(find_eager(r, 8)->bytes, 4u);
  EXPECT_EQ(find_eager(r, 7), nullptr);
}

TEST(RoundRecordFormat, MalformedRecordsAreNamed) {
  const auto problem = [](const std::function<void(RoundRecord&)>& spoil) {
    RoundRecord r = own_record(1);
    add_announcement(r, announce(summary(1, 2), 1));
    add_announcement(r, announce(summary(2, 2), 1));
    add_eager(r, 1, {1.0F, 2.0F});
    add_eager(r, 2, {1.0F, 2.0F});
    spoil(r);
    return round_record_problem(r, 4);
  };
  EXPECT_EQ(problem([](RoundRecord&) {}), "");
  EXPECT_NE(problem([](RoundRecord& r) { r.announced = kAnnouncePerRound + 1; }), "");
  EXPECT_NE(problem([](RoundRecord& r) { r.eager = kEagerOps + 1; }), "");
  // Node indices and counts beyond the communicator's.
  EXPECT_NE(problem([](RoundRecord& r) { r.nodes = 0; }), "");
  EXPECT_NE(problem([](RoundRecord& r) { r.nodes = 5; }), "");
  EXPECT_NE(problem([](RoundRecord& r) { r.lead_node = 4; }), "");
  EXPECT_NE(problem([](RoundRecord& r) { r.malformed_node = 4; }), "");
  EXPECT_NE(problem([](RoundRecord& r) {
              Announcement a = announcement(r, 0);
              a.nodes = 2;  // more than the record covers
              std::memcpy(r.tail, &a, sizeof(a));
            }),
            "");
  EXPECT_NE(problem([](RoundRecord& r) {
              Announcement a = announcement(r, 1);
              a.low.seq = a.high.seq = 1;  // out of seq order
              std::memcpy(r.tail + sizeof(a), &a, sizeof(a));
            }),
            "");
  // Data over the announcements, misaligned, too large, past the record, out of order, or
  // parts that add up to more than the data area has room for.
  EXPECT_NE(problem([](RoundRecord& r) { r.eager_ops[0].offset = 0; }), "");
  EXPECT_NE(problem([](RoundRecord& r) { r.eager_ops[0].offset += 4; }), "");
  EXPECT_NE(problem([](RoundRecord& r) { r.eager_ops[0].bytes = kEagerBytes + 8; }), "");
  EXPECT_NE(problem([](RoundRecord& r) { r.eager_ops[0].offset = sizeof(r.tail); }), "");
  EXPECT_NE(problem([](RoundRecord& r) { r.eager_ops[0].offset = UINT32_MAX - 3; }), "");
  EXPECT_NE(problem([](RoundRecord& r) { r.eager_ops[1].seq = 1; }), "");
  EXPECT_NE(problem([](RoundRecord& r) {
              r.eager_ops[0].bytes = kEagerBytes;
              r.eager_ops[1].offset = r.eager_ops[0].offset;  // overlapping, over the limit
            }),
            "");
}

// A node's own record as the tests below build it: random ready bits (seqs 1..kWindow), room,
// announcements of seqs 1..40 (node 2 posts another count for seq 9), and eager parts of seqs
// 1..6, except that nodes 0, 1 and 2 leave out seqs 1, 2 and 3.
RoundRecord random_record(uint32_t node, std::mt19937& rng,
                          std::vector<std::vector<float>>& parts) {
  RoundRecord r = own_record(node);
  for (auto& word : r.ready) word = rng() | (uint64_t{rng()} << 32) | 0x3F;  // seqs 1..6 ready
  r.room = 1000 + rng() % 1000;
  r.staying = rng() % 3 == 0 ? 0 : rng() % 5000;
  r.chunk_bytes = 100 + node;  // the lead's wins
  for (uint64_t seq = 1; seq <= 40; ++seq) {
    OpSummary s = summary(seq, node == 2 && seq == 9 ? 5 : 4);
    s.priority = static_cast<int32_t>(uint64_t{node} * 100 + seq);
    add_announcement(r, announce(s, node));
  }
  parts.assign(7, {});
  std::uniform_real_distribution<float> value(-1000.0F, 1000.0F);
  for (uint64_t seq = 1; seq <= 6; ++seq) {
    if (seq == node + 1 && node < 3) continue;
    for (size_t i = 0; i < seq; ++i) parts[seq].push_back(value(rng));
    add_eager(r, seq, parts[seq]);
  }
  return r;
}

TEST(RoundRecordMerge, SameBitsWhicheverComesFirst) {
  std::mt19937 rng(7);
  std::vector<std::vector<float>> parts;
  for (uint32_t a = 0; a < 6; ++a) {
    for (uint32_t b = 0; b < 6; ++b) {
      if (a == b) continue;
      const RoundRecord x = random_record(a, rng, parts);
      const RoundRecord y = random_record(b, rng, parts);
      auto ab = std::make_unique<RoundRecord>();
      auto ba = std::make_unique<RoundRecord>();
      merge_round_records(x, y, *ab, sum_f32);
      merge_round_records(y, x, *ba, sum_f32);
      ASSERT_EQ(used_bytes(*ab), used_bytes(*ba)) << "nodes " << a << " and " << b;
      EXPECT_EQ(round_record_problem(*ab, 6), "");
      EXPECT_EQ(ab->nodes, 2u);
      EXPECT_EQ(ab->lead_node, std::min(a, b));
      EXPECT_EQ(ab->chunk_bytes, 100u + std::min(a, b));
      EXPECT_EQ(ab->room, std::min(x.room, y.room));
      EXPECT_EQ(ab->staying, std::max(x.staying, y.staying));
      for (size_t w = 0; w < kWindow / 64; ++w) EXPECT_EQ(ab->ready[w], x.ready[w] & y.ready[w]);
      // Eager parts survive only where both carried them.
      for (uint64_t seq = 1; seq <= 6; ++seq) {
        const bool both = !(seq == a + 1 && a < 3) && !(seq == b + 1 && b < 3);
        EXPECT_EQ(find_eager(*ab, seq) != nullptr, both) << "seq " << seq;
      }
    }
  }
}

TEST(RoundRecordMerge, KeepsTheLowestAnnouncementsAndCountsThemWhole) {
  // Node 0 announces seqs 1..64, node 1 seqs 33..96: 96 in all, 64 kept.
  RoundRecord x = own_record(0);
  RoundRecord y = own_record(1);
  for (uint64_t seq = 1; seq <= 64; ++seq) add_announcement(x, announce(summary(seq, 4), 0));
  for (uint64_t seq = 33; seq <= 96; ++seq) add_announcement(y, announce(summary(seq, 4), 1));
  auto out = std::make_unique<RoundRecord>();
  merge_round_records(y, x, *out, sum_f32);
  ASSERT_EQ(out->announced, kAnnouncePerRound);
  for (uint32_t k = 0; k < out->announced; ++k) {
    const Announcement a = announcement(*out, k);
    EXPECT_EQ(a.low.seq, k + 1);
    EXPECT_EQ(a.nodes, a.low.seq >= 33 ? 2u : 1u) << "seq " << a.low.seq;
    EXPECT_EQ(a.lead_node, 0u);
    EXPECT_TRUE(same_submission(a));
  }
}

TEST(RoundRecordMerge, DisagreementsNameTwoNodesThatDiffer) {
  Announcement a = announce(summary(3, 4), 0);
  for (uint32_t n = 1; n < 7; ++n) {
    a = merge_announcements(announce(summary(3, n == 4 ? 9 : 4), n), a);
  }
  EXPECT_EQ(a.nodes, 7u);
  EXPECT_FALSE(same_submission(a));
  EXPECT_EQ(a.low_node, 0u);  // the least of the six that agree
  EXPECT_EQ(a.high_node, 4u);
  EXPECT_EQ(a.high.count, 9u);
  // alltoallv: the nodes' digests sum to zero when every pair agrees.
  const auto alltoallv = [](uint32_t node, uint64_t d0, uint64_t d1) {
    OpSummary s = summary(5, 0);
    s.collective = static_cast<uint8_t>(proto::Collective::kAlltoallv);
    s.counts_digest[0] = d0;
    s.counts_digest[1] = d1;
    return announce(s, node);
  };
  const Announcement fits =
      merge_announcements(merge_announcements(alltoallv(0, 5, 7), alltoallv(1, 10, 1)),
                          alltoallv(2, uint64_t{0} - 15, uint64_t{0} - 8));
  EXPECT_TRUE(same_submission(fits));
  const Announcement off =
      merge_announcements(merge_announcements(alltoallv(0, 5, 7), alltoallv(1, 10, 1)),
                          alltoallv(2, uint64_t{0} - 15, uint64_t{0} - 7));
  EXPECT_FALSE(same_submission(off));
  // Refusals: how many nodes, and the lowest.
  OpSummary refused = summary(6, 4);
  refused.flags = kSummaryStagingRefused;
  const Announcement r = merge_announcements(
      merge_announcements(announce(summary(6, 4), 0), announce(refused, 5)), announce(refused, 2));
  EXPECT_EQ(r.refused, 2u);
  EXPECT_EQ(r.refused_node, 2u);
}

// Every node's random record, combined by recursive doubling (record_combine.hpp) with
// merge_round_records, as the engine does beyond --sched-gather-nodes.
void combine_on(uint32_t nodes, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << nodes << " nodes, seed " << seed);
  std::mt19937 rng(seed);
  FakeNetwork net(nodes, 1, seed);
  net.allow_short_messages();
  std::vector<RoundRecord> own(nodes);
  std::vector<std::vector<std::vector<float>>> parts(nodes);
  for (uint32_t n = 0; n < nodes; ++n) own[n] = random_record(n, rng, parts[n]);
  std::vector<std::vector<uint8_t>> buffers(nodes, std::vector<uint8_t>(2 * sizeof(RoundRecord)));
  std::vector<std::unique_ptr<FakeEndpoint>> endpoints;
  std::vector<std::unique_ptr<AllreduceAlgorithm>> algorithms;
  for (uint32_t n = 0; n < nodes; ++n) {
    endpoints.push_back(std::make_unique<FakeEndpoint>(net, n));
    uint8_t* record = buffers[n].data();
    uint8_t* incoming = record + sizeof(RoundRecord);
    std::memcpy(record, &own[n], sizeof(RoundRecord));
    RecordCombineSpec spec;
    spec.record = record;
    spec.incoming = incoming;
    spec.capacity = sizeof(RoundRecord);
    spec.send_bytes = round_record_bytes(own[n]);
    spec.combine = [record, incoming, nodes](uint32_t first, uint32_t count) {
      auto mine = std::make_unique<RoundRecord>();
      auto theirs = std::make_unique<RoundRecord>();
      auto out = std::make_unique<RoundRecord>();
      std::memcpy(mine.get(), record, sizeof(RoundRecord));
      std::memcpy(theirs.get(), incoming, sizeof(RoundRecord));
      EXPECT_EQ(round_record_problem(*theirs, nodes), "");
      EXPECT_EQ(theirs->nodes, count);
      EXPECT_EQ(theirs->lead_node, first);
      merge_round_records(*mine, *theirs, *out, sum_f32);
      std::memcpy(record, out.get(), sizeof(RoundRecord));
      return round_record_bytes(*out);
    };
    algorithms.push_back(make_record_combine(*endpoints[n], 2048, std::move(spec)));
  }
  drive_all(endpoints, algorithms, 100'000);
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_TRUE(net.idle()) << "messages left unmatched";
  auto all = std::make_unique<RoundRecord>();
  std::memcpy(all.get(), buffers[0].data(), sizeof(RoundRecord));
  const std::vector<uint8_t> first = used_bytes(*all);
  for (uint32_t n = 1; n < nodes; ++n) {
    RoundRecord r;
    std::memcpy(&r, buffers[n].data(), sizeof(RoundRecord));
    ASSERT_EQ(used_bytes(r), first) << "node " << n << " ended with another record";
  }
  // The reference.
  EXPECT_EQ(round_record_problem(*all, nodes), "");
  EXPECT_EQ(all->nodes, nodes);
  EXPECT_EQ(all->lead_node, 0u);
  EXPECT_EQ(all->chunk_bytes, 100u);
  uint64_t room = UINT64_MAX;
  uint64_t staying = 0;
  for (const RoundRecord& r : own) {
    room = std::min(room, r.room);
    staying = std::max(staying, r.staying);
  }
  EXPECT_EQ(all->room, room);
  EXPECT_EQ(all->staying, staying);
  for (size_t w = 0; w < kWindow / 64; ++w) {
    uint64_t ready = ~uint64_t{0};
    for (const RoundRecord& r : own) ready &= r.ready[w];
    EXPECT_EQ(all->ready[w], ready) << "word " << w;
  }
  ASSERT_EQ(all->announced, 40u);
  for (uint32_t k = 0; k < all->announced; ++k) {
    const Announcement a = announcement(*all, k);
    EXPECT_EQ(a.nodes, nodes);
    EXPECT_EQ(a.lead_node, 0u);
    EXPECT_EQ(a.lead_priority, static_cast<int32_t>(a.low.seq));  // node 0's
    EXPECT_EQ(same_submission(a), a.low.seq != 9 || nodes <= 2) << "seq " << a.low.seq;
  }
  for (uint64_t seq = 1; seq <= 6; ++seq) {
    const EagerEntry* e = find_eager(*all, seq);
    // Node seq-1 left seqs 1..3 out: only communicators without that node combine them.
    ASSERT_EQ(e != nullptr, seq > std::min(nodes, 3u)) << "seq " << seq;
    if (e == nullptr) continue;
    ASSERT_EQ(e->bytes, seq * sizeof(float));
    for (size_t i = 0; i < seq; ++i) {
      double expected = 0;
      for (uint32_t n = 0; n < nodes; ++n) expected += parts[n][seq][i];
      float got;
      std::memcpy(&got, all->tail + e->offset + i * sizeof(float), sizeof(got));
      EXPECT_NEAR(got, expected, 1e-2 * nodes) << "seq " << seq << " element " << i;
    }
  }
}

class RecordCombineOnNodes : public ::testing::TestWithParam<uint32_t> {};
INSTANTIATE_TEST_SUITE_P(Nodes, RecordCombineOnNodes,
                         ::testing::Values(1u, 2u, 3u, 4u, 5u, 6u, 7u, 8u, 9u, 13u, 16u));

TEST_P(RecordCombineOnNodes, EveryNodeEndsWithTheSameCombination) {
  for (uint32_t seed = 1; seed <= 3; ++seed) combine_on(GetParam(), seed);
}

}  // namespace
}  // namespace nodecomm::daemon
