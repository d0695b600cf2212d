// Activations and their exchanges between operations (docs/MLSL.md, "Activations"). Commit
// plans both directions of each linked output/input pair: which collective the sender posts on
// its packed buffer, and the blocks each side packs and unpacks. Every block a consumer unpacks
// holds exactly the elements its getters (minibatch offset, feature-map offset and count) name.
#include <algorithm>

#include "impl.hpp"

namespace nodecomm::mlsl {

namespace {

void activation_add(std::vector<std::unique_ptr<BlockImpl>>& list, size_t mb_offset,
                    size_t mb_count, size_t fm_offset, size_t fm_count, size_t fm_size,
                    size_t buf_offset, DataType type) {
  list.push_back(std::make_unique<BlockImpl>(mb_offset, mb_count, fm_offset, fm_count, fm_size,
                                             buf_offset, type));
  Runtime::get().add_live(HandleKind::block, list.back().get());
}

// Cases 4 and 5: the sender's tile cut into n blocks of lm rows x f feature maps, block k for
// group member k; the receiver's tile cut the same way gives where block k lands.
size_t activation_grid_blocks(std::vector<std::unique_ptr<BlockImpl>>& list, size_t mb,
                              size_t local_fm, size_t lm, size_t f, size_t fm_size, size_t c,
                              DataType type) {
  size_t k = 0;
  for (size_t i = 0; i < mb; i += lm) {
    for (size_t j = 0; j < local_fm; j += f) {
      activation_add(list, i, std::min(lm, mb - i), j, std::min(f, local_fm - j), fm_size, k * c,
                     type);
      ++k;
    }
  }
  return k;
}

int activation_comm_size(nc_comm_t comm) {
  int n = 0;
  nc_comm_size(Runtime::get().ctx(), comm, &n);
  return n;
}

nc_comm_t activation_dup_global() {
  Runtime& rt = Runtime::get();
  nc_comm_t c = NC_COMM_NULL;
  check_nc(nc_comm_dup(rt.ctx(), rt.global(), &c), "Commit: a communicator for a permutation");
  return c;
}

}  // namespace

BlockImpl::~BlockImpl() {
  Runtime::get().remove_live(HandleKind::block, this);
}

ActivationImpl::ActivationImpl(OperationImpl* op, bool input, size_t index,
                               const ActivationShape& shape)
    : op(op),
      input(input),
      index(index),
      global_fm(shape.fm_count),
      fm_size(shape.fm_size),
      type(shape.type),
      request("operation " + op->name + (input ? " input " : " output ") + std::to_string(index)) {
  Runtime::get().add_live(HandleKind::activation, this);
}

ActivationImpl::~ActivationImpl() {
  request.settle();
  if (peer != nullptr && peer->peer == this) peer->peer = nullptr;
  Runtime::get().remove_live(HandleKind::activation, this);
}

std::string ActivationImpl::describe() const {
  return "operation " + op->name + (input ? " input " : " output ") + std::to_string(index);
}

void ActivationImpl::assign_geometry() {
  const DistributionImpl& d = *op->dist;
  const auto m = static_cast<size_t>(d.model_size());
  if (!input && op->type == OT_CC) {
    // A cross-correlation's output: every model part computes partial sums of all of it.
    local_fm = global_fm;
    fm_offset = 0;
    need_reduce = m > 1;
  } else {
    local_fm = global_fm / m;
    fm_offset = local_fm * static_cast<size_t>(d.model_index());
    need_reduce = false;
  }
}

void ActivationImpl::reset_plan() {
  request.settle();
  pack.clear();
  unpack.clear();
  plan = SendPlan{};
  comm_buf = Scratch();
}

void plan_exchange(ActivationImpl& out, ActivationImpl& in) {
  Runtime& rt = Runtime::get();
  out.reset_plan();
  in.reset_plan();
  DistributionImpl& dO = *out.op->dist;
  DistributionImpl& dI = *in.op->dist;
  if (rt.size() == 1 || (!out.need_reduce && &dO == &dI)) return;  // same tile on both sides

  const DataType t = out.type;
  const size_t mbO = out.op->minibatch.local;
  const size_t mbI = in.op->minibatch.local;
  const size_t FO = out.global_fm;
  const size_t FI = in.global_fm;
  const size_t SO = out.fm_size;
  const size_t SI = in.fm_size;
  const size_t LO = out.local_fm;
  const size_t LI = in.local_fm;
  const auto MO = static_cast<size_t>(dO.model_size());
  const auto DO = static_cast<size_t>(dO.data_size());
  const auto MI = static_cast<size_t>(dI.model_size());
  const auto DI = static_cast<size_t>(dI.data_size());
  const std::string where = "exchange between " + out.describe() + " on " + dO.describe() +
                            " and " + in.describe() + " on " + dI.describe();
  SendPlan& fwd = out.plan;
  SendPlan& bwd = in.plan;

  if (out.need_reduce && &dO == &dI) {
    // Case 1: partial sums reduced and scattered over the model group, gathered back.
    const size_t c = LI * mbI * SI;
    require(FO % MO == 0 && (FO / MO) * SO * mbO == c, where + ": " + std::to_string(FO) +
                                                           " feature maps do not split evenly "
                                                           "over " +
                                                           std::to_string(MO) + " model parts");
    const auto m = static_cast<size_t>(dO.model_index());
    fwd = SendPlan{SendPlan::Kind::reduce_scatter, dO.model_comm(), c, 0, MO * c, (MO + 1) * c};
    bwd = SendPlan{SendPlan::Kind::allgather, dO.model_comm(), c, m * c, 0, MO * c};
    for (size_t i = 0; i < MO; ++i) {
      activation_add(out.pack, 0, mbO, i * (FO / MO), FO / MO, SO, i * c, t);
      activation_add(out.unpack, 0, mbO, i * (FO / MO), FO / MO, SO, i * c, t);
    }
    activation_add(in.unpack, 0, mbI, 0, LI, SI, 0, t);
    activation_add(in.pack, 0, mbI, 0, LI, SI, m * c, t);
  } else if (out.need_reduce && MI == 1 && DO == DI) {
    // Case 2: the model group's partial sums allreduced; the consumer holds whole feature maps.
    const size_t c = FO * mbO * SO;
    fwd = SendPlan{SendPlan::Kind::allreduce, dO.model_comm(), c, 0, 0, c};
    activation_add(out.pack, 0, mbO, 0, FO, SO, 0, t);
    activation_add(in.unpack, 0, mbI, 0, FI, SI, 0, t);
    if (DO > 1) {
      // The slice a process reduced (its data index in dO, p / MO) is another process's
      // consumer slice (data index in dI, p % DO): send it there, the transpose of the grid.
      const int L = static_cast<int>(DO * MO);
      const int g = rt.rank();
      const int R = g / L;
      const int p = g % L;
      const int src =
          R * L + (p % static_cast<int>(DO)) * static_cast<int>(MO) + p / static_cast<int>(DO);
      // dst is src's inverse: the q with transpose(q) == p.
      int dst = -1;
      for (int q = 0; q < L; ++q) {
        if ((q % static_cast<int>(DO)) * static_cast<int>(MO) + q / static_cast<int>(DO) == p) {
          dst = R * L + q;
        }
      }
      fwd.buffer_elems = 2 * c;
      fwd.result_offset = c;
      fwd.permute = true;
      fwd.permute_comm = activation_dup_global();
      fwd.permute_to = dst;
      fwd.permute_from = src;
      fwd.permute_count = c;
      bwd = SendPlan{SendPlan::Kind::none, NC_COMM_NULL, 0, 0, c, 2 * c};
      bwd.permute = true;
      bwd.permute_comm = activation_dup_global();
      bwd.permute_to = src;
      bwd.permute_from = dst;
      bwd.permute_count = c;
      in.op->session->extra_comms.push_back(fwd.permute_comm);
      in.op->session->extra_comms.push_back(bwd.permute_comm);
      activation_add(in.pack, 0, mbI, 0, FI, SI, 0, t);
      activation_add(out.unpack, 0, mbO, 0, FO, SO, 0, t);
    }
    // With one data part the consumer's gradient is already the producer's: no backward
    // exchange, and the program uses the shared buffer as it is.
  } else if (out.need_reduce && MI == 1 && DI == MO * DO) {
    // Case 3: the producer's minibatch slice is split over its model group as the consumer's.
    require(mbO % MO == 0 && mbO / MO == mbI, where + ": the local minibatch " +
                                                  std::to_string(mbO) + " does not split into " +
                                                  std::to_string(MO) + " consumer slices");
    const size_t c = FI * mbI * SI;
    const auto j = static_cast<size_t>(dO.model_index());
    fwd = SendPlan{SendPlan::Kind::reduce_scatter, dO.model_comm(), c, 0, MO * c, (MO + 1) * c};
    bwd = SendPlan{SendPlan::Kind::allgather, dO.model_comm(), c, j * c, 0, MO * c};
    for (size_t i = 0; i < MO; ++i) {
      activation_add(out.pack, i * mbI, mbI, 0, FO, SO, i * c, t);
      activation_add(out.unpack, i * mbI, mbI, 0, FO, SO, i * c, t);
    }
    activation_add(in.unpack, 0, mbI, 0, FI, SI, 0, t);
    activation_add(in.pack, 0, mbI, 0, FI, SI, j * c, t);
  } else if (!out.need_reduce && (MO == 1 || MI == 1)) {
    // Cases 4 and 5: re-tiling by an alltoall over the model group of the side that has one.
    const nc_comm_t comm = MO == 1 ? dI.model_comm() : dO.model_comm();
    const auto n = static_cast<size_t>(activation_comm_size(comm));
    const size_t lm = std::min(mbO, mbI);
    const size_t fx = std::min(LO * SO, LI * SI);
    require(lm > 0 && fx > 0 && fx % SO == 0 && fx % SI == 0,
            where + ": the tiles do not cut into whole feature maps");
    const size_t c = lm * fx;
    const size_t sent = activation_grid_blocks(out.pack, mbO, LO, lm, fx / SO, SO, c, t);
    const size_t got = activation_grid_blocks(in.unpack, mbI, LI, lm, fx / SI, SI, c, t);
    activation_grid_blocks(in.pack, mbI, LI, lm, fx / SI, SI, c, t);
    activation_grid_blocks(out.unpack, mbO, LO, lm, fx / SO, SO, c, t);
    require(sent == n && got == n, where + ": " + std::to_string(sent) + " blocks to send and " +
                                       std::to_string(got) + " to receive, but the group has " +
                                       std::to_string(n) + " members (not supported)");
    fwd = SendPlan{SendPlan::Kind::alltoall, comm, c, 0, n * c, 2 * n * c};
    bwd = SendPlan{SendPlan::Kind::alltoall, comm, c, 0, n * c, 2 * n * c};
  } else {
    throw Misuse(where + " is not supported (as in MLSL)");
  }
  for (ActivationImpl* a : {&out, &in}) {
    if (a->plan.kind != SendPlan::Kind::none || a->plan.permute) {
      a->comm_buf = Scratch(a->plan.buffer_elems * size_of(t));
    }
  }
  rt.log(2, where + ": " + std::to_string(out.pack.size()) + " blocks forward, " +
                std::to_string(in.pack.size()) + " backward");
}

void ActivationImpl::start(void* buf) {
  if (plan.kind == SendPlan::Kind::none && !plan.permute) return;
  require(buf != nullptr, [&] { return describe() + ": StartComm needs a buffer"; });
  Runtime& rt = Runtime::get();
  auto x = std::make_unique<Exchange>(describe() + " exchange");
  x->set_owner(op);
  x->set_attr(rt.critical_priority(), "mlsl.s" + std::to_string(op->session->id) + ".op" +
                                          std::to_string(op->index) + (input ? ".in" : ".out") +
                                          std::to_string(index));
  const nc_dtype_t dt = to_nc(type);
  const size_t elem = size_of(type);
  char* b = static_cast<char*>(buf);
  const SendPlan p = plan;
  switch (p.kind) {
    case SendPlan::Kind::reduce_scatter:
      x->add_step([=](const nc_op_attr_t* a, nc_request_t* r) {
        return nc_reduce_scatter(Runtime::get().ctx(), b, b + p.result_offset * elem, p.count, dt,
                                 NC_SUM, p.comm, a, r);
      });
      break;
    case SendPlan::Kind::allgather:
      x->add_step([=](const nc_op_attr_t* a, nc_request_t* r) {
        return nc_allgather(Runtime::get().ctx(), b + p.send_offset * elem, b, p.count, dt, p.comm,
                            a, r);
      });
      break;
    case SendPlan::Kind::allreduce:
      x->add_step([=](const nc_op_attr_t* a, nc_request_t* r) {
        return nc_allreduce(Runtime::get().ctx(), b, b, p.count, dt, NC_SUM, p.comm, a, r);
      });
      break;
    case SendPlan::Kind::alltoall:
      x->add_step([=](const nc_op_attr_t* a, nc_request_t* r) {
        return nc_alltoall(Runtime::get().ctx(), b, b + p.result_offset * elem, p.count, dt, p.comm,
                           a, r);
      });
      break;
    case SendPlan::Kind::none:
      break;
  }
  if (p.permute) {
    const auto n = static_cast<size_t>(activation_comm_size(p.permute_comm));
    std::vector<size_t> sc(n, 0);
    std::vector<size_t> so(n, 0);
    std::vector<size_t> rc(n, 0);
    std::vector<size_t> ro(n, 0);
    sc[p.permute_to] = p.permute_count;
    so[p.permute_to] = p.permute_send_offset;
    rc[p.permute_from] = p.permute_count;
    // Received behind the sent slice (recv base = the result area), so the two never overlap.
    x->add_step([=](const nc_op_attr_t* a, nc_request_t* r) {
      return nc_alltoallv(Runtime::get().ctx(), b, sc.data(), so.data(), b + p.result_offset * elem,
                          rc.data(), ro.data(), dt, p.permute_comm, a, r);
    });
  }
  request.start(std::move(x), b + p.result_offset * elem);
  started_buf = b;
}

void* ActivationImpl::wait() {
  // The data this activation unpacks comes from the peer's exchange.
  if (peer == nullptr) return nullptr;
  return peer->request.wait();
}

}  // namespace nodecomm::mlsl

namespace MLSL {

using nodecomm::mlsl::ActivationImpl;
using nodecomm::mlsl::BlockImpl;
using nodecomm::mlsl::entry;
using nodecomm::mlsl::HandleKind;
using nodecomm::mlsl::impl_of;
using nodecomm::mlsl::Misuse;
using nodecomm::mlsl::size_of;

namespace {
ActivationImpl& activation_self(Activation* a) {
  return impl_of<ActivationImpl>(a, HandleKind::activation, "Activation");
}
BlockImpl& activation_block(CommBlockInfo* b) {
  return impl_of<BlockImpl>(b, HandleKind::block, "CommBlockInfo");
}
}  // namespace

size_t CommBlockInfo::GetMbOffset() {
  return entry("CommBlockInfo::GetMbOffset", [&] { return activation_block(this).mb_offset; });
}
size_t CommBlockInfo::GetMbCount() {
  return entry("CommBlockInfo::GetMbCount", [&] { return activation_block(this).mb_count; });
}
size_t CommBlockInfo::GetFmOffset() {
  return entry("CommBlockInfo::GetFmOffset", [&] { return activation_block(this).fm_offset; });
}
size_t CommBlockInfo::GetFmCount() {
  return entry("CommBlockInfo::GetFmCount", [&] { return activation_block(this).fm_count; });
}
size_t CommBlockInfo::GetFmSize() {
  return entry("CommBlockInfo::GetFmSize", [&] { return activation_block(this).fm_size; });
}
DataType CommBlockInfo::GetDataType() {
  return entry("CommBlockInfo::GetDataType", [&] { return activation_block(this).type; });
}
size_t CommBlockInfo::GetBufOffset() {
  return entry("CommBlockInfo::GetBufOffset", [&] { return activation_block(this).buf_offset; });
}

size_t Activation::GetGlobalFmCount() {
  return entry("Activation::GetGlobalFmCount", [&] { return activation_self(this).global_fm; });
}
size_t Activation::GetGlobalFmOffset() {
  return entry("Activation::GetGlobalFmOffset", [&] { return activation_self(this).fm_offset; });
}
size_t Activation::GetLocalFmCount() {
  return entry("Activation::GetLocalFmCount", [&] { return activation_self(this).local_fm; });
}
size_t Activation::GetPackBlockCount() {
  return entry("Activation::GetPackBlockCount", [&] { return activation_self(this).pack.size(); });
}
size_t Activation::GetUnpackBlockCount() {
  return entry("Activation::GetUnpackBlockCount",
               [&] { return activation_self(this).unpack.size(); });
}
CommBlockInfo* Activation::GetPackBlock(size_t idx) {
  return entry("Activation::GetPackBlock", [&]() -> CommBlockInfo* {
    auto& a = activation_self(this);
    if (idx >= a.pack.size()) {
      throw Misuse(a.describe() + ": pack block " + std::to_string(idx) + " of " +
                   std::to_string(a.pack.size()));
    }
    return a.pack[idx].get();
  });
}
CommBlockInfo* Activation::GetUnpackBlock(size_t idx) {
  return entry("Activation::GetUnpackBlock", [&]() -> CommBlockInfo* {
    auto& a = activation_self(this);
    if (idx >= a.unpack.size()) {
      throw Misuse(a.describe() + ": unpack block " + std::to_string(idx) + " of " +
                   std::to_string(a.unpack.size()));
    }
    return a.unpack[idx].get();
  });
}
DataType Activation::GetDataType() {
  return entry("Activation::GetDataType", [&] { return activation_self(this).type; });
}
size_t Activation::GetFmSize() {
  return entry("Activation::GetFmSize", [&] { return activation_self(this).fm_size; });
}
void* Activation::GetCommBuf() {
  return entry("Activation::GetCommBuf", [&] { return activation_self(this).comm_buf.data(); });
}
size_t Activation::GetCommBufSize() {
  return entry("Activation::GetCommBufSize", [&] {
    auto& a = activation_self(this);
    return a.comm_buf.data() == nullptr ? size_t{0} : a.plan.buffer_elems * size_of(a.type);
  });
}

void Activation::StartComm(void* buf) {
  entry("Activation::StartComm", [&] {
    auto& a = activation_self(this);
    auto& stats = *a.op->session->stats;
    stats.enter(a.op->index);
    a.start(buf);
    const bool sends = a.plan.kind != nodecomm::mlsl::SendPlan::Kind::none || a.plan.permute;
    const size_t bytes = sends ? a.plan.buffer_elems * size_of(a.type) : 0;
    stats.leave(a.op->index, bytes);
  });
}

void* Activation::WaitComm() {
  return entry("Activation::WaitComm", [&] {
    auto& a = activation_self(this);
    auto& stats = *a.op->session->stats;
    stats.enter(a.op->index);
    void* result = a.wait();
    stats.leave(a.op->index, 0);
    return result;
  });
}

}  // namespace MLSL
