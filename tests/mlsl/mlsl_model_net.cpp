// One chain of operations of mlsl_model_check (issue 22, docs/TESTING.md "The MLSL layer") in one
// session, run through MLSL's training loop: every getter after Commit, every activation and
// gradient exchanged, every reduced parameter gradient and parameter increment, the
// persistent-request rules of docs/MLSL.md "Requests", and the statistics. Checked against
// tests/mlsl/reference.hpp.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mlsl.hpp>
#include <string>
#include <vector>

#include "mlsl_model_check.hpp"
#include "reference.hpp"

namespace model_check {

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

void train_chain(const std::vector<OpSpec>& specs, const NetOptions& opt, const std::string& name) {
  Net(specs, opt, name).train();
}

}  // namespace model_check
