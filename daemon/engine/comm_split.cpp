#include "engine/comm_split.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

namespace nodecomm::daemon {

namespace {

struct SplitRecord {
  int64_t key;
  int32_t color;
  uint32_t parent_rank;
};
static_assert(sizeof(SplitRecord) == 16);

}  // namespace

void split_stage_in(CollectiveContext& ctx, Operation& op) {
  const CommLayout& lay = ctx.comm.layout();
  ctx.staging.release(op.staging);
  op.staging = ctx.staging.acquire(std::max<size_t>(1, lay.size * sizeof(SplitRecord)));
  auto* records = static_cast<SplitRecord*>(op.staging.data);
  for (size_t k = 0; k < lay.members.size(); ++k) {
    const proto::OpDescriptor& d = op.slots[k]->desc;
    // Bit patterns, as nodecomm.h's nc_comm_split packs them.
    records[lay.first_position() + k] = SplitRecord{
        static_cast<int64_t>(d.count), static_cast<int32_t>(d.root), lay.member_ranks[k]};
  }
}

TransportHandle split_start_network(CollectiveContext& ctx, Operation& op) {
  const CommLayout& lay = ctx.comm.layout();
  std::vector<size_t> bytes;
  std::vector<size_t> displs;
  for (size_t n = 0; n < lay.node_sizes.size(); ++n) {
    bytes.push_back(lay.node_sizes[n] * sizeof(SplitRecord));
    displs.push_back(lay.node_offsets[n] * sizeof(SplitRecord));
  }
  return ctx.transport.start_allgatherv(lay.node_comm, op.staging.data, std::move(bytes),
                                        std::move(displs));
}

namespace {

struct SplitEntry {
  SplitRecord record;
  uint32_t parent_node;
};

// Every record with the parent node it came from, grouped by color in ascending order and
// sorted by (key, parent rank) within a color: the same on every daemon.
std::map<int32_t, std::vector<SplitEntry>> plan_split(const CommLayout& parent,
                                                      const Operation& op) {
  const auto* records = static_cast<const SplitRecord*>(op.staging.data);
  std::map<int32_t, std::vector<SplitEntry>> by_color;
  for (uint32_t n = 0; n < parent.node_sizes.size(); ++n) {
    for (uint32_t i = 0; i < parent.node_sizes[n]; ++i) {
      const SplitRecord& r = records[parent.node_offsets[n] + i];
      if (r.color != proto::kUndefinedColor) by_color[r.color].push_back(SplitEntry{r, n});
    }
  }
  for (auto& [color, entries] : by_color) {
    std::stable_sort(entries.begin(), entries.end(), [](const SplitEntry& a, const SplitEntry& b) {
      return a.record.key != b.record.key ? a.record.key < b.record.key
                                          : a.record.parent_rank < b.record.parent_rank;
    });
  }
  return by_color;
}

bool hosts(const std::vector<SplitEntry>& entries, uint32_t node) {
  return std::any_of(entries.begin(), entries.end(),
                     [node](const SplitEntry& e) { return e.parent_node == node; });
}

}  // namespace

TransportHandle split_start_groups(CollectiveContext& ctx, Operation& op) {
  const CommLayout& parent = ctx.comm.layout();
  std::vector<bool> include;
  for (const auto& [color, entries] : plan_split(parent, op)) {
    include.push_back(hosts(entries, parent.node_index));
  }
  return ctx.transport.start_split_groups(parent.node_comm, std::move(include));
}

void split_finish(CollectiveContext& ctx, Operation& op, TransportHandle groups) {
  const CommLayout& parent = ctx.comm.layout();
  const std::vector<NodeComm> node_comms = ctx.transport.take_groups(groups);
  op.split_results.assign(parent.members.size(), Operation::SplitResult{});
  size_t index = 0;
  for (const auto& [color, entries] : plan_split(parent, op)) {
    const NodeComm node_comm = node_comms[index++];
    // The group's daemons in parent node order; each node's members in new-rank order.
    std::map<uint32_t, std::vector<uint32_t>> ranks_of_node;
    for (uint32_t rank = 0; rank < entries.size(); ++rank) {
      ranks_of_node[entries[rank].parent_node].push_back(rank);
    }
    const auto mine = ranks_of_node.find(parent.node_index);
    if (mine == ranks_of_node.end()) continue;  // no member here: not in this group

    CommLayout child;
    child.size = static_cast<uint32_t>(entries.size());
    child.node_count = static_cast<uint32_t>(ranks_of_node.size());
    child.node_index = static_cast<uint32_t>(std::distance(ranks_of_node.begin(), mine));
    child.node_comm = node_comm;
    std::vector<std::vector<uint32_t>> ranks_by_node;
    ranks_by_node.reserve(ranks_of_node.size());
    for (const auto& [node, ranks] : ranks_of_node) ranks_by_node.push_back(ranks);
    child.set_ranks_by_node(ranks_by_node);
    for (const auto& entry : entries) {
      const uint32_t p = entry.record.parent_rank;
      child.world_rank_of.push_back(p < parent.world_rank_of.size() ? parent.world_rank_of[p] : p);
    }
    for (uint32_t rank : mine->second) {
      const int k = parent.member_of_rank(entries[rank].record.parent_rank);
      child.members.push_back(parent.members[static_cast<size_t>(k)]);
      child.member_ranks.push_back(rank);
    }
    const uint32_t id = ctx.job.next_comm_id++;
    for (size_t c = 0; c < child.members.size(); ++c) {
      const int k = parent.member_of_local(child.members[c]);
      op.split_results[static_cast<size_t>(k)] =
          Operation::SplitResult{id, child.member_ranks[c], child.size};
    }
    ctx.job.comms.emplace(id, std::make_unique<Communicator>(id, std::move(child)));
  }
  ctx.staging.release(op.staging);
  op.staging = {};
}

}  // namespace nodecomm::daemon
