#include "engine/op_check.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "engine/count_agreement.hpp"
#include "engine/job.hpp"

namespace nodecomm::daemon {

OpSummary summarize(uint64_t seq, const proto::OpDescriptor& desc) {
  const auto collective = static_cast<proto::Collective>(desc.collective);
  // A split's color and key ride in count and root; v-collectives' counts differ by rank.
  const bool per_rank_count = collective == proto::Collective::kAllgatherv ||
                              collective == proto::Collective::kAlltoallv ||
                              collective == proto::Collective::kCommSplit;
  OpSummary s{};
  s.seq = seq;
  s.count = per_rank_count ? 0 : desc.count;
  s.root = proto::collective_has_root(collective) ? desc.root : 0;
  s.priority = desc.priority;
  s.collective = static_cast<uint8_t>(desc.collective);
  s.dtype = desc.dtype;
  s.redop = desc.redop;
  s.compression = desc.compression;
  return s;
}

namespace {

std::vector<MemberCounts> member_counts(const Operation& op, const CommLayout& layout) {
  std::vector<MemberCounts> members;
  for (size_t k = 0; k < op.slots.size(); ++k) {
    if (!op.slots[k]) continue;
    members.push_back({layout.member_ranks[k], op.slots[k]->desc.count, op.slots[k]->aux.data()});
  }
  return members;
}

}  // namespace

CountDigest node_digest(const Operation& op, const CommLayout& layout) {
  std::vector<bool> local(layout.size, false);
  for (const uint32_t r : layout.member_ranks) local[r] = true;
  return node_count_digest(static_cast<proto::Collective>(op.first().collective), layout.size,
                           member_counts(op, layout), local);
}

OpSummary summarize(const Operation& op, const CommLayout& layout) {
  OpSummary s = summarize(op.seq, op.first());
  if (proto::aux_entries(static_cast<proto::Collective>(s.collective), layout.size) > 0) {
    const CountDigest d = node_digest(op, layout);
    s.counts_digest[0] = d.digest[0];
    s.counts_digest[1] = d.digest[1];
  }
  if (!op.staging_refused.empty()) s.flags |= kSummaryStagingRefused;
  return s;
}

namespace {

bool same_operation(const OpSummary& a, const OpSummary& b) {
  return a.seq == b.seq && a.count == b.count && a.root == b.root && a.collective == b.collective &&
         a.dtype == b.dtype && a.redop == b.redop && a.compression == b.compression;
}

std::string describe(const OpSummary& s) {
  const auto collective = static_cast<proto::Collective>(s.collective);
  // Colors and keys differ by rank, so a summary names the management operation only.
  if (collective == proto::Collective::kCommSplit || collective == proto::Collective::kCommFree) {
    return std::string(proto::collective_name(collective));
  }
  std::string text = fmt::format("{} {} {} count {}", proto::collective_name(collective),
                                 proto::dtype_name(static_cast<proto::DType>(s.dtype)),
                                 proto::redop_name(static_cast<proto::RedOp>(s.redop)), s.count);
  if (proto::collective_has_root(collective)) text += fmt::format(" root {}", s.root);
  if (s.compression != 0) {
    text += fmt::format(" compress {}",
                        proto::compression_name(static_cast<proto::Compression>(s.compression)));
  }
  return text;
}

// "ranks 2,3" of node n in the communicator.
std::string ranks_of_node(const CommLayout& layout, size_t node) {
  std::string text;
  const uint32_t first = layout.node_offsets[node];
  for (uint32_t k = 0; k < layout.node_sizes[node]; ++k) {
    text += fmt::format("{}{}", k == 0 ? "" : ",", layout.rank_at[first + k]);
  }
  return fmt::format("{} {}", layout.node_sizes[node] == 1 ? "rank" : "ranks", text);
}

// Communicators over at most this many nodes have them all named in an alltoallv count
// disagreement (every node's counts take part in it).
constexpr size_t kListedNodes = 16;

// "node 1 (ranks 2,3)".
std::string node_label(const CommLayout& layout, size_t node) {
  if (node >= layout.node_count) return fmt::format("node {}", node);
  return fmt::format("node {} ({})", node, ranks_of_node(layout, node));
}

// The count digests' verdict, with this node's totals when it holds every member's counts.
std::string count_disagreement(proto::Collective collective, uint32_t comm_id, uint64_t seq,
                               const std::vector<CountDigest>& digests,
                               const std::vector<std::string>& labels, const CommLayout& layout,
                               const Operation* here) {
  const bool mine_known = here != nullptr && here->seq == seq && !here->slots.empty() &&
                          std::all_of(here->slots.begin(), here->slots.end(),
                                      [](const auto& slot) { return slot.has_value(); });
  const CountDigest mine = mine_known ? node_digest(*here, layout) : CountDigest{};
  return cross_node_count_disagreement(collective, comm_id, seq, digests, labels,
                                       node_label(layout, layout.node_index),
                                       mine_known ? &mine : nullptr);
}

}  // namespace

std::string cross_node_disagreement(uint32_t comm_id, uint64_t seq,
                                    const std::vector<std::optional<OpSummary>>& by_node,
                                    const CommLayout& layout, const Operation* here) {
  bool agree = true;
  for (const auto& s : by_node) agree = agree && s && by_node[0] && same_operation(*s, *by_node[0]);
  if (agree) {
    const auto collective = static_cast<proto::Collective>(by_node[0]->collective);
    if (proto::aux_entries(collective, layout.size) == 0) return {};
    std::vector<CountDigest> digests;
    std::vector<std::string> labels;
    for (size_t n = 0; n < by_node.size(); ++n) {
      const OpSummary& s = *by_node[n];
      digests.push_back(CountDigest{{s.counts_digest[0], s.counts_digest[1]}, 0, 0});
      labels.push_back(node_label(layout, n));
    }
    return count_disagreement(collective, comm_id, seq, digests, labels, layout, here);
  }
  std::string text =
      fmt::format("mismatched collectives on comm {} seq {} between nodes:", comm_id, seq);
  for (size_t n = 0; n < by_node.size(); ++n) {
    text += fmt::format(" node {} ({}) posted {};", n, ranks_of_node(layout, n),
                        by_node[n] ? describe(*by_node[n]) : std::string("nothing"));
  }
  text.pop_back();
  return text;
}

std::string cross_node_disagreement(uint32_t comm_id, uint64_t seq, const Announcement& a,
                                    const CommLayout& layout, const Operation* here) {
  const auto collective = static_cast<proto::Collective>(a.low.collective);
  if (!same_operation(a.low, a.high)) {
    // The least and the greatest submission by their fields: two nodes that differ.
    return fmt::format(
        "mismatched collectives on comm {} seq {} between nodes: {} posted {}; {} posted {} (of "
        "{} nodes)",
        comm_id, seq, node_label(layout, a.low_node), describe(a.low),
        node_label(layout, a.high_node), describe(a.high), a.nodes);
  }
  if (collective == proto::Collective::kAllgatherv) {
    // Named against the lower node of the two (node 0 when it is one of them).
    const bool low_first = a.low_node < a.high_node;
    const OpSummary& first = low_first ? a.low : a.high;
    const OpSummary& second = low_first ? a.high : a.low;
    const std::vector<CountDigest> digests = {
        CountDigest{{first.counts_digest[0], first.counts_digest[1]}, 0, 0},
        CountDigest{{second.counts_digest[0], second.counts_digest[1]}, 0, 0}};
    return count_disagreement(collective, comm_id, seq, digests,
                              {node_label(layout, std::min(a.low_node, a.high_node)),
                               node_label(layout, std::max(a.low_node, a.high_node))},
                              layout, here);
  }
  if (collective == proto::Collective::kAlltoallv) {
    // Summed on the way: one digest stands for every node, which a few nodes list.
    std::string nodes = fmt::format("the communicator's {} nodes", a.nodes);
    if (layout.node_count <= kListedNodes) {
      nodes.clear();
      for (size_t n = 0; n < layout.node_count; ++n) {
        nodes += (n == 0 ? "" : ", ") + node_label(layout, n);
      }
    }
    return count_disagreement(collective, comm_id, seq,
                              {CountDigest{{a.counts_sum[0], a.counts_sum[1]}, 0, 0}}, {nodes},
                              layout, here);
  }
  return {};
}

std::string cross_node_refusal(uint32_t comm_id, uint64_t seq, const Announcement& a,
                               const CommLayout& layout) {
  if (a.refused == 0) return {};
  return fmt::format(
      "{} seq {} on comm {} not run, out of staging memory: {}{} cannot stage it (that daemon's "
      "log names the bytes and the cap; limits --max-staging, --max-staging-per-job)",
      describe(a.low), seq, comm_id, node_label(layout, a.refused_node),
      a.refused > 1 ? fmt::format(" and {} other node(s)", a.refused - 1) : std::string());
}

std::string cross_node_refusal(uint32_t comm_id, uint64_t seq,
                               const std::vector<std::optional<OpSummary>>& by_node,
                               const CommLayout& layout) {
  std::string text;
  for (size_t n = 0; n < by_node.size(); ++n) {
    if (!by_node[n] || (by_node[n]->flags & kSummaryStagingRefused) == 0) continue;
    text += fmt::format("{} node {} ({})", text.empty() ? "" : ",", n, ranks_of_node(layout, n));
  }
  if (text.empty()) return {};
  return fmt::format(
      "{} seq {} on comm {} not run, out of staging memory:{} cannot stage it (that daemon's "
      "log names the bytes and the cap; limits --max-staging, --max-staging-per-job)",
      describe(*by_node[0]), seq, comm_id, text);
}

}  // namespace nodecomm::daemon
