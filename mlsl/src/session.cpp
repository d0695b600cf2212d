// Session, OperationRegInfo and Operation: the model's graph as MLSL registers it, and Commit,
// which turns each linked pair of activations into an exchange plan (activation.cpp).
#include <climits>

#include "impl.hpp"

namespace nodecomm::mlsl {

namespace {
int session_next_id = 1;

void session_check_shape(size_t count, size_t size, DataType type, const char* what) {
  require(count > 0 && size > 0 && count <= INT_MAX && size <= INT_MAX,
          std::string(what) + ": counts must be in 1.." + std::to_string(INT_MAX) + ", got " +
              std::to_string(count) + " x " + std::to_string(size));
  size_of(type);
}
}  // namespace

SessionImpl::SessionImpl(int id, PhaseType phase)
    : id(id), phase(phase), stats(std::make_unique<StatisticsImpl>(this)) {
  Runtime::get().add_live(HandleKind::session, this);
}

SessionImpl::~SessionImpl() {
  remove_operations();
  for (auto& info : infos) Runtime::get().remove_live(HandleKind::reg_info, info.get());
  Runtime::get().remove_live(HandleKind::session, this);
}

void SessionImpl::remove_operations() {
  for (auto& op : ops) op->settle();
  ops.clear();
  Runtime& rt = Runtime::get();
  for (nc_comm_t& c : extra_comms) {
    if (rt.initialized()) nc_comm_free(rt.ctx(), &c);
  }
  extra_comms.clear();
  committed = false;
}

OperationImpl::OperationImpl(SessionImpl* session, size_t index, const RegInfoImpl& info)
    : session(session),
      index(index),
      type(info.type),
      name(info.name.empty() ? "op" + std::to_string(index) : info.name) {
  for (size_t i = 0; i < info.inputs.size(); ++i) {
    inputs.push_back(std::make_unique<ActivationImpl>(this, true, i, info.inputs[i]));
  }
  for (size_t i = 0; i < info.outputs.size(); ++i) {
    outputs.push_back(std::make_unique<ActivationImpl>(this, false, i, info.outputs[i]));
  }
  for (size_t i = 0; i < info.params.size(); ++i) {
    params.push_back(std::make_unique<ParameterSetImpl>(this, i, info.params[i]));
  }
  Runtime::get().add_live(HandleKind::operation, this);
}

OperationImpl::~OperationImpl() {
  Runtime::get().remove_live(HandleKind::operation, this);
  inputs.clear();
  outputs.clear();
  params.clear();
  if (dist != nullptr) dist->release();
}

void OperationImpl::assign(DistributionImpl* d) {
  require(dist == nullptr, "operation " + name + " already has a distribution");
  const size_t data = static_cast<size_t>(d->data_size());
  require(session->global_mb % data == 0, "operation " + name + ": the global minibatch " +
                                              std::to_string(session->global_mb) +
                                              " is not a multiple of the " + std::to_string(data) +
                                              " data parts of " + d->describe());
  dist = d;
  d->acquire();
  minibatch = minibatch_slice(session->global_mb, d->data_size(), d->data_index());
  for (auto& a : inputs) a->assign_geometry();
  for (auto& a : outputs) a->assign_geometry();
  for (auto& p : params) p->assign_geometry();
}

void OperationImpl::require_distribution(const char* call) const {
  require(dist != nullptr, [&] {
    return std::string(call) + ": operation " + name +
           " has no distribution yet (AddOperation with one, or SetDistribution)";
  });
}

void OperationImpl::settle() {
  for (auto& a : inputs) a->request.settle();
  for (auto& a : outputs) a->request.settle();
  for (auto& p : params) {
    p->gradient.settle();
    p->increment.settle();
  }
}

}  // namespace nodecomm::mlsl

namespace MLSL {

using nodecomm::mlsl::ActivationImpl;
using nodecomm::mlsl::ActivationShape;
using nodecomm::mlsl::DistributionImpl;
using nodecomm::mlsl::entry;
using nodecomm::mlsl::HandleKind;
using nodecomm::mlsl::impl_of;
using nodecomm::mlsl::Misuse;
using nodecomm::mlsl::OperationImpl;
using nodecomm::mlsl::ParameterShape;
using nodecomm::mlsl::RegInfoImpl;
using nodecomm::mlsl::require;
using nodecomm::mlsl::Runtime;
using nodecomm::mlsl::session_check_shape;
using nodecomm::mlsl::session_next_id;
using nodecomm::mlsl::SessionImpl;

namespace {
SessionImpl& session_self(Session* s) {
  return impl_of<SessionImpl>(s, HandleKind::session, "Session");
}
RegInfoImpl& session_info(OperationRegInfo* i) {
  return impl_of<RegInfoImpl>(i, HandleKind::reg_info, "OperationRegInfo");
}
OperationImpl& session_op(Operation* o) {
  return impl_of<OperationImpl>(o, HandleKind::operation, "Operation");
}

// Links output `out_idx` of `producer` with input `in_idx` of `consumer` (SetNext and SetPrev
// both land here; setting the same link from both ends is allowed).
void session_link(OperationImpl& producer, size_t out_idx, OperationImpl& consumer, size_t in_idx) {
  require(
      producer.session == consumer.session,
      "operations " + producer.name + " and " + consumer.name + " belong to different sessions");
  require(!producer.session->committed, "the session is committed already");
  require(out_idx < producer.outputs.size(),
          "operation " + producer.name + " has no output " + std::to_string(out_idx));
  require(in_idx < consumer.inputs.size(),
          "operation " + consumer.name + " has no input " + std::to_string(in_idx));
  ActivationImpl& out = *producer.outputs[out_idx];
  ActivationImpl& in = *consumer.inputs[in_idx];
  require(out.global_fm * out.fm_size == in.global_fm * in.fm_size && out.type == in.type,
          out.describe() + " (" + std::to_string(out.global_fm) + " x " +
              std::to_string(out.fm_size) + ") does not match " + in.describe() + " (" +
              std::to_string(in.global_fm) + " x " + std::to_string(in.fm_size) + ")");
  require((out.peer == nullptr || out.peer == &in) && (in.peer == nullptr || in.peer == &out),
          out.describe() + " or " + in.describe() + " is linked to another activation");
  out.peer = &in;
  in.peer = &out;
}
}  // namespace

Session* Environment::CreateSession(PhaseType phaseType) {
  return entry("Environment::CreateSession", [&]() -> Session* {
    Runtime::get().require_init("Environment::CreateSession");
    require(phaseType == PT_TRAIN || phaseType == PT_TEST,
            "unknown PhaseType " + std::to_string(static_cast<int>(phaseType)));
    return new SessionImpl(session_next_id++, phaseType);
  });
}

void Environment::DeleteSession(Session* session) {
  entry("Environment::DeleteSession", [&] { delete &session_self(session); });
}

void Session::SetGlobalMinibatchSize(size_t globalMinibatchSize) {
  entry("Session::SetGlobalMinibatchSize", [&] {
    auto& s = session_self(this);
    require(globalMinibatchSize > 0, "the global minibatch size must be positive");
    require(s.ops.empty(), "the global minibatch size must be set before AddOperation");
    s.global_mb = globalMinibatchSize;
  });
}

size_t Session::GetGlobalMinibatchSize() {
  return entry("Session::GetGlobalMinibatchSize", [&] { return session_self(this).global_mb; });
}

PhaseType Session::GetPhaseType() {
  return entry("Session::GetPhaseType", [&] { return session_self(this).phase; });
}

OperationRegInfo* Session::CreateOperationRegInfo(OpType opType) {
  return entry("Session::CreateOperationRegInfo", [&]() -> OperationRegInfo* {
    auto& s = session_self(this);
    require(opType >= OT_CC && opType <= OT_EVAL,
            "unknown OpType " + std::to_string(static_cast<int>(opType)));
    s.infos.push_back(std::make_unique<RegInfoImpl>(&s, opType));
    Runtime::get().add_live(HandleKind::reg_info, s.infos.back().get());
    return s.infos.back().get();
  });
}

void Session::DeleteOperationRegInfo(OperationRegInfo* info) {
  entry("Session::DeleteOperationRegInfo", [&] {
    auto& s = session_self(this);
    auto& i = session_info(info);
    for (auto it = s.infos.begin(); it != s.infos.end(); ++it) {
      if (it->get() == &i) {
        Runtime::get().remove_live(HandleKind::reg_info, &i);
        s.infos.erase(it);
        return;
      }
    }
    throw Misuse("the OperationRegInfo belongs to another session");
  });
}

size_t Session::AddOperation(OperationRegInfo* info, Distribution* dist) {
  return entry("Session::AddOperation", [&] {
    auto& s = session_self(this);
    auto& i = session_info(info);
    require(s.global_mb > 0, "SetGlobalMinibatchSize must come before AddOperation");
    require(!s.committed, "the session is committed already");
    const size_t index = s.ops.size();
    s.ops.push_back(std::make_unique<OperationImpl>(&s, index, i));
    if (dist != nullptr) {
      s.ops.back()->assign(&impl_of<DistributionImpl>(dist, HandleKind::distribution,
                                                      "AddOperation: the distribution"));
    }
    return index;
  });
}

void Session::RemoveOperations() {
  entry("Session::RemoveOperations", [&] { session_self(this).remove_operations(); });
}

size_t Session::GetOperationCount() {
  return entry("Session::GetOperationCount", [&] { return session_self(this).ops.size(); });
}

Operation* Session::GetOperation(size_t idx) {
  return entry("Session::GetOperation", [&]() -> Operation* {
    auto& s = session_self(this);
    require(idx < s.ops.size(), [&] {
      return "operation " + std::to_string(idx) + " of " + std::to_string(s.ops.size());
    });
    return s.ops[idx].get();
  });
}

void Session::Commit() {
  entry("Session::Commit", [&] {
    auto& s = session_self(this);
    Runtime::get().require_init("Session::Commit");
    require(!s.committed, "the session is committed already");
    require(s.global_mb > 0, "SetGlobalMinibatchSize must come before Commit");
    for (auto& op : s.ops) op->require_distribution("Commit");
    // In operation order on every rank: plans may split communicators (collective).
    for (auto& op : s.ops) {
      for (auto& out : op->outputs) {
        if (out->peer != nullptr) nodecomm::mlsl::plan_exchange(*out, *out->peer);
      }
      for (auto& p : op->params) p->prepare();
    }
    s.committed = true;
    s.stats->resize_for(s.ops.size());
    if (s.stats->enabled) s.stats->measure_isolation();
  });
}

Statistics* Session::GetStats() {
  return entry("Session::GetStats", [&]() -> Statistics* {
    auto& s = session_self(this);
    require(s.global_mb > 0, "GetStats needs SetGlobalMinibatchSize first");
    return s.stats.get();
  });
}

void OperationRegInfo::SetName(const char* name) {
  entry("OperationRegInfo::SetName", [&] {
    require(name != nullptr, "name is NULL");
    session_info(this).name = name;
  });
}

size_t OperationRegInfo::AddInput(size_t featureMapCount, size_t featureMapSize,
                                  DataType dataType) {
  return entry("OperationRegInfo::AddInput", [&] {
    session_check_shape(featureMapCount, featureMapSize, dataType, "AddInput");
    auto& i = session_info(this);
    i.inputs.push_back(ActivationShape{featureMapCount, featureMapSize, dataType});
    return i.inputs.size() - 1;
  });
}

size_t OperationRegInfo::AddOutput(size_t featureMapCount, size_t featureMapSize,
                                   DataType dataType) {
  return entry("OperationRegInfo::AddOutput", [&] {
    session_check_shape(featureMapCount, featureMapSize, dataType, "AddOutput");
    auto& i = session_info(this);
    i.outputs.push_back(ActivationShape{featureMapCount, featureMapSize, dataType});
    return i.outputs.size() - 1;
  });
}

size_t OperationRegInfo::AddParameterSet(size_t kernelCount, size_t kernelSize, DataType dataType,
                                         bool distributedUpdate, CompressionType compressType) {
  return entry("OperationRegInfo::AddParameterSet", [&] {
    session_check_shape(kernelCount, kernelSize, dataType, "AddParameterSet");
    require(compressType == CT_NONE || compressType == CT_QUANTIZATION,
            "unknown CompressionType " + std::to_string(static_cast<int>(compressType)));
    require(compressType == CT_NONE || Runtime::get().quant() != nullptr,
            "CT_QUANTIZATION needs Environment::SetQuantizationParams first");
    auto& i = session_info(this);
    i.params.push_back(
        ParameterShape{kernelCount, kernelSize, dataType, distributedUpdate, compressType});
    return i.params.size() - 1;
  });
}

void OperationRegInfo::Validate(Distribution* /*dist: unused, as in MLSL*/) {
  entry("OperationRegInfo::Validate", [&] {
    auto& i = session_info(this);
    require(i.type != OT_SPLIT && i.type != OT_REDUCE,
            "operation type " + std::to_string(static_cast<int>(i.type)) +
                " (OT_SPLIT, OT_REDUCE) is not supported yet");
  });
}

void Operation::SetDistribution(Distribution* dist) {
  entry("Operation::SetDistribution", [&] {
    auto& op = session_op(this);
    op.assign(&impl_of<DistributionImpl>(dist, HandleKind::distribution,
                                         "SetDistribution: the distribution"));
  });
}

Distribution* Operation::GetDistribution() {
  return entry("Operation::GetDistribution",
               [&]() -> Distribution* { return session_op(this).dist; });
}

Session* Operation::GetSession() {
  return entry("Operation::GetSession", [&]() -> Session* { return session_op(this).session; });
}

OpType Operation::GetOpType() {
  return entry("Operation::GetOpType", [&] { return session_op(this).type; });
}

void Operation::SetPrev(Operation* prev, size_t actIdx, size_t prevOpActIdx) {
  entry("Operation::SetPrev", [&] {
    auto& op = session_op(this);
    require(actIdx < op.inputs.size(),
            "operation " + op.name + " has no input " + std::to_string(actIdx));
    if (prev == nullptr) return;  // the input has no producer: nothing to exchange
    session_link(session_op(prev), prevOpActIdx, op, actIdx);
  });
}

void Operation::SetNext(Operation* next, size_t actIdx, size_t nextOpActIdx) {
  entry("Operation::SetNext", [&] {
    auto& op = session_op(this);
    require(actIdx < op.outputs.size(),
            "operation " + op.name + " has no output " + std::to_string(actIdx));
    if (next == nullptr) return;
    session_link(op, actIdx, session_op(next), nextOpActIdx);
  });
}

const char* Operation::GetName() {
  return entry("Operation::GetName", [&] { return session_op(this).name.c_str(); });
}

size_t Operation::GetGlobalMinibatchSize() {
  return entry("Operation::GetGlobalMinibatchSize",
               [&] { return session_op(this).session->global_mb; });
}

size_t Operation::GetLocalMinibatchSize() {
  return entry("Operation::GetLocalMinibatchSize", [&] {
    auto& op = session_op(this);
    op.require_distribution("GetLocalMinibatchSize");
    return op.minibatch.local;
  });
}

size_t Operation::GetGlobalMinibatchOffset() {
  return entry("Operation::GetGlobalMinibatchOffset", [&] {
    auto& op = session_op(this);
    op.require_distribution("GetGlobalMinibatchOffset");
    return op.minibatch.offset;
  });
}

size_t Operation::GetInputCount() {
  return entry("Operation::GetInputCount", [&] { return session_op(this).inputs.size(); });
}

Activation* Operation::GetInput(size_t idx) {
  return entry("Operation::GetInput", [&]() -> Activation* {
    auto& op = session_op(this);
    op.require_distribution("GetInput");
    require(idx < op.inputs.size(),
            [&] { return "operation " + op.name + " has no input " + std::to_string(idx); });
    return op.inputs[idx].get();
  });
}

size_t Operation::GetOutputCount() {
  return entry("Operation::GetOutputCount", [&] { return session_op(this).outputs.size(); });
}

Activation* Operation::GetOutput(size_t idx) {
  return entry("Operation::GetOutput", [&]() -> Activation* {
    auto& op = session_op(this);
    op.require_distribution("GetOutput");
    require(idx < op.outputs.size(),
            [&] { return "operation " + op.name + " has no output " + std::to_string(idx); });
    return op.outputs[idx].get();
  });
}

bool Operation::HasParameterSets() {
  return entry("Operation::HasParameterSets", [&] { return !session_op(this).params.empty(); });
}

size_t Operation::GetParameterSetCount() {
  return entry("Operation::GetParameterSetCount", [&] { return session_op(this).params.size(); });
}

ParameterSet* Operation::GetParameterSet(size_t idx) {
  return entry("Operation::GetParameterSet", [&]() -> ParameterSet* {
    auto& op = session_op(this);
    op.require_distribution("GetParameterSet");
    require(idx < op.params.size(), [&] {
      return "operation " + op.name + " has no parameter set " + std::to_string(idx);
    });
    return op.params[idx].get();
  });
}

}  // namespace MLSL
