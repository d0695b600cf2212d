#include "comm_split.hpp"

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
  std::vector<int> bytes;
  std::vector<int> displs;
  for (size_t n = 0; n < lay.node_sizes.size(); ++n) {
    bytes.push_back(static_cast<int>(lay.node_sizes[n] * sizeof(SplitRecord)));
    displs.push_back(static_cast<int>(lay.node_offsets[n] * sizeof(SplitRecord)));
  }
  return ctx.transport.start_allgatherv(lay.node_comm, op.staging.data, std::move(bytes),
                                        std::move(displs));
}

void split_finish(CollectiveContext& ctx, Operation& op) {
  const CommLayout& parent = ctx.comm.layout();
  const auto* records = static_cast<const SplitRecord*>(op.staging.data);
  // Every record with the parent node it came from, grouped by color in ascending order.
  struct Entry {
    SplitRecord record;
    uint32_t parent_node;
  };
  std::map<int32_t, std::vector<Entry>> by_color;
  for (uint32_t n = 0; n < parent.node_sizes.size(); ++n) {
    for (uint32_t i = 0; i < parent.node_sizes[n]; ++i) {
      const SplitRecord& r = records[parent.node_offsets[n] + i];
      if (r.color != proto::kUndefinedColor) by_color[r.color].push_back(Entry{r, n});
    }
  }
  op.split_results.assign(parent.members.size(), Operation::SplitResult{});
  int tag = 0;
  for (auto& [color, entries] : by_color) {
    ++tag;
    std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
      return a.record.key != b.record.key ? a.record.key < b.record.key
                                          : a.record.parent_rank < b.record.parent_rank;
    });
    // The group's daemons in parent node order; each node's members in new-rank order.
    std::vector<int> parent_nodes;
    std::map<uint32_t, std::vector<uint32_t>> ranks_of_node;
    for (uint32_t rank = 0; rank < entries.size(); ++rank) {
      ranks_of_node[entries[rank].parent_node].push_back(rank);
    }
    for (const auto& [node, ranks] : ranks_of_node) parent_nodes.push_back(static_cast<int>(node));
    const auto mine = ranks_of_node.find(parent.node_index);
    if (mine == ranks_of_node.end()) continue;  // no member here: not in this group

    CommLayout child;
    child.size = static_cast<uint32_t>(entries.size());
    child.node_count = static_cast<uint32_t>(parent_nodes.size());
    child.node_index = static_cast<uint32_t>(
        std::find(parent_nodes.begin(), parent_nodes.end(), static_cast<int>(parent.node_index)) -
        parent_nodes.begin());
    child.node_comm = ctx.transport.create_group(parent.node_comm, parent_nodes, tag);
    std::vector<std::vector<uint32_t>> ranks_by_node;
    for (const auto& [node, ranks] : ranks_of_node) ranks_by_node.push_back(ranks);
    child.set_ranks_by_node(ranks_by_node);
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
