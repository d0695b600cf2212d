// ParameterSet: the gradient exchange over the data group, by allreduce, or with distributed
// update by reduce-scatter (each process updates its owned kernels) and an allgather of the
// updated parameters (docs/MLSL.md, "Parameter sets").
#include "impl.hpp"

namespace nodecomm::mlsl {

ParameterSetImpl::ParameterSetImpl(OperationImpl* op, size_t index, const ParameterShape& shape)
    : op(op),
      index(index),
      shape(shape),
      gradient("operation " + op->name + " parameter set " + std::to_string(index) +
               " gradient exchange"),
      increment("operation " + op->name + " parameter set " + std::to_string(index) +
                " increment exchange") {
  Runtime::get().add_live(HandleKind::parameter_set, this);
}

ParameterSetImpl::~ParameterSetImpl() {
  gradient.settle();
  increment.settle();
  Runtime::get().remove_live(HandleKind::parameter_set, this);
}

std::string ParameterSetImpl::describe() const {
  return "operation " + op->name + " parameter set " + std::to_string(index);
}

void ParameterSetImpl::assign_geometry() {
  const DistributionImpl& d = *op->dist;
  part = parameter_partition(shape.kernels, d.model_size(), d.model_index(), d.data_size(),
                             d.data_index(), shape.distributed_update);
}

void ParameterSetImpl::prepare() {
  Runtime& rt = Runtime::get();
  compress = NC_COMPRESS_NONE;
  if (shape.compress == CT_QUANTIZATION) {
    // nodecomm compresses f32 allreduce only; a compressed reduce-scatter would be refused.
    if (shape.type == DT_FLOAT && !shape.distributed_update) {
      compress = rt.settings().quant;
    } else if (rt.rank() == 0) {
      rt.log(0, describe() +
                    ": CT_QUANTIZATION applies to DT_FLOAT gradients without "
                    "distributed update only; this one goes uncompressed");
    }
  }
  gradient_buf = Scratch();
  if (shape.distributed_update && part.exchange) {
    gradient_buf = Scratch(part.owned * shape.kernel_size * size_of(shape.type));
  }
}

void ParameterSetImpl::start_gradient(void* buf) {
  if (!part.exchange) return;
  if (buf == nullptr) throw Misuse(describe() + ": StartGradientComm needs a buffer");
  Runtime& rt = Runtime::get();
  const DistributionImpl& d = *op->dist;
  const nc_dtype_t dt = to_nc(shape.type);
  const size_t elem = size_of(shape.type);
  const size_t local = part.local * shape.kernel_size;
  const size_t owned = part.owned * shape.kernel_size;
  auto x = std::make_unique<Exchange>(describe() + " gradient exchange");
  x->set_owner(op);
  const std::string name = "mlsl.s" + std::to_string(op->session->id) + ".op" +
                           std::to_string(op->index) + "." + op->name + ".p" +
                           std::to_string(index) + ".grad";
  x->set_attr(rt.priority_for(local * elem), name, compress);
  const nc_comm_t comm = d.data_comm();
  void* result = buf;
  if (shape.distributed_update) {
    void* out = gradient_buf.data();
    x->add_step([=](const nc_op_attr_t* a, nc_request_t* r) {
      return nc_reduce_scatter(Runtime::get().ctx(), buf, out, owned, dt, NC_SUM, comm, a, r);
    });
    result = out;
  } else {
    x->add_step([=](const nc_op_attr_t* a, nc_request_t* r) {
      return nc_allreduce(Runtime::get().ctx(), buf, buf, local, dt, NC_SUM, comm, a, r);
    });
  }
  gradient.start(std::move(x), result);
}

void ParameterSetImpl::start_increment(void* buf) {
  if (!shape.distributed_update || !part.exchange) return;
  if (buf == nullptr) throw Misuse(describe() + ": StartIncrementComm needs a buffer");
  Runtime& rt = Runtime::get();
  const nc_dtype_t dt = to_nc(shape.type);
  const size_t elem = size_of(shape.type);
  const size_t owned = part.owned * shape.kernel_size;
  auto x = std::make_unique<Exchange>(describe() + " increment exchange");
  x->set_owner(op);
  x->set_attr(rt.priority_for(part.local * shape.kernel_size * elem),
              "mlsl.s" + std::to_string(op->session->id) + ".op" + std::to_string(op->index) + "." +
                  op->name + ".p" + std::to_string(index) + ".inc");
  const nc_comm_t comm = op->dist->data_comm();
  // Each process's updated part is already at its place in the full buffer: nodecomm's
  // in-place allgather (send = recv + rank * count).
  char* own = static_cast<char*>(buf) + part.owned_offset * shape.kernel_size * elem;
  x->add_step([=](const nc_op_attr_t* a, nc_request_t* r) {
    return nc_allgather(Runtime::get().ctx(), own, buf, owned, dt, comm, a, r);
  });
  increment.start(std::move(x), buf);
}

}  // namespace nodecomm::mlsl

namespace MLSL {

using nodecomm::mlsl::entry;
using nodecomm::mlsl::HandleKind;
using nodecomm::mlsl::impl_of;
using nodecomm::mlsl::ParameterSetImpl;
using nodecomm::mlsl::size_of;

namespace {
ParameterSetImpl& parameter_self(ParameterSet* p) {
  return impl_of<ParameterSetImpl>(p, HandleKind::parameter_set, "ParameterSet");
}
}  // namespace

size_t ParameterSet::GetGlobalKernelCount() {
  return entry("ParameterSet::GetGlobalKernelCount",
               [&] { return parameter_self(this).shape.kernels; });
}
size_t ParameterSet::GetGlobalKernelOffset() {
  return entry("ParameterSet::GetGlobalKernelOffset",
               [&] { return parameter_self(this).part.global_offset; });
}
size_t ParameterSet::GetLocalKernelCount() {
  return entry("ParameterSet::GetLocalKernelCount",
               [&] { return parameter_self(this).part.local; });
}
size_t ParameterSet::GetOwnedKernelCount() {
  return entry("ParameterSet::GetOwnedKernelCount",
               [&] { return parameter_self(this).part.owned; });
}
size_t ParameterSet::GetOwnedKernelOffset() {
  return entry("ParameterSet::GetOwnedKernelOffset",
               [&] { return parameter_self(this).part.owned_offset; });
}
DataType ParameterSet::GetDataType() {
  return entry("ParameterSet::GetDataType", [&] { return parameter_self(this).shape.type; });
}
size_t ParameterSet::GetKernelSize() {
  return entry("ParameterSet::GetKernelSize",
               [&] { return parameter_self(this).shape.kernel_size; });
}
bool ParameterSet::IsDistributedUpdate() {
  return entry("ParameterSet::IsDistributedUpdate",
               [&] { return parameter_self(this).shape.distributed_update; });
}

void ParameterSet::StartGradientComm(void* buf) {
  entry("ParameterSet::StartGradientComm", [&] {
    auto& p = parameter_self(this);
    auto& stats = *p.op->session->stats;
    stats.enter(p.op->index);
    p.start_gradient(buf);
    stats.leave(p.op->index,
                p.part.exchange ? p.part.local * p.shape.kernel_size * size_of(p.shape.type) : 0);
  });
}

void ParameterSet::StartIncrementComm(void* buf) {
  entry("ParameterSet::StartIncrementComm", [&] {
    auto& p = parameter_self(this);
    auto& stats = *p.op->session->stats;
    stats.enter(p.op->index);
    p.start_increment(buf);
    const bool sends = p.shape.distributed_update && p.part.exchange;
    stats.leave(p.op->index,
                sends ? p.part.local * p.shape.kernel_size * size_of(p.shape.type) : 0);
  });
}

void* ParameterSet::WaitGradientComm() {
  return entry("ParameterSet::WaitGradientComm", [&] {
    auto& p = parameter_self(this);
    auto& stats = *p.op->session->stats;
    stats.enter(p.op->index);
    void* result = p.gradient.wait();
    stats.leave(p.op->index, 0);
    return result;
  });
}

void* ParameterSet::TestGradientComm(bool* isCompleted) {
  return entry("ParameterSet::TestGradientComm", [&]() -> void* {
    auto& p = parameter_self(this);
    if (isCompleted == nullptr) throw nodecomm::mlsl::Misuse("isCompleted is NULL");
    if (!p.part.exchange) {
      *isCompleted = true;  // nothing to exchange: complete at once, as MLSL reports it
      return nullptr;
    }
    auto& stats = *p.op->session->stats;
    stats.enter(p.op->index);
    void* result = p.gradient.test(isCompleted);
    stats.leave(p.op->index, 0);
    return result;
  });
}

void* ParameterSet::WaitIncrementComm() {
  return entry("ParameterSet::WaitIncrementComm", [&] {
    auto& p = parameter_self(this);
    auto& stats = *p.op->session->stats;
    stats.enter(p.op->index);
    void* result = p.increment.wait();
    stats.leave(p.op->index, 0);
    return result;
  });
}

}  // namespace MLSL
