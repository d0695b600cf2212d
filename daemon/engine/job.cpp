#include "engine/job.hpp"

#include <fmt/format.h>

#include "nodecomm/ipc/validate.hpp"

namespace nodecomm::daemon {

const proto::OpDescriptor& Operation::first() const {
  for (const auto& s : slots) {
    if (s) return s->desc;
  }
  static const proto::OpDescriptor kEmpty{};
  return kEmpty;
}

Operation& Communicator::add(uint32_t local_rank, const Submission& submission) {
  Operation& op = ops_[submission.desc.seq];
  if (op.slots.empty()) {
    op.seq = submission.desc.seq;
    op.slots.resize(local_size_);
    op.first_arrival_ns = submission.submitted_ns;
  }
  op.slots[local_rank] = submission;
  ++op.arrived;
  op.last_arrival_ns = submission.submitted_ns;
  return op;
}

bool is_comm_management(const Operation& op) {
  const auto c = static_cast<proto::Collective>(op.first().collective);
  return c == proto::Collective::kCommSplit || c == proto::Collective::kCommFree;
}

std::string describe_submission(const proto::OpDescriptor& d) {
  // Management operations carry no data: a split's color and key ride in root and count.
  const auto collective = static_cast<proto::Collective>(d.collective);
  if (collective == proto::Collective::kCommSplit) {
    return fmt::format("comm_split color {} key {}", static_cast<int32_t>(d.root),
                       static_cast<int64_t>(d.count));
  }
  if (collective == proto::Collective::kCommFree) return "comm_free";
  std::string text = fmt::format(
      "{} {} {} count {}", proto::collective_name(static_cast<proto::Collective>(d.collective)),
      proto::dtype_name(static_cast<proto::DType>(d.dtype)),
      proto::redop_name(static_cast<proto::RedOp>(d.redop)), d.count);
  if (const std::string name = ipc::tensor_name(d); !name.empty())
    text += fmt::format(" '{}'", name);
  return text;
}

namespace {
bool descriptors_agree(const proto::OpDescriptor& a, const proto::OpDescriptor& b) {
  if (a.collective != b.collective) return false;
  // A split's color and key (carried in root and count) differ by design.
  const auto c = static_cast<proto::Collective>(a.collective);
  if (c == proto::Collective::kCommSplit) return true;
  // Vector collectives' counts differ per rank; their arrays are compared by the engine.
  if (c == proto::Collective::kAllgatherv || c == proto::Collective::kAlltoallv) {
    return a.dtype == b.dtype;
  }
  return a.dtype == b.dtype && a.redop == b.redop && a.count == b.count && a.root == b.root &&
         a.compression == b.compression;
}
}  // namespace

std::string describe_disagreement(const Operation& op, const CommLayout& layout) {
  const proto::OpDescriptor& reference = op.first();
  bool all_agree = true;
  for (const auto& s : op.slots)
    all_agree = all_agree && s && descriptors_agree(s->desc, reference);
  if (all_agree) return {};
  std::string text = fmt::format("seq {}:", op.seq);
  for (size_t k = 0; k < op.slots.size(); ++k) {
    if (!op.slots[k]) continue;
    const auto& d = op.slots[k]->desc;
    text += fmt::format(" rank {} posted {}", layout.member_ranks[k],
                        proto::collective_name(static_cast<proto::Collective>(d.collective)));
    text += fmt::format(" {} {} count {}", proto::dtype_name(static_cast<proto::DType>(d.dtype)),
                        proto::redop_name(static_cast<proto::RedOp>(d.redop)), d.count);
    if (proto::collective_has_root(static_cast<proto::Collective>(d.collective))) {
      text += fmt::format(" root {}", d.root);
    }
    if (d.compression != 0) {
      text += fmt::format(" compress {}",
                          proto::compression_name(static_cast<proto::Compression>(d.compression)));
    }
    text += ';';
  }
  text.pop_back();
  return text;
}

uint64_t Job::next_serial() {
  static uint64_t last = 0;  // jobs are created on the daemon's one thread
  return ++last;
}

uint32_t CommLayout::node_of_rank(uint32_t rank) const {
  const uint32_t pos = position[rank];
  uint32_t n = 0;
  while (n + 1 < node_offsets.size() && node_offsets[n + 1] <= pos) ++n;
  return n;
}

int CommLayout::member_of_local(uint32_t local_rank) const {
  for (size_t k = 0; k < members.size(); ++k) {
    if (members[k] == local_rank) return static_cast<int>(k);
  }
  return -1;
}

int CommLayout::member_of_rank(uint32_t comm_rank) const {
  for (size_t k = 0; k < member_ranks.size(); ++k) {
    if (member_ranks[k] == comm_rank) return static_cast<int>(k);
  }
  return -1;
}

void CommLayout::set_ranks_by_node(const std::vector<std::vector<uint32_t>>& ranks_by_node) {
  position.assign(size, 0);
  rank_at.clear();
  node_sizes.clear();
  node_offsets.clear();
  for (const auto& ranks : ranks_by_node) {
    node_offsets.push_back(static_cast<uint32_t>(rank_at.size()));
    node_sizes.push_back(static_cast<uint32_t>(ranks.size()));
    for (uint32_t r : ranks) {
      position[r] = static_cast<uint32_t>(rank_at.size());
      rank_at.push_back(r);
    }
  }
  identity = true;
  for (uint32_t r = 0; r < size; ++r) identity = identity && position[r] == r;
}

}  // namespace nodecomm::daemon
