// Exchanges between different distributions in mlsl_model_check (issue 22, docs/MLSL.md "Activation
// exchanges" cases 2 to 5, and none): a producer and its consumer on two distributions, element by
// element in both directions, reading the geometry only through the getters.
#include <chrono>
#include <cstdio>
#include <mlsl.hpp>
#include <vector>

#include "mlsl_model_check.hpp"
#include "reference.hpp"

namespace model_check {

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
  train_chain(specs, opt, name);
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

}  // namespace model_check
