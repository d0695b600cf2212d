// The C++ API (nodecomm.hpp) end to end: typed buffers, in-place and span collectives,
// communicators (split, distribution) as RAII objects, registered memory.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <nodecomm.hpp>
#include <vector>
int main() {
  nodecomm::Context ctx;
  int n = ctx.world_size(), r = ctx.world_rank(), bad = 0;
  auto buf = ctx.alloc<double>(4 * n);
  for (int i = 0; i < 4; ++i) buf[i] = r + i;
  ctx.allreduce(std::span<double>(buf.data(), 4)).wait();
  for (int i = 0; i < 4; ++i) bad += buf[i] != n * (n - 1) / 2.0 + n * i;
  std::vector<int8_t> s(3, static_cast<int8_t>(r)), g(3 * n);
  ctx.allgather(std::span<const int8_t>(s), std::span<int8_t>(g)).wait();
  for (int k = 0; k < n; ++k) bad += g[3 * k] != k;
  auto [data, model] = ctx.distribution(n, 1);
  nodecomm::Comm sub = ctx.split(r % 2, r);
  std::vector<float> x(2, 1.0f);
  ctx.allreduce(std::span<float>(x), NC_SUM, sub.id()).wait();
  bad += x[0] != sub.size();
  ctx.barrier(data.id()).wait();
  // A memfd of this rank's own, registered: an odd-length allreduce in place in it.
  const size_t count = 1001;
  const int fd = memfd_create("cpp_api_check", MFD_CLOEXEC);
  bad += fd < 0 || ftruncate(fd, 8192) != 0;
  auto* mem = static_cast<float*>(mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ctx.register_fd(fd, 0, 8192, mem);
  close(fd);
  for (size_t i = 0; i < count; ++i) mem[i] = static_cast<float>(r + i);
  ctx.allreduce(std::span<float>(mem, count)).wait();
  for (size_t i = 0; i < count; ++i) bad += mem[i] != static_cast<float>(n * (n - 1) / 2 + n * i);
  printf("rank %d bad %d\n", r, bad);
  return bad;
}
