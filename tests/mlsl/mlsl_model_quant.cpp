// --mode quant of mlsl_model_check (issue 22, docs/MLSL.md "Quantization"): CT_QUANTIZATION
// gradients (NODECOMM_MLSL_QUANT picks bf16 or int8) within the documented bounds, exact on one
// node.
#include <algorithm>
#include <cmath>
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
// --mode quant: one operation with three CT_QUANTIZATION parameter sets on P x 1: f32 without
// distributed update (compressed between nodes), f32 with distributed update and f64 (both
// uncompressed: nodecomm compresses f32 allreduces only, docs/MLSL.md "Quantization").

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

}  // namespace model_check
