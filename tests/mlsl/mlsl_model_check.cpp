// The MLSL layer's Session, OperationRegInfo, Operation, Activation, ParameterSet and
// Statistics through the C++ API (issue 22, plan §7.3), written against mlsl.hpp only and
// checked against tests/mlsl/reference.hpp.
//
//   mlsl_model_check              the chain and the exchanges below; exit 1 on any mismatch
//   mlsl_model_check --mode quant CT_QUANTIZATION gradients (NODECOMM_MLSL_QUANT picks bf16 or
//                                 int8) within the documented bounds, exact on one node
//
// 1. A chain CC -> ACT -> CC for each distribution with model parts 1, 2, 4 (as the world
//    allows) x distributed update off/on x library/user buffers x WaitGradientComm or
//    TestGradientComm loops, 2 epochs x 3 minibatches in MLSL's usual order. Every output element
//    is a function of (global minibatch row, global feature-map position, model index), so the
//    consumer checks every unpacked element: a CC output split by model arrives summed over the
//    model group, anything else unchanged. Every gradient of an activation, every reduced
//    parameter gradient (the owned part) and every parameter after the increment is checked, and
//    the persistent-request rules of plan §4.3 on each call. With MLSL_STATS=1 the statistics
//    must account for the exchanges.
// 2. Exchanges between different distributions (plan §4.6 cases 2 to 5, and none), element by
//    element in both directions, reading the geometry only through the getters.
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mlsl.hpp>
#include <string>
#include <vector>

#include "reference.hpp"

namespace model_check {

using MLSL::Activation;
using MLSL::CommBlockInfo;
using MLSL::DataType;
using MLSL::Distribution;
using MLSL::Environment;
using MLSL::Operation;
using MLSL::OpType;
using MLSL::ParameterSet;
using MLSL::Session;

Environment& env() {
  return Environment::GetEnv();
}

size_t g_rank = 0;
size_t g_world = 1;
size_t g_failures = 0;
std::string g_where;  // the session being checked, for messages

void fail(const char* fmt, ...) {
  char text[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(text, sizeof text, fmt, ap);  // NOLINT(clang-analyzer-valist.Uninitialized)
  va_end(ap);
  if (g_failures < 60) std::fprintf(stderr, "[%zu] FAIL %s: %s\n", g_rank, g_where.c_str(), text);
  ++g_failures;
}

void expect_eq(const char* what, size_t expected, size_t got) {
  if (expected != got) fail("%s: expected %zu got %zu", what, expected, got);
}

void expect_ptr(const char* what, const void* expected, const void* got) {
  if (expected != got) fail("%s: expected %p got %p", what, expected, got);
}

struct DistInfo {
  std::string name;
  Distribution* dist = nullptr;
  mlsl_ref::Layout lay;
  size_t D() const { return lay.data.size(); }
  size_t M() const { return lay.model.size(); }
  size_t d() const { return lay.data.idx; }
  size_t m() const { return lay.model.idx; }
};

DistInfo make_dist(size_t D, size_t M) {
  DistInfo di;
  di.name = std::to_string(D) + "x" + std::to_string(M);
  di.dist = env().CreateDistribution(D, M);
  di.lay = mlsl_ref::grid_layout(g_world, g_rank, D, M);
  return di;
}

// One operation of a chain: what it registers and on which distribution.
struct OpSpec {
  OpType type;
  DistInfo* dist;
  size_t fin, sin, fout, sout;
  DataType act_dt;
  size_t kernels, kernel_size;  // kernels == 0: no parameter set
  DataType param_dt;
};

struct NetOptions {
  size_t G = 8;
  bool du = false;        // distributed update
  bool user_buf = false;  // malloc'd parameter and comm buffers instead of Alloc/GetCommBuf
  bool use_test = false;  // TestGradientComm loops instead of WaitGradientComm
  size_t epochs = 2, iters = 3;
  bool check_stats = false;
  bool print_stats = false;
};

// A local activation tile: [minibatch row][local feature map][space], row-major.
struct Tile {
  DataType dt;
  size_t mb, mb_off, fm, fm_off, fs;  // rows and their global offset, maps and theirs, fm size
  void* p;
  size_t elems() const { return mb * fm * fs; }
  size_t index(size_t i, size_t j, size_t s) const { return (i * fm + j) * fs + s; }
  // Global row and flat position inside the sample of local element (i, j, s).
  size_t row(size_t i) const { return mb_off + i; }
  size_t flat(size_t j, size_t s) const { return (fm_off + j) * fs + s; }
};

// Copies between a tile and a comm buffer by the blocks the library gave, after checking that
// each block lies inside both (a bad block is reported, not followed into foreign memory).
bool block_ok(const char* what, CommBlockInfo* b, const Tile& t, size_t comm_elems,
              bool check_comm) {
  const size_t mbo = b->GetMbOffset(), mbc = b->GetMbCount(), fmo = b->GetFmOffset(),
               fmc = b->GetFmCount(), fs = b->GetFmSize(), off = b->GetBufOffset();
  bool ok = mbo + mbc <= t.mb && fmo + fmc <= t.fm && fs == t.fs && b->GetDataType() == t.dt;
  if (check_comm) ok = ok && off + mbc * fmc * fs <= comm_elems;
  if (!ok)
    fail(
        "%s block (mb %zu+%zu, fm %zu+%zu, fm size %zu, dtype %d, buf offset %zu) does not fit "
        "the tile (mb %zu, fm %zu, fm size %zu, dtype %d) or comm buffer (%zu elements)",
        what, mbo, mbc, fmo, fmc, fs, static_cast<int>(b->GetDataType()), off, t.mb, t.fm, t.fs,
        static_cast<int>(t.dt), comm_elems);
  return ok;
}

void pack(Activation* act, const Tile& t, void* comm, size_t comm_elems) {
  const size_t es = mlsl_ref::dtype_size(t.dt);
  for (size_t k = 0; k < act->GetPackBlockCount(); ++k) {
    CommBlockInfo* b = act->GetPackBlock(k);
    if (!block_ok("pack", b, t, comm_elems, true)) continue;
    const size_t fmc = b->GetFmCount(), fmo = b->GetFmOffset(), mbo = b->GetMbOffset();
    for (size_t i = 0; i < b->GetMbCount(); ++i)
      std::memcpy(static_cast<char*>(comm) + (b->GetBufOffset() + i * fmc * t.fs) * es,
                  static_cast<char*>(t.p) + t.index(mbo + i, fmo, 0) * es, fmc * t.fs * es);
  }
}

void unpack(Activation* act, const Tile& t, const void* comm) {
  const size_t es = mlsl_ref::dtype_size(t.dt);
  for (size_t k = 0; k < act->GetUnpackBlockCount(); ++k) {
    CommBlockInfo* b = act->GetUnpackBlock(k);
    if (!block_ok("unpack", b, t, 0, false)) continue;
    const size_t fmc = b->GetFmCount(), fmo = b->GetFmOffset(), mbo = b->GetMbOffset();
    for (size_t i = 0; i < b->GetMbCount(); ++i)
      std::memcpy(static_cast<char*>(t.p) + t.index(mbo + i, fmo, 0) * es,
                  static_cast<const char*>(comm) + (b->GetBufOffset() + i * fmc * t.fs) * es,
                  fmc * t.fs * es);
  }
}

// ---------------------------------------------------------------------------------------------
// A chain of operations in one session, run through MLSL's training loop.

class Net {
 public:
  Net(const std::vector<OpSpec>& specs, const NetOptions& opt, const std::string& name)
      : opt_(opt), name_(name) {
    g_where = name_;
    build(specs);
  }
  ~Net() { teardown(); }
  Net(const Net&) = delete;
  Net& operator=(const Net&) = delete;

  void train() {
    size_t it = 0;
    check_never_started();
    if (opt_.check_stats) stats_begin();
    for (size_t e = 0; e < opt_.epochs; ++e) {
      for (size_t k = 0; k < opt_.iters; ++k) {
        ++it;
        for (size_t l = 0; l < layers_.size(); ++l) forward(l, it);
        for (size_t l = layers_.size(); l-- > 0;) {
          backward1(l, it);
          backward2(l, it);
        }
        for (size_t l = 0; l < layers_.size(); ++l) update(l, it);
      }
      end_of_epoch();
    }
    if (opt_.check_stats) stats_end();
  }

 private:
  struct Layer {
    OpSpec spec;
    Operation* op = nullptr;
    Activation* in = nullptr;
    Activation* out = nullptr;
    ParameterSet* ps = nullptr;
    Tile in_act{}, in_grad{}, out_act{}, out_grad{};
    void* user_comm_in = nullptr;
    void* user_comm_out = nullptr;
    void* param = nullptr;
    void* grad = nullptr;
    mlsl_ref::KernelSlice ks{};
    size_t param_version = 0;
    bool inc_pending = false;
  };

  void* alloc_param(size_t bytes) {
    bytes = std::max<size_t>(bytes, 1);
    return opt_.user_buf ? std::malloc(bytes) : env().Alloc(bytes, 64);
  }
  void free_param(void* p) {
    if (opt_.user_buf)
      std::free(p);
    else
      env().Free(p);
  }
  void* tile_storage(size_t bytes) {
    storage_.emplace_back(std::max<size_t>(bytes, 1));
    return storage_.back().data();
  }

  void build(const std::vector<OpSpec>& specs) {
    session_ = env().CreateSession(MLSL::PT_TRAIN);
    if (session_->GetPhaseType() != MLSL::PT_TRAIN) fail("Session::GetPhaseType is not PT_TRAIN");
    session_->SetGlobalMinibatchSize(opt_.G);
    expect_eq("Session::GetGlobalMinibatchSize", opt_.G, session_->GetGlobalMinibatchSize());
    layers_.resize(specs.size());
    for (size_t k = 0; k < specs.size(); ++k) {
      Layer& L = layers_[k];
      L.spec = specs[k];
      MLSL::OperationRegInfo* info = session_->CreateOperationRegInfo(L.spec.type);
      const std::string opname = "op" + std::to_string(k);
      info->SetName(opname.c_str());
      expect_eq("AddInput index", 0, info->AddInput(L.spec.fin, L.spec.sin, L.spec.act_dt));
      expect_eq("AddOutput index", 0, info->AddOutput(L.spec.fout, L.spec.sout, L.spec.act_dt));
      if (L.spec.kernels)
        expect_eq(
            "AddParameterSet index", 0,
            info->AddParameterSet(L.spec.kernels, L.spec.kernel_size, L.spec.param_dt, opt_.du));
      info->Validate(L.spec.dist->dist);
      // Both ways of giving an operation its distribution: at AddOperation, or later.
      size_t idx;
      if (k % 2 == 1) {
        idx = session_->AddOperation(info);
        session_->GetOperation(idx)->SetDistribution(L.spec.dist->dist);
      } else {
        idx = session_->AddOperation(info, L.spec.dist->dist);
      }
      session_->DeleteOperationRegInfo(info);
      expect_eq("AddOperation index", k, idx);
      L.op = session_->GetOperation(idx);
    }
    // Link output k to input k + 1, alternating SetPrev and SetNext (each link once).
    for (size_t k = 0; k + 1 < layers_.size(); ++k) {
      if (k % 2 == 0)
        layers_[k + 1].op->SetPrev(layers_[k].op, 0, 0);
      else
        layers_[k].op->SetNext(layers_[k + 1].op, 0, 0);
    }
    expect_eq("Session::GetOperationCount", layers_.size(), session_->GetOperationCount());
    session_->Commit();
    for (size_t k = 0; k < layers_.size(); ++k) check_getters(k);
    allocate();
  }

  void check_getters(size_t k) {
    Layer& L = layers_[k];
    const DistInfo& di = *L.spec.dist;
    Operation* op = L.op;
    char what[160];
    auto eq = [&](const char* getter, size_t expected, size_t got) {
      std::snprintf(what, sizeof what, "op%zu (%s, dist %s) %s", k,
                    L.spec.type == MLSL::OT_CC ? "CC" : "ACT", di.name.c_str(), getter);
      expect_eq(what, expected, got);
    };
    const std::string opname = "op" + std::to_string(k);
    if (op->GetName() == nullptr || opname != op->GetName()) fail("op%zu GetName", k);
    eq("GetOpType", L.spec.type, op->GetOpType());
    if (op->GetDistribution() != di.dist) fail("op%zu GetDistribution is not its distribution", k);
    if (op->GetSession() != session_) fail("op%zu GetSession is not its session", k);
    const mlsl_ref::MbSlice mb = mlsl_ref::mb_slice(opt_.G, di.D(), di.d());
    eq("GetGlobalMinibatchSize", opt_.G, op->GetGlobalMinibatchSize());
    eq("GetLocalMinibatchSize", mb.count, op->GetLocalMinibatchSize());
    eq("GetGlobalMinibatchOffset", mb.offset, op->GetGlobalMinibatchOffset());
    eq("GetInputCount", 1, op->GetInputCount());
    eq("GetOutputCount", 1, op->GetOutputCount());
    eq("HasParameterSets", L.spec.kernels > 0, op->HasParameterSets());
    eq("GetParameterSetCount", L.spec.kernels > 0 ? 1 : 0, op->GetParameterSetCount());
    L.in = op->GetInput(0);
    L.out = op->GetOutput(0);
    const mlsl_ref::FmSlice fi = mlsl_ref::fm_slice(L.spec.fin, di.M(), di.m(), false);
    const mlsl_ref::FmSlice fo =
        mlsl_ref::fm_slice(L.spec.fout, di.M(), di.m(), L.spec.type == MLSL::OT_CC);
    eq("input GetGlobalFmCount", L.spec.fin, L.in->GetGlobalFmCount());
    eq("input GetLocalFmCount", fi.count, L.in->GetLocalFmCount());
    eq("input GetGlobalFmOffset", fi.offset, L.in->GetGlobalFmOffset());
    eq("input GetFmSize", L.spec.sin, L.in->GetFmSize());
    eq("input GetDataType", L.spec.act_dt, L.in->GetDataType());
    eq("output GetGlobalFmCount", L.spec.fout, L.out->GetGlobalFmCount());
    eq("output GetLocalFmCount", fo.count, L.out->GetLocalFmCount());
    eq("output GetGlobalFmOffset", fo.offset, L.out->GetGlobalFmOffset());
    eq("output GetFmSize", L.spec.sout, L.out->GetFmSize());
    eq("output GetDataType", L.spec.act_dt, L.out->GetDataType());
    // A side that sends has a library buffer; one that never sends has none.
    Activation* acts[2] = {L.in, L.out};
    for (Activation* a : acts) {
      const bool sends = a->GetPackBlockCount() > 0;
      if (sends != (a->GetCommBuf() != nullptr) || sends != (a->GetCommBufSize() > 0))
        fail("op%zu %s: %zu pack blocks but GetCommBuf %p, GetCommBufSize %zu", k,
             a == L.in ? "input" : "output", a->GetPackBlockCount(), a->GetCommBuf(),
             a->GetCommBufSize());
    }
    if (k == 0 && (L.in->GetPackBlockCount() || L.in->GetUnpackBlockCount()))
      fail("op0's input has no peer but %zu pack / %zu unpack blocks", L.in->GetPackBlockCount(),
           L.in->GetUnpackBlockCount());
    if (k + 1 == layers_.size() && (L.out->GetPackBlockCount() || L.out->GetUnpackBlockCount()))
      fail("the last op's output has no peer but %zu pack / %zu unpack blocks",
           L.out->GetPackBlockCount(), L.out->GetUnpackBlockCount());
    if (!L.spec.kernels) return;
    L.ps = op->GetParameterSet(0);
    L.ks = mlsl_ref::kernel_slice(L.spec.kernels, di.D(), di.M(), di.d(), di.m(), opt_.du);
    eq("GetGlobalKernelCount", L.spec.kernels, L.ps->GetGlobalKernelCount());
    eq("GetLocalKernelCount", L.ks.local, L.ps->GetLocalKernelCount());
    eq("GetGlobalKernelOffset", L.ks.global_offset, L.ps->GetGlobalKernelOffset());
    eq("GetOwnedKernelCount", L.ks.owned, L.ps->GetOwnedKernelCount());
    eq("GetOwnedKernelOffset", L.ks.owned_offset, L.ps->GetOwnedKernelOffset());
    eq("GetKernelSize", L.spec.kernel_size, L.ps->GetKernelSize());
    eq("ParameterSet GetDataType", L.spec.param_dt, L.ps->GetDataType());
    eq("IsDistributedUpdate", opt_.du, L.ps->IsDistributedUpdate());
  }

  // Tiles: a producer's output and its consumer's input share one buffer (and so do their
  // gradients), as MLSL's programs do, so that where the library exchanges nothing the data is
  // already in place. The buffer holds the larger of the two tiles.
  void allocate() {
    for (size_t k = 0; k < layers_.size(); ++k) {
      Layer& L = layers_[k];
      const DistInfo& di = *L.spec.dist;
      const size_t mb = L.op->GetLocalMinibatchSize(), mbo = L.op->GetGlobalMinibatchOffset();
      L.in_act =
          Tile{L.spec.act_dt, mb,     mbo, L.in->GetLocalFmCount(), L.in->GetGlobalFmOffset(),
               L.spec.sin,    nullptr};
      L.out_act =
          Tile{L.spec.act_dt, mb,     mbo, L.out->GetLocalFmCount(), L.out->GetGlobalFmOffset(),
               L.spec.sout,   nullptr};
      L.in_grad = L.in_act;
      L.out_grad = L.out_act;
      (void)di;
    }
    const size_t es = 8;  // bytes per element, generous for every dtype
    for (size_t k = 0; k < layers_.size(); ++k) {
      Layer& L = layers_[k];
      if (k == 0) {
        L.in_act.p = tile_storage(L.in_act.elems() * es);
        L.in_grad.p = tile_storage(L.in_grad.elems() * es);
      }
      if (k + 1 < layers_.size()) {
        Layer& N = layers_[k + 1];
        const size_t bytes = std::max(L.out_act.elems(), N.in_act.elems()) * es;
        L.out_act.p = N.in_act.p = tile_storage(bytes);
        L.out_grad.p = N.in_grad.p = tile_storage(bytes);
      } else {
        L.out_act.p = tile_storage(L.out_act.elems() * es);
        L.out_grad.p = tile_storage(L.out_grad.elems() * es);
      }
      if (opt_.user_buf) {
        if (L.in->GetCommBufSize()) L.user_comm_in = std::malloc(L.in->GetCommBufSize());
        if (L.out->GetCommBufSize()) L.user_comm_out = std::malloc(L.out->GetCommBufSize());
      }
      if (L.ps) {
        const size_t elems = L.ks.local * L.spec.kernel_size;
        const size_t bytes = elems * mlsl_ref::dtype_size(L.spec.param_dt);
        L.param = alloc_param(bytes);
        L.grad = alloc_param(bytes);
        for (size_t e = 0; e < elems; ++e)
          mlsl_ref::store(L.spec.param_dt, L.param, e,
                          mlsl_ref::param_value(k, 0, L.ks.global_offset * L.spec.kernel_size + e));
      }
    }
  }

  void teardown() {
    g_where = name_;
    // DeleteSession waits what is still in flight; the buffers go after it.
    env().DeleteSession(session_);
    for (Layer& L : layers_) {
      std::free(L.user_comm_in);
      std::free(L.user_comm_out);
      if (L.param) free_param(L.param);
      if (L.grad) free_param(L.grad);
    }
  }

  size_t comm_elems(Activation* a) const {
    return a->GetCommBufSize() / mlsl_ref::dtype_size(a->GetDataType());
  }

  // The forward value a producer writes, and what its consumer must see.
  static bool summed(const Layer& P) { return P.spec.type == MLSL::OT_CC && P.spec.dist->M() > 1; }

  void check_tile(const char* what, size_t k, size_t it, const Tile& t, bool grad,
                  const Layer& other, size_t other_idx) {
    size_t bad = 0;
    for (size_t i = 0; i < t.mb; ++i)
      for (size_t j = 0; j < t.fm; ++j)
        for (size_t s = 0; s < t.fs; ++s) {
          const size_t b = t.row(i), q = t.flat(j, s);
          const double expected = mlsl_ref::as_stored(
              t.dt, grad ? mlsl_ref::act_grad_value(other_idx, it, b, q)
                         : mlsl_ref::act_expected(other_idx, it, b, q, summed(other),
                                                  other.spec.dist->M()));
          const double got = mlsl_ref::load(t.dt, t.p, t.index(i, j, s));
          if (got != expected) {
            if (bad < 3)
              fail(
                  "op%zu %s, iteration %zu: local element (mb %zu, fm %zu, space %zu) = global "
                  "row %zu, flat position %zu: expected %.17g got %.17g (peer op%zu on dist %s)",
                  k, what, it, i, j, s, b, q, expected, got, other_idx,
                  other.spec.dist->name.c_str());
            ++bad;
          }
        }
    if (bad > 3) fail("op%zu %s, iteration %zu: %zu mismatches in all", k, what, it, bad);
  }

  void fill(const Tile& t, double v) {
    for (size_t i = 0; i < t.elems(); ++i) mlsl_ref::store(t.dt, t.p, i, v);
  }

  // WaitComm returns the peer's buffer when there is something to unpack, NULL otherwise; the
  // tile is poisoned first so that an element no block covers shows up.
  void receive(size_t k, const char* what, Activation* act, const Tile& t, bool peered) {
    void* p = act->WaitComm();
    const size_t nb = act->GetUnpackBlockCount();
    if (!peered) {
      if (p != nullptr)
        fail("op%zu %s: WaitComm on an activation without peer returned %p", k, what, p);
      return;
    }
    if ((p != nullptr) != (nb > 0))
      fail("op%zu %s: WaitComm returned %p with %zu unpack blocks", k, what, p, nb);
    if (p == nullptr || nb == 0) return;
    fill(t, mlsl_ref::sentinel(t.dt));
    unpack(act, t, p);
  }

  void send(Activation* act, const Tile& t, void* user_comm) {
    void* comm = opt_.user_buf ? user_comm : act->GetCommBuf();
    pack(act, t, comm, comm_elems(act));
    act->StartComm(comm);
  }

  void forward(size_t k, size_t it) {
    Layer& L = layers_[k];
    receive(k, "input (forward)", L.in, L.in_act, k > 0);
    if (k > 0) check_tile("input activation", k, it, L.in_act, false, layers_[k - 1], k - 1);
    if (L.ps) {
      wait_increment(k, "WaitIncrementComm in forward");
      check_params(k, "forward");
    }
    const size_t m = L.spec.type == MLSL::OT_CC ? L.spec.dist->m() : 0;
    const Tile& t = L.out_act;
    for (size_t i = 0; i < t.mb; ++i)
      for (size_t j = 0; j < t.fm; ++j)
        for (size_t s = 0; s < t.fs; ++s)
          mlsl_ref::store(t.dt, t.p, t.index(i, j, s),
                          mlsl_ref::act_value(k, it, t.row(i), t.flat(j, s), m));
    send(L.out, L.out_act, L.user_comm_out);
  }

  void backward1(size_t k, size_t it) {
    Layer& L = layers_[k];
    const bool peered = k + 1 < layers_.size();
    receive(k, "output (backward)", L.out, L.out_grad, peered);
    if (peered)
      check_tile("gradient of the output", k, it, L.out_grad, true, layers_[k + 1], k + 1);
    const Tile& t = L.in_grad;
    for (size_t i = 0; i < t.mb; ++i)
      for (size_t j = 0; j < t.fm; ++j)
        for (size_t s = 0; s < t.fs; ++s)
          mlsl_ref::store(t.dt, t.p, t.index(i, j, s),
                          mlsl_ref::act_grad_value(k, it, t.row(i), t.flat(j, s)));
    send(L.in, L.in_grad, L.user_comm_in);
  }

  void backward2(size_t k, size_t it) {
    Layer& L = layers_[k];
    if (!L.ps) return;
    const size_t ks = L.spec.kernel_size, elems = L.ks.local * ks;
    for (size_t e = 0; e < elems; ++e)
      mlsl_ref::store(
          L.spec.param_dt, L.grad, e,
          mlsl_ref::param_grad_value(k, it, L.ks.global_offset * ks + e, L.spec.dist->d()));
    L.ps->StartGradientComm(L.grad);
  }

  bool grad_exchange(const Layer& L) const { return L.spec.dist->D() > 1; }
  bool inc_exchange(const Layer& L) const { return opt_.du && L.spec.dist->D() > 1; }

  // The pointer WaitGradientComm must return the first time after a start.
  void check_grad_ptr(size_t k, const char* call, void* p) {
    Layer& L = layers_[k];
    char what[128];
    std::snprintf(what, sizeof what, "op%zu %s", k, call);
    if (!grad_exchange(L))
      expect_ptr(what, nullptr, p);
    else if (!opt_.du)
      expect_ptr(what, L.grad, p);  // the allreduce is in place
    else if (p == nullptr || p == L.grad)
      fail("%s: expected the library's owned-part buffer, got %p (gradient buffer %p)", what, p,
           L.grad);
  }

  void* wait_gradient_test_loop(size_t k) {
    Layer& L = layers_[k];
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    bool done = false;
    void* p = nullptr;
    size_t polls = 0;
    while (!done) {
      p = L.ps->TestGradientComm(&done);
      ++polls;
      if (!done && p != nullptr) fail("op%zu TestGradientComm: not complete but returned %p", k, p);
      if (!done && std::chrono::steady_clock::now() > deadline) {
        fail("op%zu TestGradientComm: not complete after 120 s (%zu polls)", k, polls);
        std::exit(1);
      }
      if (!done) sched_yield();
    }
    check_grad_ptr(k, "TestGradientComm (first completion)", p);
    // Completed by Test, not yet waited: Test again gives the same, Wait gives it and clears it.
    bool again = false;
    void* p2 = L.ps->TestGradientComm(&again);
    if (!again) fail("op%zu TestGradientComm after completion: not complete", k);
    expect_ptr("TestGradientComm after completion", p, p2);
    expect_ptr("WaitGradientComm after Test completed", p, L.ps->WaitGradientComm());
    return p;
  }

  void update(size_t k, size_t it) {
    Layer& L = layers_[k];
    if (!L.ps) return;
    void* p;
    if (opt_.use_test) {
      p = wait_gradient_test_loop(k);
    } else {
      p = L.ps->WaitGradientComm();
      check_grad_ptr(k, "WaitGradientComm", p);
    }
    expect_ptr("WaitGradientComm a second time", nullptr, L.ps->WaitGradientComm());
    bool done = false;
    expect_ptr("TestGradientComm after Wait", nullptr, L.ps->TestGradientComm(&done));
    if (!done) fail("op%zu TestGradientComm after Wait: not complete", k);

    const size_t ks = L.spec.kernel_size, goff = L.ks.global_offset * ks;
    const size_t D = L.spec.dist->D();
    const DataType dt = L.spec.param_dt;
    const bool owned_buf = opt_.du && D > 1 && p != nullptr && p != L.grad;
    const void* reduced = p ? p : L.grad;
    const size_t first = opt_.du ? L.ks.owned_offset * ks : 0;  // in the local numbering
    const size_t count = L.ks.owned * ks;
    size_t bad = 0;
    for (size_t e = 0; e < count; ++e) {
      const double expected =
          mlsl_ref::as_stored(dt, mlsl_ref::param_grad_expected(k, it, goff + first + e, D));
      const double got = mlsl_ref::load(dt, reduced, owned_buf ? e : first + e);
      if (got != expected && bad++ < 3)
        fail(
            "op%zu reduced gradient, iteration %zu: owned element %zu (global %zu): expected "
            "%.17g got %.17g",
            k, it, e, goff + first + e, expected, got);
    }
    // The update of the owned part, then its increment to the rest of the data group.
    for (size_t e = 0; e < count; ++e)
      mlsl_ref::store(dt, L.param, first + e, mlsl_ref::param_value(k, it, goff + first + e));
    L.ps->StartIncrementComm(L.param);
    L.inc_pending = true;
    L.param_version = it;
  }

  void wait_increment(size_t k, const char* call) {
    Layer& L = layers_[k];
    void* p = L.ps->WaitIncrementComm();
    char what[160];
    std::snprintf(what, sizeof what, "op%zu %s (%s)", k, call,
                  L.inc_pending ? "after a start" : "nothing started since the last wait");
    expect_ptr(what, L.inc_pending && inc_exchange(L) ? L.param : nullptr, p);
    L.inc_pending = false;
  }

  void check_params(size_t k, const char* when) {
    Layer& L = layers_[k];
    const size_t ks = L.spec.kernel_size, elems = L.ks.local * ks;
    size_t bad = 0;
    for (size_t e = 0; e < elems; ++e) {
      const double expected = mlsl_ref::as_stored(
          L.spec.param_dt, mlsl_ref::param_value(k, L.param_version, L.ks.global_offset * ks + e));
      const double got = mlsl_ref::load(L.spec.param_dt, L.param, e);
      if (got != expected && bad++ < 3)
        fail(
            "op%zu parameters in %s (after the update of iteration %zu): local element %zu: "
            "expected %.17g got %.17g",
            k, when, L.param_version, e, expected, got);
    }
  }

  void end_of_epoch() {
    for (size_t k = 0; k < layers_.size(); ++k) {
      if (!layers_[k].ps) continue;
      wait_increment(k, "WaitIncrementComm at the end of the epoch");
      wait_increment(k, "WaitIncrementComm again");
      check_params(k, "end of epoch");
    }
  }

  // Before any start: Wait returns NULL at once; Test reports "not complete" where there is an
  // exchange (a loop on it would spin, as in MLSL) and "complete" where there is none.
  void check_never_started() {
    for (size_t k = 0; k < layers_.size(); ++k) {
      Layer& L = layers_[k];
      if (!L.ps) continue;
      bool done = true;
      void* p = L.ps->TestGradientComm(&done);
      expect_ptr("TestGradientComm before any start", nullptr, p);
      if (done != !grad_exchange(L))
        fail("op%zu TestGradientComm before any start: isCompleted %d, expected %d", k, done,
             !grad_exchange(L));
      expect_ptr("WaitGradientComm before any start", nullptr, L.ps->WaitGradientComm());
      expect_ptr("WaitIncrementComm before any start", nullptr, L.ps->WaitIncrementComm());
    }
  }

  bool has_exchange(const Layer& L) const {
    return L.in->GetPackBlockCount() > 0 || L.out->GetPackBlockCount() > 0 ||
           (L.ps && grad_exchange(L));
  }
  bool has_no_comm(const Layer& L) const {
    return !has_exchange(L) && L.in->GetUnpackBlockCount() == 0 &&
           L.out->GetUnpackBlockCount() == 0;
  }

  void stats_begin() {
    MLSL::Statistics* st = session_->GetStats();
    const char* env_stats = std::getenv("MLSL_STATS");
    const bool enabled = env_stats && std::strcmp(env_stats, "1") == 0;
    if (st->IsEnabled() != enabled)
      fail("Statistics::IsEnabled is %d with MLSL_STATS=%s", st->IsEnabled(),
           env_stats ? env_stats : "(unset)");
    if (st->IsStarted()) fail("Statistics::IsStarted before Start");
    st->Start();
    if (st->IsStarted() != enabled) fail("Statistics::IsStarted after Start: %d", st->IsStarted());
  }

  void stats_end() {
    MLSL::Statistics* st = session_->GetStats();
    const bool enabled = st->IsEnabled();
    st->Stop();
    if (st->IsStarted()) fail("Statistics::IsStarted after Stop");
    size_t total = 0;
    for (size_t k = 0; k < layers_.size(); ++k) {
      const Layer& L = layers_[k];
      const size_t size = st->GetCommSize(k);
      total += size;
      const unsigned long long cycles = st->GetCommCycles(k), iso = st->GetIsolationCommCycles(k);
      if (!enabled) {
        if (size || cycles || iso || st->GetComputeCycles(k))
          fail(
              "op%zu statistics disabled but not zero: size %zu, comm cycles %llu, isolation "
              "%llu",
              k, size, cycles, iso);
        continue;
      }
      if (has_exchange(L) && (size == 0 || cycles == 0 || iso == 0))
        fail(
            "op%zu exchanges data but GetCommSize %zu, GetCommCycles %llu, "
            "GetIsolationCommCycles %llu",
            k, size, cycles, iso);
      if (has_no_comm(L) && (size != 0 || iso != 0))
        fail("op%zu has no exchange but GetCommSize %zu, GetIsolationCommCycles %llu", k, size,
             iso);
    }
    expect_eq("Statistics::GetTotalCommSize (sum over operations)", total, st->GetTotalCommSize());
    if (enabled && st->GetTotalCommCycles() == 0 && total > 0)
      fail("Statistics::GetTotalCommCycles is 0 with %zu bytes sent", total);
    if (opt_.print_stats) {
      if (g_rank == 0) std::remove("mlsl_stats.log");
      st->Print();
      if (g_rank == 0 && enabled && access("mlsl_stats.log", R_OK) != 0)
        fail("Statistics::Print wrote no mlsl_stats.log in the working directory");
    }
    st->Reset();
    expect_eq("Statistics::GetTotalCommSize after Reset", 0, st->GetTotalCommSize());
  }

  NetOptions opt_;
  std::string name_;
  Session* session_ = nullptr;
  std::vector<Layer> layers_;
  std::vector<std::vector<char>> storage_;
};

// ---------------------------------------------------------------------------------------------

// `full`: every buffer kind and completion; otherwise (replicated distributions) library
// buffers and WaitGradientComm only.
void run_chains(std::vector<DistInfo>& dists, bool full) {
  static bool first = true;
  for (DistInfo& di : dists) {
    for (int du = 0; du < 2; ++du)
      for (int ub = 0; ub < (full ? 2 : 1); ++ub)
        for (int test = 0; test < (full ? 2 : 1); ++test) {
          NetOptions opt;
          opt.du = du;
          opt.user_buf = ub;
          opt.use_test = test;
          opt.check_stats = true;
          opt.print_stats = first;
          first = false;
          // CC -> ACT -> CC; odd kernel counts, so that partitions drop remainders and
          // distributed update pads; the two parameter sets in different dtypes.
          std::vector<OpSpec> specs = {
              {MLSL::OT_CC, &di, 4, 3, 8, 3, MLSL::DT_FLOAT, 21, 3, MLSL::DT_FLOAT},
              {MLSL::OT_ACT, &di, 8, 3, 8, 3, MLSL::DT_FLOAT, 0, 0, MLSL::DT_FLOAT},
              {MLSL::OT_CC, &di, 8, 3, 4, 5, MLSL::DT_FLOAT, 15, 2, MLSL::DT_DOUBLE}};
          char name[160];
          std::snprintf(name, sizeof name, "chain CC->ACT->CC dist %s dist_update %d %s buffers %s",
                        di.name.c_str(), du, ub ? "user" : "library",
                        test ? "TestGradientComm" : "WaitGradientComm");
          const auto t0 = std::chrono::steady_clock::now();
          Net(specs, opt, name).train();
          if (g_rank == 0)
            std::printf(
                "[0] %s: %.2f s\n", name,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
  }
}

// Two operations on different distributions: the producer's output feeds the consumer's input.
void run_pair(const char* label, OpType type, DistInfo& from, DistInfo& to, size_t f_from,
              size_t s_from, size_t f_to, size_t s_to, DataType dt, bool user_buf,
              size_t kernels = 0, bool du = false) {
  NetOptions opt;
  opt.user_buf = user_buf;
  opt.du = du;
  // With kernels, both operations carry a parameter set of that many kernels of 5 in dt.
  std::vector<OpSpec> specs = {{type, &from, 4, 2, f_from, s_from, dt, kernels, 5, dt},
                               {type, &to, f_to, s_to, 4, 2, dt, kernels, 5, dt}};
  char name[200];
  std::snprintf(name, sizeof name, "%s: %s %s -> %s %s (%s, %s buffers%s)", label,
                type == MLSL::OT_CC ? "CC" : "ACT", from.name.c_str(),
                type == MLSL::OT_CC ? "CC" : "ACT", to.name.c_str(), mlsl_ref::dtype_name(dt),
                user_buf ? "user" : "library", du ? ", distributed update" : "");
  const auto t0 = std::chrono::steady_clock::now();
  Net(specs, opt, name).train();
  if (g_rank == 0)
    std::printf("[0] %s: %.2f s\n", name,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

void run_pairs() {
  const size_t P = g_world;
  if (P < 2) return;
  DistInfo p1 = make_dist(P, 1), one_p = make_dist(1, P), one1 = make_dist(1, 1);
  run_pair("case 2 (allreduce)", MLSL::OT_CC, one_p, one1, 8, 3, 8, 3, MLSL::DT_FLOAT, false);
  run_pair("case 3 (reduce-scatter by rows)", MLSL::OT_CC, one_p, p1, 8, 3, 8, 3, MLSL::DT_DOUBLE,
           true);
  run_pair("case 4 (alltoall)", MLSL::OT_ACT, p1, one_p, 8, 3, 8, 3, MLSL::DT_FLOAT, true);
  run_pair("case 5 (alltoall)", MLSL::OT_ACT, one_p, p1, 8, 3, 8, 3, MLSL::DT_DOUBLE, false);
  if (P % 2 == 0 && P >= 4) {
    DistInfo half2 = make_dist(P / 2, 2), half1 = make_dist(P / 2, 1);
    run_pair("case 2 with data parts (allreduce + permutation)", MLSL::OT_CC, half2, half1, 8, 3, 8,
             3, MLSL::DT_DOUBLE, false);
    run_pair("case 3 (reduce-scatter by rows)", MLSL::OT_CC, half2, p1, 8, 3, 8, 3, MLSL::DT_FLOAT,
             false);
    // Producer and consumer see the sample as 8 x 6 and 16 x 3: only the flat position agrees.
    run_pair("case 4 (alltoall, other fm size)", MLSL::OT_ACT, p1, half2, 8, 6, 16, 3,
             MLSL::DT_FLOAT, false);
    run_pair("case 5 (alltoall)", MLSL::OT_ACT, half2, p1, 8, 3, 8, 3, MLSL::DT_FLOAT, true);
    run_pair("case 1 (other fm size)", MLSL::OT_CC, half2, half2, 8, 6, 16, 3, MLSL::DT_DOUBLE,
             true);
    run_pair("no exchange", MLSL::OT_ACT, half2, half2, 8, 3, 8, 3, MLSL::DT_FLOAT, false);
    // Bytes: activations summed modulo 256 by the reduce-scatter, parameters and their
    // gradients (summed modulo 256 too) as unsigned bytes, with distributed update.
    run_pair("case 1 (bytes)", MLSL::OT_CC, half2, half2, 8, 3, 8, 3, MLSL::DT_BYTE, false, 13,
             true);
    run_pair("case 4 (alltoall, bytes)", MLSL::OT_ACT, p1, half2, 8, 3, 8, 3, MLSL::DT_BYTE, true,
             7, false);
    env().DeleteDistribution(half2.dist);
    env().DeleteDistribution(half1.dist);
  }
  env().DeleteDistribution(p1.dist);
  env().DeleteDistribution(one_p.dist);
  env().DeleteDistribution(one1.dist);
}

// ---------------------------------------------------------------------------------------------
// --mode quant: one operation with three CT_QUANTIZATION parameter sets on P x 1: f32 without
// distributed update (compressed between nodes), f32 with distributed update and f64 (both
// uncompressed: nodecomm compresses f32 allreduces only, plan §5.3).

double quant_grad(size_t it, size_t e, size_t d) {
  // Integers up to 1e5: exact f32 sums of a few ranks, but beyond bf16's 8-bit mantissa, so that
  // compression between nodes does change them.
  return static_cast<double>(static_cast<long>((e * 7919 + it * 104729 + d * 3571) % 200001) -
                             100000);
}

int run_quant() {
  const char* kind_env = std::getenv("NODECOMM_MLSL_QUANT");
  const std::string kind = kind_env && *kind_env ? kind_env : "int8";
  const char* nodes_env = std::getenv("NODECOMM_NODES");
  const size_t nodes = std::strtoul(nodes_env != nullptr ? nodes_env : "1", nullptr, 10);
  g_where = "quant (" + kind + ", " + std::to_string(nodes) + " nodes)";
  MLSL::QuantParams qp;
  qp.lib_path = const_cast<char*>("/nonexistent/libdlcomp.so");
  qp.quant_buffer_func_name = const_cast<char*>("dl_comp_compress_buffer");
  qp.dequant_buffer_func_name = const_cast<char*>("dl_comp_decompress_buffer");
  qp.reduce_sum_func_name = const_cast<char*>("dl_comp_compressed_buffer_reduce_sum");
  qp.block_size = 268;
  qp.elem_in_block = 256;
  env().SetQuantizationParams(&qp);

  DistInfo di = make_dist(g_world, 1);
  Session* session = env().CreateSession();
  session->SetGlobalMinibatchSize(2 * g_world);
  MLSL::OperationRegInfo* info = session->CreateOperationRegInfo(MLSL::OT_CC);
  info->SetName("quantized");
  info->AddInput(4, 1, MLSL::DT_FLOAT);
  info->AddOutput(4, 1, MLSL::DT_FLOAT);
  struct QSet {
    size_t kernels, ks;
    DataType dt;
    bool du;
    bool compressed;
  };
  const QSet sets[] = {{600, 1, MLSL::DT_FLOAT, false, true},
                       {37, 3, MLSL::DT_FLOAT, true, false},
                       {101, 2, MLSL::DT_DOUBLE, false, false}};
  for (const QSet& s : sets)
    info->AddParameterSet(s.kernels, s.ks, s.dt, s.du, MLSL::CT_QUANTIZATION);
  Operation* op = session->GetOperation(session->AddOperation(info, di.dist));
  session->DeleteOperationRegInfo(info);
  session->Commit();

  // Statistics are off here (no MLSL_STATS): every call is a no-op reporting zero.
  MLSL::Statistics* st = session->GetStats();
  if (st->IsEnabled()) fail("Statistics::IsEnabled without MLSL_STATS");
  st->Start();
  if (st->IsStarted()) fail("Statistics::IsStarted while disabled");

  const size_t D = di.D(), d = di.d();
  for (size_t it = 1; it <= 3; ++it) {
    std::vector<void*> bufs;
    for (size_t k = 0; k < 3; ++k) {
      ParameterSet* ps = op->GetParameterSet(k);
      const size_t elems = ps->GetLocalKernelCount() * ps->GetKernelSize();
      void* b = env().Alloc(elems * mlsl_ref::dtype_size(sets[k].dt), 64);
      for (size_t e = 0; e < elems; ++e) mlsl_ref::store(sets[k].dt, b, e, quant_grad(it, e, d));
      ps->StartGradientComm(b);
      bufs.push_back(b);
    }
    for (size_t k = 0; k < 3; ++k) {
      ParameterSet* ps = op->GetParameterSet(k);
      void* p = ps->WaitGradientComm();
      if (p == nullptr) {
        fail("set %zu, iteration %zu: WaitGradientComm returned NULL on a data group of %zu", k, it,
             D);
        continue;
      }
      const size_t first = ps->GetOwnedKernelOffset() * ps->GetKernelSize();
      const size_t count = ps->GetOwnedKernelCount() * ps->GetKernelSize();
      const bool owned_buf = sets[k].du;
      double max_abs = 0;
      for (size_t e = 0; e < ps->GetLocalKernelCount() * ps->GetKernelSize(); ++e) {
        double a = 0;
        for (size_t r = 0; r < D; ++r) a += std::fabs(quant_grad(it, e, r));
        max_abs = std::max(max_abs, a);
      }
      size_t bad = 0, inexact = 0;
      double worst = 0;
      for (size_t e = 0; e < count; ++e) {
        double exact = 0, sum_abs = 0;
        for (size_t r = 0; r < D; ++r) {
          exact += quant_grad(it, first + e, r);
          sum_abs += std::fabs(quant_grad(it, first + e, r));
        }
        const double got = mlsl_ref::load(sets[k].dt, p, owned_buf ? e : first + e);
        double bound = 0;
        if (sets[k].compressed)
          bound = kind == "bf16"   ? mlsl_ref::bf16_bound(nodes, sum_abs)
                  : kind == "none" ? 0.0
                                   : mlsl_ref::int8_bound(nodes, max_abs, it > 1);
        const double err = std::fabs(got - exact);
        if (err != 0) ++inexact;
        worst = std::max(worst, sum_abs > 0 ? err / sum_abs : err);
        if (err > bound && bad++ < 3)
          fail(
              "set %zu (%s%s), iteration %zu: element %zu: exact %.17g got %.17g, error %.6g "
              "over the bound %.6g",
              k, mlsl_ref::dtype_name(sets[k].dt), sets[k].du ? ", distributed update" : "", it,
              first + e, exact, got, err, bound);
      }
      if (sets[k].compressed && nodes > 1 && kind != "none" && inexact == 0)
        fail(
            "set %zu, iteration %zu: every element exact across %zu nodes: was %s compression "
            "applied?",
            k, it, nodes, kind.c_str());
      if (g_rank == 0 && sets[k].compressed)
        std::printf(
            "[0] quant %s, %zu nodes, iteration %zu: %zu of %zu elements inexact, worst "
            "error %.3g of sum|x|\n",
            kind.c_str(), nodes, it, inexact, count, worst);
      // Every rank of the data group must hold the same bits.
      if (!owned_buf) {
        std::vector<float> all(count * D), mine(count);
        if (sets[k].dt == MLSL::DT_FLOAT) {
          std::memcpy(mine.data(), p, count * 4);
          env().Wait(
              di.dist->AllGather(mine.data(), count, all.data(), MLSL::DT_FLOAT, MLSL::GT_DATA));
          for (size_t r = 0; r < D; ++r)
            if (std::memcmp(all.data() + r * count, mine.data(), count * 4) != 0)
              fail(
                  "set %zu, iteration %zu: data group member %zu holds other bits than this "
                  "rank",
                  k, it, r);
        }
      }
    }
    for (size_t k = 0; k < 3; ++k) env().Free(bufs[k]);
  }
  st->Stop();
  if (st->GetTotalCommSize() || st->GetTotalCommCycles() || st->GetCommSize(0))
    fail("Statistics while disabled report non-zero sizes or cycles");
  env().DeleteSession(session);
  env().DeleteDistribution(di.dist);
  return 0;
}

// Session bookkeeping outside training: a PT_TEST session, RemoveOperations, operations added
// again afterwards, and a distribution deleted while its operations still use it (the layer
// defers the release, plan §3.2): Commit and a gradient exchange over it must still work.
void run_session_lifecycle() {
  DistInfo di = make_dist(g_world, 1);
  g_where = "session lifecycle on dist " + di.name + " (deleted before Commit)";
  Session* session = env().CreateSession(MLSL::PT_TEST);
  if (session->GetPhaseType() != MLSL::PT_TEST) fail("GetPhaseType of a PT_TEST session");
  session->SetGlobalMinibatchSize(4 * di.D());
  auto add = [&](const char* name, OpType type, size_t kernels) {
    MLSL::OperationRegInfo* info = session->CreateOperationRegInfo(type);
    info->SetName(name);
    info->AddInput(4, 2, MLSL::DT_DOUBLE);
    info->AddOutput(4, 2, MLSL::DT_DOUBLE);
    if (kernels) info->AddParameterSet(kernels, 1, MLSL::DT_FLOAT);
    const size_t idx = session->AddOperation(info, di.dist);
    session->DeleteOperationRegInfo(info);
    return idx;
  };
  add("dropped0", MLSL::OT_ACT, 0);
  add("dropped1", MLSL::OT_POOL, 3);
  expect_eq("GetOperationCount before RemoveOperations", 2, session->GetOperationCount());
  session->RemoveOperations();
  expect_eq("GetOperationCount after RemoveOperations", 0, session->GetOperationCount());
  expect_eq("AddOperation index after RemoveOperations", 0, add("kept0", MLSL::OT_BIAS, 6));
  expect_eq("AddOperation index", 1, add("kept1", MLSL::OT_ACT, 0));
  env().DeleteDistribution(di.dist);
  Operation* a = session->GetOperation(0);
  Operation* b = session->GetOperation(1);
  if (std::strcmp(a->GetName(), "kept0") != 0 || std::strcmp(b->GetName(), "kept1") != 0)
    fail("operations after RemoveOperations are named %s, %s", a->GetName(), b->GetName());
  if (a->GetOpType() != MLSL::OT_BIAS) fail("GetOpType of an OT_BIAS operation");
  b->SetPrev(a, 0, 0);
  session->Commit();
  // Same distribution, no reduction: nothing to exchange, WaitComm returns NULL at once.
  if (a->GetOutput(0)->GetPackBlockCount() || b->GetInput(0)->GetUnpackBlockCount())
    fail("ACT after BIAS on one distribution has blocks to exchange");
  a->GetOutput(0)->StartComm(a->GetOutput(0)->GetCommBuf());
  expect_ptr("WaitComm without an exchange", nullptr, b->GetInput(0)->WaitComm());
  ParameterSet* ps = a->GetParameterSet(0);
  float grad[6];
  for (size_t e = 0; e < 6; ++e) grad[e] = static_cast<float>(g_rank * 10 + e);
  ps->StartGradientComm(grad);
  void* p = ps->WaitGradientComm();
  expect_ptr("WaitGradientComm on a deleted (deferred) distribution", di.D() > 1 ? grad : nullptr,
             p);
  for (size_t e = 0; e < 6; ++e) {
    double expected = 0;
    for (size_t r : di.lay.data.members) expected += static_cast<double>(r * 10 + e);
    if (grad[e] != expected)
      fail("gradient element %zu over the deleted distribution: expected %.17g got %.17g", e,
           expected, static_cast<double>(grad[e]));
  }
  env().DeleteSession(session);
}

int main_impl(int argc, char** argv) {
  std::string mode;
  if (argc >= 3 && std::strcmp(argv[1], "--mode") == 0) mode = argv[2];
  if (!mode.empty() && mode != "quant") {
    std::fprintf(stderr, "usage: mlsl_model_check [--mode quant]\n");
    return 2;
  }
  env().Init(&argc, &argv);
  g_rank = env().GetProcessIdx();
  g_world = env().GetProcessCount();
  const auto t0 = std::chrono::steady_clock::now();
  if (mode == "quant") {
    run_quant();
  } else {
    std::vector<DistInfo> dists;
    const size_t parts[] = {1, 2, 4};
    for (size_t M : parts)
      if (g_world % M == 0) dists.push_back(make_dist(g_world / M, M));
    run_session_lifecycle();
    run_chains(dists, true);
    // Replicated: the world holds several independent copies of a smaller distribution;
    // gradients are summed within a copy's data group only (plan §0.2).
    std::vector<DistInfo> replicated;
    if (g_world % 2 == 0 && g_world > 2) {
      replicated.push_back(make_dist(2, 1));
      replicated.push_back(make_dist(1, 2));
    }
    run_chains(replicated, false);
    for (DistInfo& di : replicated) env().DeleteDistribution(di.dist);
    g_where = "exchanges between distributions";
    run_pairs();
    for (DistInfo& di : dists) env().DeleteDistribution(di.dist);
  }
  env().Finalize();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (g_failures) {
    std::printf("[%zu] mlsl_model_check%s: %zu failures\n", g_rank,
                mode.empty() ? "" : (" --mode " + mode).c_str(), g_failures);
    return 1;
  }
  std::printf("[%zu] mlsl_model_check%s: every element as the reference (%.1f s)\n", g_rank,
              mode.empty() ? "" : (" --mode " + mode).c_str(), s);
  return 0;
}

}  // namespace model_check

int main(int argc, char** argv) {
  return model_check::main_impl(argc, argv);
}
