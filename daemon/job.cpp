#include "job.hpp"

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
  }
  op.slots[local_rank] = submission;
  ++op.arrived;
  op.last_arrival_ns = submission.submitted_ns;
  return op;
}

std::string describe_submission(const proto::OpDescriptor& d) {
  std::string text = fmt::format(
      "{} {} {} count {}", proto::collective_name(static_cast<proto::Collective>(d.collective)),
      proto::dtype_name(static_cast<proto::DType>(d.dtype)),
      proto::redop_name(static_cast<proto::RedOp>(d.redop)), d.count);
  if (const std::string name = ipc::tensor_name(d); !name.empty())
    text += fmt::format(" '{}'", name);
  return text;
}

namespace {
bool agree(const proto::OpDescriptor& a, const proto::OpDescriptor& b) {
  return a.collective == b.collective && a.dtype == b.dtype && a.redop == b.redop &&
         a.count == b.count && a.root == b.root;
}
}  // namespace

std::string describe_disagreement(const Operation& op, uint32_t world_offset) {
  const proto::OpDescriptor& reference = op.first();
  bool all_agree = true;
  for (const auto& s : op.slots) all_agree = all_agree && s && agree(s->desc, reference);
  if (all_agree) return {};
  std::string text = fmt::format("seq {}:", op.seq);
  for (size_t local = 0; local < op.slots.size(); ++local) {
    if (!op.slots[local]) continue;
    const auto& d = op.slots[local]->desc;
    text += fmt::format(" rank {} posted {}", world_offset + local,
                        proto::collective_name(static_cast<proto::Collective>(d.collective)));
    text += fmt::format(" {} {} count {};", proto::dtype_name(static_cast<proto::DType>(d.dtype)),
                        proto::redop_name(static_cast<proto::RedOp>(d.redop)), d.count);
  }
  return text;
}

}  // namespace nodecomm::daemon
