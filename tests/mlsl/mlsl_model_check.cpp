// The MLSL layer's Session, OperationRegInfo, Operation, Activation, ParameterSet and
// Statistics through the C++ API (issue 22, docs/TESTING.md "The MLSL layer"), written against
// mlsl.hpp only and checked against tests/mlsl/reference.hpp.
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
//    the persistent-request rules of docs/MLSL.md "Requests" on each call. With MLSL_STATS=1 the
//    statistics must account for the exchanges.
// 2. Exchanges between different distributions (docs/MLSL.md "Activation exchanges" cases 2 to 5,
// and none), element by
//    element in both directions, reading the geometry only through the getters.
// The chain is in mlsl_model_net.cpp, the exchanges in mlsl_model_pairs.cpp, --mode quant in
// mlsl_model_quant.cpp; what they share, mlsl_model_check.hpp.
#include "mlsl_model_check.hpp"

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mlsl.hpp>
#include <string>
#include <vector>

#include "reference.hpp"

namespace model_check {

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

DistInfo make_dist(size_t D, size_t M) {
  DistInfo di;
  di.name = std::to_string(D) + "x" + std::to_string(M);
  di.dist = env().CreateDistribution(D, M);
  di.lay = mlsl_ref::grid_layout(g_world, g_rank, D, M);
  return di;
}

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
          train_chain(specs, opt, name);
          if (g_rank == 0)
            std::printf(
                "[0] %s: %.2f s\n", name,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
  }
}

// Session bookkeeping outside training: a PT_TEST session, RemoveOperations, operations added
// again afterwards, and a distribution deleted while its operations still use it (the layer
// defers the release, docs/MLSL.md): Commit and a gradient exchange over it must still work.
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
    // gradients are summed within a copy's data group only (docs/MLSL.md).
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
