// Allreduce of (world rank + 1) over every rank through the C++ API (nodecomm.hpp).
#include <cstdio>
#include <exception>
#include <nodecomm.hpp>

int main() {
  try {
    nodecomm::Context ctx;
    auto data = ctx.alloc<double>(1000);
    for (double& x : data.span()) x = ctx.world_rank() + 1;
    ctx.allreduce(data.span()).wait();
    const double want = ctx.world_size() * (ctx.world_size() + 1) / 2.0;
    for (double x : data.span()) {
      if (x != want) {
        std::fprintf(stderr, "consumer_cpp: rank %d got %g, wanted %g\n", ctx.world_rank(), x,
                     want);
        return 1;
      }
    }
    std::printf("consumer_cpp rank %d of %d: allreduce ok (%g)\n", ctx.world_rank(),
                ctx.world_size(), want);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer_cpp: %s\n", e.what());
    return 1;
  }
  return 0;
}
