#include "engine/count_agreement.hpp"

#include <fmt/format.h>
#include <xxhash.h>

namespace nodecomm::daemon {

using proto::Collective;

namespace {

// Disagreements listed in one message: the completion message has room for a few.
constexpr int kListed = 4;

// Keyed terms for the alltoallv lanes. The keys only separate the two lanes; they are not
// secret (see the header for what that allows and why it is still safe).
constexpr uint64_t kLaneSeed[2] = {0x6e6f6465636f6d6dULL, 0x636f756e74733231ULL};

// A 64-bit finalizer (MurmurHash3's fmix64): a bijection that spreads every input bit.
constexpr uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

// A few nanoseconds per pair: an alltoallv among 1024 ranks with 8 on this node has 32k terms,
// so a general-purpose hash call per term (about 40 ns here) would cost the engine a
// millisecond per operation.
uint64_t pair_term(int lane, uint32_t source, uint32_t dest, uint64_t count) {
  const uint64_t pair = uint64_t{source} << 32 | dest;
  return mix64(mix64(count ^ kLaneSeed[lane]) ^ pair);
}

void note(std::string& text, int& listed, const std::string& what) {
  if (listed < kListed) text += (listed == 0 ? " " : "; ") + what;
  ++listed;
}

std::string finish_listing(std::string text, int listed) {
  if (listed == 0) return {};
  if (listed > kListed) text += fmt::format("; and {} more", listed - kListed);
  return text;
}

}  // namespace

std::string local_count_disagreement(Collective c, uint64_t seq, uint32_t size,
                                     const std::vector<MemberCounts>& members) {
  std::string text = fmt::format("{} seq {}:", proto::collective_name(c), seq);
  int listed = 0;
  if (c == Collective::kAllgatherv) {
    // What each member sends against what every member expects from it...
    for (const MemberCounts& from : members) {
      for (const MemberCounts& to : members) {
        const uint64_t expects = to.aux[from.rank];
        if (expects != from.count) {
          note(text, listed,
               fmt::format("rank {} sends {} elements, rank {} expects {} from rank {}", from.rank,
                           from.count, to.rank, expects, from.rank));
        }
      }
    }
    // ...and, for ranks on other nodes, that every member expects the same.
    std::vector<bool> here(size, false);
    for (const MemberCounts& m : members) here[m.rank] = true;
    for (size_t m = 1; m < members.size(); ++m) {
      for (uint32_t r = 0; r < size; ++r) {
        if (!here[r] && members[m].aux[r] != members[0].aux[r]) {
          note(text, listed,
               fmt::format("rank {} expects {} elements from rank {}, rank {} expects {}",
                           members[0].rank, members[0].aux[r], r, members[m].rank,
                           members[m].aux[r]));
        }
      }
    }
  } else if (c == Collective::kAlltoallv) {
    for (const MemberCounts& from : members) {
      const uint64_t* send_counts = from.aux;
      for (const MemberCounts& to : members) {
        const uint64_t* recv_counts = to.aux + size_t{2} * size;
        if (send_counts[to.rank] != recv_counts[from.rank]) {
          note(text, listed,
               fmt::format("rank {} sends {} elements to rank {}, rank {} expects {} from rank {}",
                           from.rank, send_counts[to.rank], to.rank, to.rank,
                           recv_counts[from.rank], from.rank));
        }
      }
    }
  }
  return finish_listing(std::move(text), listed);
}

CountDigest node_count_digest(Collective c, uint32_t size, const std::vector<MemberCounts>& members,
                              const std::vector<bool>& local) {
  CountDigest d;
  if (members.empty()) return d;
  if (c == Collective::kAllgatherv) {
    const XXH128_hash_t h = XXH3_128bits(members[0].aux, size_t{size} * sizeof(uint64_t));
    d.digest[0] = h.low64;
    d.digest[1] = h.high64;
    for (const MemberCounts& m : members) d.sent += m.count;
    for (uint32_t r = 0; r < size; ++r) d.expected += members[0].aux[r];
  } else if (c == Collective::kAlltoallv) {
    // Pairs within the node were compared exactly (local_count_disagreement) and would cancel
    // anyway; only pairs that cross nodes enter the lanes. Unsigned wrap-around is the
    // arithmetic of the lanes (sums modulo 2^64).
    for (const MemberCounts& m : members) {
      const uint64_t* send_counts = m.aux;
      const uint64_t* recv_counts = m.aux + size_t{2} * size;
      for (uint32_t peer = 0; peer < size; ++peer) {
        if (local[peer]) continue;
        for (int lane = 0; lane < 2; ++lane) {
          d.digest[lane] += pair_term(lane, m.rank, peer, send_counts[peer]);
          d.digest[lane] -= pair_term(lane, peer, m.rank, recv_counts[peer]);
        }
        d.sent += send_counts[peer];
        d.expected += recv_counts[peer];
      }
    }
  }
  return d;
}

std::string cross_node_count_disagreement(Collective c, uint32_t comm_id, uint64_t seq,
                                          const std::vector<CountDigest>& by_node,
                                          const std::vector<std::string>& labels,
                                          const std::string& here_label, const CountDigest* here) {
  if (by_node.empty()) return {};
  const auto node = [&](size_t n) { return n < labels.size() ? labels[n] : std::string("?"); };
  std::string text = fmt::format("mismatched {} counts on comm {} seq {} between nodes: ",
                                 proto::collective_name(c), comm_id, seq);
  if (c == Collective::kAllgatherv) {
    // Nodes whose recv_counts differ from node 0's.
    std::string differ;
    for (size_t n = 1; n < by_node.size(); ++n) {
      if (by_node[n].digest[0] != by_node[0].digest[0] ||
          by_node[n].digest[1] != by_node[0].digest[1]) {
        differ += (differ.empty() ? "" : ", ") + node(n);
      }
    }
    if (differ.empty()) return {};
    text += fmt::format(
        "{} passed recv_counts other than {}'s; every rank must pass the same "
        "recv_counts, with recv_counts[r] equal to rank r's send count",
        differ, node(0));
    if (here != nullptr) {
      text += fmt::format("; here, {} sends {} elements and its recv_counts total {}",
                          here_label, here->sent, here->expected);
    }
    return text;
  }
  if (c != Collective::kAlltoallv) return {};
  uint64_t sum[2] = {0, 0};
  for (const CountDigest& d : by_node) {
    sum[0] += d.digest[0];
    sum[1] += d.digest[1];
  }
  if (sum[0] == 0 && sum[1] == 0) return {};
  std::string nodes;
  for (size_t n = 0; n < by_node.size(); ++n) nodes += (n == 0 ? "" : ", ") + node(n);
  text += fmt::format(
      "what ranks send to other nodes is not what those expect, among {}: a "
      "rank's send_counts[j] differs from rank j's recv_counts for it",
      nodes);
  if (here != nullptr) {
    text += fmt::format(
        "; here, {} sends {} elements to ranks on other nodes and expects {} "
        "from them",
        here_label, here->sent, here->expected);
  }
  return text;
}

}  // namespace nodecomm::daemon
