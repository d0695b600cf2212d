// The MLSL layer's Environment and Distribution through the C++ API (issue 22, docs/TESTING.md "The
// MLSL layer"), written against mlsl.hpp only and checked against tests/mlsl/reference.hpp.
//
//   mlsl_api_check                 every check below; exit 1 on any mismatch
//   mlsl_api_check --mode MODE     one misuse that must end the process with status 1 and a
//                                  message (driven by mlsl_errors.sh): wait-twice,
//                                  test-then-wait, wait-null, start-in-flight, not-multiple,
//                                  init-twice, idx-before-init, bad-root,
//                                  unsupported-exchange, mismatch
//   mlsl_api_check --mode configure  Configure("color=<rank % 2>") after Init splits the global
//                                  group (not a misuse: exits 0 when every check holds)
//
// Checks: GetVersion, IsInitialized around Init and Finalize, Alloc's alignments (also before
// Init), QuantParams round trip; then for each distribution (P x 1, P/2 x 2, 1 x P, the
// replicated 1 x 1, 2 x 1, 1 x 2, and a transposed grid by colors) the group indices, counts
// and members of GT_DATA, GT_MODEL and GT_GLOBAL, and every collective on each group over a
// sampled matrix in which every dtype, reduction, root, in-place form, buffer kind, completion
// and count appears; finally 300 collectives in flight at once (past nodecomm's 256 per client).
// The collectives are in mlsl_api_collectives.cpp; what the two files share, mlsl_api_check.hpp.
#include "mlsl_api_check.hpp"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mlsl.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "reference.hpp"

namespace api_check {

size_t g_rank = 0;      // global rank, for messages
size_t g_failures = 0;  // mismatches seen (each case prints its first few)

// ---------------------------------------------------------------------------------------------
// Environment.

bool aligned(const void* p, size_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

void check_alloc(const char* when) {
  Checker chk;
  chk.what = std::string("Environment::Alloc ") + when;
  const size_t kAlign[] = {8, 64, 4096, 65536};
  const size_t kSizes[] = {1, 100, 70000, 1 << 20};
  for (size_t a : kAlign)
    for (size_t s : kSizes) {
      void* p = env().Alloc(s, a);
      char msg[128];
      std::snprintf(msg, sizeof msg, "Alloc(%zu, %zu) = %p: NULL or not aligned", s, a, p);
      chk.expect_true(p != nullptr && aligned(p, a), msg);
      if (p == nullptr) continue;
      std::memset(p, 0x5A, s);  // the whole block is writable (ASan would object otherwise)
      env().Free(p);
    }
  // Past the arena (64 MiB unless configured otherwise): the heap, never NULL (docs/MLSL.md).
  const size_t big = size_t(80) << 20;
  void* huge = env().Alloc(big, 4096);
  chk.expect_true(huge != nullptr && aligned(huge, 4096), "Alloc(80 MiB, 4096)");
  if (huge) {
    std::memset(huge, 0x5A, big);
    env().Free(huge);
  }
  void* zero = env().Alloc(0, 64);
  chk.expect_true(zero != nullptr, "Alloc(0, 64) returned NULL");
  env().Free(zero);
  env().Free(nullptr);  // a no-op
}

void check_quant_params() {
  Checker chk;
  chk.what = "Environment::SetQuantizationParams/GetQuantizationParams";
  chk.expect_true(env().GetQuantizationParams() == nullptr, "GetQuantizationParams before Set");
  MLSL::QuantParams qp;
  qp.lib_path = strdup("/nonexistent/libdlcomp.so");
  qp.quant_buffer_func_name = strdup("dl_comp_compress_buffer");
  qp.dequant_buffer_func_name = strdup("dl_comp_decompress_buffer");
  qp.reduce_sum_func_name = strdup("dl_comp_compressed_buffer_reduce_sum");
  qp.block_size = 268;
  qp.elem_in_block = 256;
  env().SetQuantizationParams(&qp);
  // The library keeps a deep copy: the caller frees its strings right away (MLSL's example does).
  std::free(qp.lib_path);
  std::free(qp.quant_buffer_func_name);
  std::free(qp.dequant_buffer_func_name);
  std::free(qp.reduce_sum_func_name);
  MLSL::QuantParams* got = env().GetQuantizationParams();
  chk.expect_true(got != nullptr && got != &qp, "GetQuantizationParams is not a copy");
  if (got == nullptr || got == &qp) return;
  auto same = [](const char* a, const char* b) { return a && std::strcmp(a, b) == 0; };
  chk.expect_true(same(got->lib_path, "/nonexistent/libdlcomp.so"), "lib_path");
  chk.expect_true(same(got->quant_buffer_func_name, "dl_comp_compress_buffer"),
                  "quant_buffer_func_name");
  chk.expect_true(same(got->dequant_buffer_func_name, "dl_comp_decompress_buffer"),
                  "dequant_buffer_func_name");
  chk.expect_true(same(got->reduce_sum_func_name, "dl_comp_compressed_buffer_reduce_sum"),
                  "reduce_sum_func_name");
  chk.expect_true(got->block_size == 268 && got->elem_in_block == 256, "block sizes");
}

size_t env_size(const char* name, size_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? static_cast<size_t>(std::strtoul(v, nullptr, 10)) : fallback;
}

std::vector<DistUnderTest> make_distributions(size_t n) {
  std::vector<std::pair<size_t, size_t>> shapes = {{n, 1}};
  if (n % 2 == 0) shapes.emplace_back(n / 2, 2);
  shapes.emplace_back(1, n);
  const std::pair<size_t, size_t> kReplicated[] = {{1, 1}, {2, 1}, {1, 2}};
  for (auto s : kReplicated)
    if (n % (s.first * s.second) == 0) shapes.push_back(s);
  std::vector<DistUnderTest> out;
  std::set<std::pair<size_t, size_t>> seen;
  for (auto s : shapes) {
    if (!seen.insert(s).second) continue;
    DistUnderTest d;
    d.name = std::to_string(s.first) + "x" + std::to_string(s.second);
    d.dist = env().CreateDistribution(s.first, s.second);
    d.layout = mlsl_ref::grid_layout(n, g_rank, s.first, s.second);
    out.push_back(d);
  }
  if (n % 2 == 0 && n >= 4) {
    // The (n/2) x 2 grid transposed: model groups are the ranks of equal parity, data groups
    // the consecutive pairs.
    std::vector<int> dc(n), mc(n);
    for (size_t j = 0; j < n; ++j) {
      dc[j] = static_cast<int>(j / 2);
      mc[j] = static_cast<int>(j % 2);
    }
    DistUnderTest d;
    d.name = "colors(data=g/2,model=g%2)";
    d.dist = env().CreateDistributionWithColors(dc[g_rank], mc[g_rank]);
    d.layout = mlsl_ref::color_layout(n, g_rank, dc, mc);
    out.push_back(d);
  }
  return out;
}

int run_all(int argc, char** argv) {
  Checker chk;
  chk.what = "Environment";
  const int version = Environment::GetVersion();
  chk.expect("GetVersion", 0, 65536, version);
  chk.expect("GetVersion vs MLSL_VERSION(1, 0)", 0, MLSL_VERSION(1, 0), version);
  chk.expect_true(MLSL_MAJOR(version) == MLSL_MAJOR_VERSION, "MLSL_MAJOR(GetVersion())");
  chk.expect_true(!env().IsInitialized(), "IsInitialized() before Init");
  // Alloc before Init falls back to the heap; one block stays to be freed after Init.
  check_alloc("before Init");
  void* early = env().Alloc(1000, 4096);
  chk.expect_true(early != nullptr && aligned(early, 4096), "Alloc(1000, 4096) before Init");

  env().Init(&argc, &argv);
  chk.expect_true(env().IsInitialized(), "IsInitialized() after Init");
  g_rank = env().GetProcessIdx();
  const size_t n = env().GetProcessCount();
  // nodecomm-launch tells every rank its world rank and the layout.
  const size_t hint = env_size("NODECOMM_WORLD_RANK_HINT", g_rank);
  chk.expect("GetProcessIdx vs NODECOMM_WORLD_RANK_HINT", 0, hint, g_rank);
  const size_t launched = env_size("NODECOMM_NODES", 1) * env_size("NODECOMM_LOCAL_SIZE", n);
  chk.expect("GetProcessCount vs NODECOMM_NODES x NODECOMM_LOCAL_SIZE", 0, launched, n);
  if (early) env().Free(early);
  check_alloc("after Init");
  check_quant_params();

  std::vector<DistUnderTest> dists = make_distributions(n);
  size_t posted = 0;
  for (size_t k = 0; k < dists.size(); ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    check_groups(dists[k]);
    const size_t ops = run_matrix(dists[k], k == 0);
    posted += ops;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (g_rank == 0)
      std::printf("[0] dist %s: %zu collectives in %.2f s\n", dists[k].name.c_str(), ops, s);
  }
  check_coverage();
  zero_counts(dists[0]);
  flood(dists[0]);
  for (DistUnderTest& d : dists) env().DeleteDistribution(d.dist);
  env().Finalize();
  chk.expect_true(!env().IsInitialized(), "IsInitialized() after Finalize");
  if (g_failures != 0) {
    std::printf("[%zu] mlsl_api_check: %zu mismatches\n", g_rank, g_failures);
    return 1;
  }
  std::printf("[%zu] mlsl_api_check: %zu collectives + 300 in flight, all exact\n", g_rank, posted);
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Misuse modes: each must end the process (status 1, a message from the library). Reaching the
// end of one is itself the failure, reported with status 0 so the script tells it apart.

int unexpected(const char* mode, const char* what) {
  std::printf("[%zu] mlsl_api_check --mode %s: UNEXPECTED: %s returned instead of failing\n",
              g_rank, mode, what);
  std::fflush(stdout);
  return 0;
}

int run_mode(const std::string& mode, int argc, char** argv) {
  if (mode == "idx-before-init") {
    env().GetProcessIdx();
    return unexpected(mode.c_str(), "GetProcessIdx before Init");
  }
  env().Init(&argc, &argv);
  g_rank = env().GetProcessIdx();
  const size_t n = env().GetProcessCount();
  if (mode == "configure") {
    // Not a misuse: Configure("color=c") after Init splits the global group by color, and
    // GT_GLOBAL, GetProcessIdx/Count and new distributions then see only that group.
    const int color = static_cast<int>(g_rank % 2);
    const std::string config = "color=" + std::to_string(color);
    env().Configure(config.c_str());
    std::vector<int> colors(n), zero(n, 0);
    for (size_t j = 0; j < n; ++j) colors[j] = static_cast<int>(j % 2);
    const mlsl_ref::Layout sub = mlsl_ref::color_layout(n, g_rank, colors, colors);
    Checker chk;
    chk.what = "Configure(\"" + config + "\")";
    chk.expect("GetProcessIdx", 0, sub.model.idx, env().GetProcessIdx());
    chk.expect("GetProcessCount", 0, sub.model.size(), env().GetProcessCount());
    Distribution* d = env().CreateDistribution(sub.model.size(), 1);
    ApiBuf mine(true, MLSL::DT_DOUBLE, 1), all(false, MLSL::DT_DOUBLE, sub.model.size());
    mine.set(0, static_cast<double>(g_rank));
    env().Wait(d->AllGather(mine.ptr(), 1, all.ptr(), MLSL::DT_DOUBLE, MLSL::GT_GLOBAL));
    for (size_t i = 0; i < sub.model.size(); ++i)
      chk.expect("AllGather of the original ranks over GT_GLOBAL", i,
                 static_cast<double>(sub.model.members[i]), all.get(i));
    env().DeleteDistribution(d);
    env().Finalize();
    if (g_failures) return 1;
    std::printf(
        "[%zu] mlsl_api_check --mode configure: the global group is the %zu ranks of "
        "color %d\n",
        g_rank, sub.model.size(), color);
    return 0;
  }
  if (mode == "init-twice") {
    env().Init(&argc, &argv);
    return unexpected(mode.c_str(), "a second Init");
  }
  if (mode == "not-multiple") {
    env().CreateDistribution(n + 1, 1);
    return unexpected(mode.c_str(), "CreateDistribution(world + 1, 1)");
  }
  Distribution* dist = env().CreateDistribution(n, 1);
  ApiBuf b(true, MLSL::DT_FLOAT, 16);
  b.fill(1);
  if (mode == "wait-twice") {
    CommReq* req =
        dist->AllReduce(b.ptr(), b.ptr(), 16, MLSL::DT_FLOAT, MLSL::RT_SUM, MLSL::GT_GLOBAL);
    env().Wait(req);
    env().Wait(req);
    return unexpected(mode.c_str(), "a second Wait on one request");
  }
  if (mode == "wait-null") {
    env().Wait(nullptr);
    return unexpected(mode.c_str(), "Wait(NULL)");
  }
  if (mode == "test-then-wait") {
    CommReq* req =
        dist->AllReduce(b.ptr(), b.ptr(), 16, MLSL::DT_FLOAT, MLSL::RT_SUM, MLSL::GT_GLOBAL);
    complete(req, true);
    env().Wait(req);
    return unexpected(mode.c_str(), "Wait after Test reported completion");
  }
  if (mode == "bad-root") {
    env().Wait(dist->Bcast(b.ptr(), 16, MLSL::DT_FLOAT, n, MLSL::GT_GLOBAL));
    return unexpected(mode.c_str(), "Bcast with root == group size");
  }
  if (mode == "mismatch") {
    // Rank 0 reduces while the others broadcast: nodecomm fails every member with its
    // mismatch text instead of hanging (MLSL would hang).
    CommReq* req = g_rank == 0 ? dist->AllReduce(b.ptr(), b.ptr(), 16, MLSL::DT_FLOAT, MLSL::RT_SUM,
                                                 MLSL::GT_GLOBAL)
                               : dist->Bcast(b.ptr(), 16, MLSL::DT_FLOAT, 0, MLSL::GT_GLOBAL);
    env().Wait(req);
    return unexpected(mode.c_str(), "Wait on mismatched collectives");
  }
  MLSL::Session* session = env().CreateSession();
  session->SetGlobalMinibatchSize(4 * n);
  if (mode == "start-in-flight") {
    MLSL::OperationRegInfo* info = session->CreateOperationRegInfo(MLSL::OT_CC);
    info->SetName("start_in_flight");
    info->AddInput(4, 2, MLSL::DT_FLOAT);
    info->AddOutput(4, 2, MLSL::DT_FLOAT);
    info->AddParameterSet(9, 3, MLSL::DT_FLOAT);
    MLSL::Operation* op = session->GetOperation(session->AddOperation(info, dist));
    session->DeleteOperationRegInfo(info);
    session->Commit();
    MLSL::ParameterSet* ps = op->GetParameterSet(0);
    ApiBuf grad(true, MLSL::DT_FLOAT, ps->GetLocalKernelCount() * ps->GetKernelSize());
    grad.fill(1);
    ps->StartGradientComm(grad.ptr());
    ps->StartGradientComm(grad.ptr());
    return unexpected(mode.c_str(), "StartGradientComm while the previous one is in flight");
  }
  if (mode == "unsupported-exchange") {
    // A CC output spread over a 1 x n model group feeding a consumer that is itself split by
    // model (or the same shape as another object): none of MLSL's exchange cases applies.
    Distribution* other =
        n >= 4 && n % 2 == 0 ? env().CreateDistribution(n / 2, 2) : env().CreateDistribution(1, n);
    Distribution* first = env().CreateDistribution(1, n);
    MLSL::Operation* ops[2];
    for (int k = 0; k < 2; ++k) {
      MLSL::OperationRegInfo* info = session->CreateOperationRegInfo(MLSL::OT_CC);
      info->SetName(k == 0 ? "producer" : "consumer");
      info->AddInput(8, 2, MLSL::DT_FLOAT);
      info->AddOutput(8, 2, MLSL::DT_FLOAT);
      ops[k] = session->GetOperation(session->AddOperation(info, k == 0 ? first : other));
      session->DeleteOperationRegInfo(info);
    }
    ops[1]->SetPrev(ops[0], 0, 0);
    session->Commit();
    return unexpected(mode.c_str(), "Commit of an unsupported activation exchange");
  }
  std::fprintf(stderr, "mlsl_api_check: unknown --mode '%s'\n", mode.c_str());
  return 2;
}

}  // namespace api_check

int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "--mode") == 0)
    return api_check::run_mode(argv[2], argc, argv);
  if (argc >= 2) {
    std::fprintf(stderr, "usage: mlsl_api_check [--mode MODE]\n");
    return 2;
  }
  return api_check::run_all(argc, argv);
}
