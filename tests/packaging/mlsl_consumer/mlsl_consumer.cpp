// A program written against MLSL's documented C++ API only (mlsl.hpp and the standard library;
// C++98): Init, one AllReduce over GT_GLOBAL of rank-dependent values, a check of every sum,
// Finalize. The packaging checks build it against nodecomm's build tree and installed prefix
// (tests/mlsl/build_by_hand.sh, tests/packaging/mlsl_consumer_check.sh).
#include <mlsl.hpp>

#include <cstdio>

using namespace MLSL;

int main(int argc, char** argv) {
  if (MLSL_MAJOR(Environment::GetVersion()) != MLSL_MAJOR_VERSION) {
    std::fprintf(stderr, "mlsl_consumer: library API %d.%d, header %d.%d\n",
                 MLSL_MAJOR(Environment::GetVersion()), MLSL_MINOR(Environment::GetVersion()),
                 MLSL_MAJOR_VERSION, MLSL_MINOR_VERSION);
    return 1;
  }
  Environment& env = Environment::GetEnv();
  env.Init(&argc, &argv);
  const size_t rank = env.GetProcessIdx();
  const size_t size = env.GetProcessCount();
  Distribution* dist = env.CreateDistribution(size, 1);

  const size_t count = 1031;
  float* buf = static_cast<float*>(env.Alloc(count * sizeof(float), 64));
  for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>((rank + 1) * (i % 7 + 1));
  CommReq* req = dist->AllReduce(buf, buf, count, DT_FLOAT, RT_SUM, GT_GLOBAL);
  env.Wait(req);

  size_t bad = 0;
  for (size_t i = 0; i < count; ++i) {
    const float want = static_cast<float>(size * (size + 1) / 2 * (i % 7 + 1));
    if (buf[i] != want) {
      if (bad++ < 5)
        std::fprintf(stderr, "[%lu] mlsl_consumer: element %lu is %g, wanted %g\n",
                     static_cast<unsigned long>(rank), static_cast<unsigned long>(i), buf[i],
                     want);
    }
  }
  env.Free(buf);
  env.DeleteDistribution(dist);
  env.Finalize();
  if (bad != 0) return 1;
  std::printf("[%lu] mlsl_consumer: allreduce over %lu processes ok\n",
              static_cast<unsigned long>(rank), static_cast<unsigned long>(size));
  std::printf("[%lu] exited normally\n", static_cast<unsigned long>(rank));
  return 0;
}
