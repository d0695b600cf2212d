// Count agreement for vector collectives (daemon/engine/count_agreement.hpp) and the staging pool's
// caps and job separation (daemon/engine/staging.hpp).
#include "engine/count_agreement.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "engine/staging.hpp"

namespace nodecomm::daemon {
namespace {

using proto::Collective;

// Count arrays of an alltoallv among `size` ranks where rank i sends c[i][j] to rank j and
// rank j expects e[i][j] from rank i (displacements are irrelevant here).
struct Alltoallv {
  uint32_t size;
  std::vector<std::vector<uint64_t>> aux;  // by rank: send_counts, send_displs, recv_counts, ...

  Alltoallv(uint32_t n, const std::vector<std::vector<uint64_t>>& sends,
            const std::vector<std::vector<uint64_t>>& expects)
      : size(n), aux(n, std::vector<uint64_t>(4 * n, 0)) {
    for (uint32_t r = 0; r < n; ++r) {
      for (uint32_t p = 0; p < n; ++p) {
        aux[r][p] = sends[r][p];
        aux[r][2 * n + p] = expects[p][r];
      }
    }
  }
  std::vector<MemberCounts> members(const std::vector<uint32_t>& ranks) const {
    std::vector<MemberCounts> out;
    for (uint32_t r : ranks) out.push_back({r, 0, aux[r].data()});
    return out;
  }
};

std::vector<std::vector<uint64_t>> matrix(uint32_t n) {
  std::vector<std::vector<uint64_t>> m(n, std::vector<uint64_t>(n));
  for (uint32_t i = 0; i < n; ++i) {
    for (uint32_t j = 0; j < n; ++j) m[i][j] = 1 + i + 2 * j;
  }
  return m;
}

// Two nodes: ranks 0,1 and 2,3.
std::string between_nodes(const Alltoallv& a) {
  const std::vector<bool> node0 = {true, true, false, false};
  const std::vector<bool> node1 = {false, false, true, true};
  const std::vector<CountDigest> digests = {
      node_count_digest(Collective::kAlltoallv, 4, a.members({0, 1}), node0),
      node_count_digest(Collective::kAlltoallv, 4, a.members({2, 3}), node1)};
  return cross_node_count_disagreement(Collective::kAlltoallv, 7, 3, digests,
                                       {"node 0 (ranks 0,1)", "node 1 (ranks 2,3)"},
                                       "node 0 (ranks 0,1)", &digests[0]);
}

TEST(CountAgreement, AlltoallvOnOneNode) {
  const auto m = matrix(3);
  EXPECT_EQ(
      local_count_disagreement(Collective::kAlltoallv, 3, 3, Alltoallv(3, m, m).members({0, 1, 2})),
      "");
  auto sends = m;
  sends[0][2] = 7;  // rank 2 expects m[0][2] = 5
  EXPECT_EQ(local_count_disagreement(Collective::kAlltoallv, 3, 3,
                                     Alltoallv(3, sends, m).members({0, 1, 2})),
            "alltoallv seq 3: rank 0 sends 7 elements to rank 2, rank 2 expects 5 from rank 0");
}

TEST(CountAgreement, TheReportedAttackOnOneRank) {
  const std::vector<uint64_t> aux = {1, 0, 1048576, 0};  // sends 1 to itself, expects 1M
  EXPECT_EQ(local_count_disagreement(Collective::kAlltoallv, 1, 1, {{0, 0, aux.data()}}),
            "alltoallv seq 1: rank 0 sends 1 elements to rank 0, rank 0 expects 1048576 from "
            "rank 0");
}

TEST(CountAgreement, ManyDisagreementsAreCounted) {
  const auto m = matrix(4);
  auto sends = m;
  for (auto& row : sends) {
    for (auto& v : row) v += 1;
  }
  const std::string text = local_count_disagreement(Collective::kAlltoallv, 1, 4,
                                                    Alltoallv(4, sends, m).members({0, 1, 2, 3}));
  EXPECT_NE(text.find("and 12 more"), std::string::npos) << text;
}

TEST(CountAgreement, AllgathervOnOneNode) {
  const std::vector<uint64_t> a = {3, 3, 3, 0, 3, 6};  // recv_counts, displs
  const std::vector<uint64_t> b = {3, 4, 3, 0, 3, 7};
  EXPECT_EQ(local_count_disagreement(Collective::kAllgatherv, 2, 3,
                                     {{0, 3, a.data()}, {1, 3, a.data()}, {2, 3, a.data()}}),
            "");
  EXPECT_EQ(local_count_disagreement(Collective::kAllgatherv, 2, 3,
                                     {{0, 3, a.data()}, {1, 4, b.data()}, {2, 3, a.data()}}),
            "allgatherv seq 2: rank 1 sends 4 elements, rank 0 expects 3 from rank 1; rank 1 "
            "sends 4 elements, rank 2 expects 3 from rank 1");
  // Entries for ranks elsewhere must agree too.
  const std::vector<uint64_t> c = {3, 3, 5, 0, 3, 6};
  EXPECT_EQ(
      local_count_disagreement(Collective::kAllgatherv, 2, 3, {{0, 3, a.data()}, {1, 3, c.data()}}),
      "allgatherv seq 2: rank 0 expects 3 elements from rank 2, rank 1 expects 5");
}

TEST(CountAgreement, AlltoallvBetweenNodes) {
  const auto m = matrix(4);
  EXPECT_EQ(between_nodes(Alltoallv(4, m, m)), "");
  // Only across nodes: rank 0 sends rank 2 more than rank 2 expects.
  auto sends = m;
  sends[0][2] += 2;
  const std::string text = between_nodes(Alltoallv(4, sends, m));
  EXPECT_EQ(text,
            "mismatched alltoallv counts on comm 7 seq 3 between nodes: what ranks send to other "
            "nodes is not what those expect, among node 0 (ranks 0,1), node 1 (ranks 2,3): a "
            "rank's send_counts[j] differs from rank j's recv_counts for it; here, node 0 (ranks "
            "0,1) sends 28 elements to ranks on other nodes and expects 18 from them");
  // Totals that agree do not hide a disagreement: two pairs off by +1 and -1.
  sends = m;
  sends[0][2] += 1;
  sends[1][3] -= 1;
  EXPECT_NE(between_nodes(Alltoallv(4, sends, m)), "");
  // A disagreement within a node is the node's own check, not the digest's.
  sends = m;
  sends[0][1] += 5;
  EXPECT_EQ(between_nodes(Alltoallv(4, sends, m)), "");
}

TEST(CountAgreement, AllgathervBetweenNodes) {
  const std::vector<uint64_t> same = {3, 3, 3, 3, 0, 3, 6, 9};
  const std::vector<uint64_t> other = {4, 3, 3, 3, 0, 4, 7, 10};
  const std::vector<bool> node0 = {true, true, false, false};
  const std::vector<bool> node1 = {false, false, true, true};
  const auto digest = [&](const std::vector<uint64_t>& aux, const std::vector<bool>& local,
                          uint32_t first) {
    return node_count_digest(Collective::kAllgatherv, 4,
                             {{first, 3, aux.data()}, {first + 1, 3, aux.data()}}, local);
  };
  EXPECT_EQ(cross_node_count_disagreement(
                Collective::kAllgatherv, 0, 1, {digest(same, node0, 0), digest(same, node1, 2)},
                {"node 0 (ranks 0,1)", "node 1 (ranks 2,3)"}, "", nullptr),
            "");
  const CountDigest here = digest(other, node1, 2);
  EXPECT_EQ(cross_node_count_disagreement(
                Collective::kAllgatherv, 0, 1, {digest(same, node0, 0), here},
                {"node 0 (ranks 0,1)", "node 1 (ranks 2,3)"}, "node 1 (ranks 2,3)", &here),
            "mismatched allgatherv counts on comm 0 seq 1 between nodes: node 1 (ranks 2,3) "
            "passed recv_counts other than node 0 (ranks 0,1)'s; every rank must pass the same "
            "recv_counts, with recv_counts[r] equal to rank r's send count; here, node 1 (ranks "
            "2,3) sends 6 elements and its recv_counts total 13");
}

TEST(StagingPool, CapsRefuseAndRelease) {
  StagingPool pool(-1, size_t{1} << 20, StagingLimits{3 << 20, 2 << 20});
  pool.set_owner(1);
  EXPECT_EQ(pool.reserve(2 << 20), "");
  const std::string refused = pool.reserve(1);
  EXPECT_NE(refused.find("per-job cap of 2097152 bytes (--max-staging-per-job"), std::string::npos)
      << refused;
  pool.unreserve(2 << 20);
  EXPECT_EQ(pool.reserve(1 << 20), "");
  pool.set_owner(2);  // the job changed: its reservations are gone with it
  EXPECT_EQ(pool.reserved_total(), 0u);
  EXPECT_EQ(pool.reserve(2 << 20), "");
  StagingPool small(-1, size_t{1} << 20, StagingLimits{1 << 20, 0});
  small.set_owner(1);
  EXPECT_NE(small.reserve(2 << 20).find("daemon's cap of 1048576 bytes (--max-staging"),
            std::string::npos);
}

TEST(StagingPool, AnotherJobNeverSeesTheBytes) {
  StagingPool pool;
  pool.set_owner(1);
  StagingPool::Buffer b = pool.acquire(1 << 16);
  std::memset(b.data, 0xab, b.capacity);
  pool.release(b);
  // Same job: reused as it is (every read is bounded by what the operation writes).
  StagingPool::Buffer again = pool.acquire(1 << 16);
  EXPECT_EQ(again.data, b.data);
  StagingPool::Buffer held = pool.acquire(1 << 16);
  std::memset(held.data, 0xcd, held.capacity);
  pool.release(again);
  pool.set_owner(2);
  EXPECT_EQ(pool.cached_bytes(), 0u);
  pool.release(held);  // the old job's buffer is unmapped, not cached
  EXPECT_EQ(pool.cached_bytes(), 0u);
  StagingPool::Buffer fresh = pool.acquire(1 << 16);
  const auto* bytes = static_cast<const uint8_t*>(fresh.data);
  for (size_t i = 0; i < fresh.capacity; ++i) ASSERT_EQ(bytes[i], 0) << i;
  pool.release(fresh);
}

}  // namespace
}  // namespace nodecomm::daemon
