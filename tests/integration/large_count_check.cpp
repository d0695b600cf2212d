// A payload just over 2 GiB through a path that used to take an int count (issue 16, point
// 6): a broadcast of 2^31 + 4099 bytes in place between daemons, which MPI_Ibcast cannot
// carry in one call (its count is int) and nodecommd now carries as chunked messages. Every
// byte is checked on every rank. Run under nodecomm-launch on two nodes or more, with arenas
// large enough (NODECOMM_ARENA_BYTES).
//   large_count_check [BYTES]
#include <cinttypes>
#include <cstdio>
#include <cstdlib>

#include "nodecomm.h"

namespace {

// Position-dependent beyond any period a misplaced or repeated chunk could hide in.
uint8_t pattern(uint64_t i) {
  return static_cast<uint8_t>(i * 131 + (i >> 24) * 7 + 1);
}

int fail(const char* what, nc_status_t s) {
  std::fprintf(stderr, "large_count_check: %s: %s: %s\n", what, nc_status_string(s),
               nc_last_error());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const uint64_t bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (1ull << 31) + 4099;
  nc_init_options_t opts;
  nc_init_options_default(&opts);
  nc_context_t* ctx = nullptr;
  if (nc_status_t s = nc_init(&opts, &ctx); s != NC_OK) return fail("nc_init", s);
  const int rank = nc_world_rank(ctx);
  void* buffer = nullptr;
  if (nc_status_t s = nc_alloc(ctx, bytes, &buffer); s != NC_OK) return fail("nc_alloc", s);
  auto* data = static_cast<uint8_t*>(buffer);
  for (uint64_t i = 0; i < bytes; ++i) data[i] = rank == 0 ? pattern(i) : 0;
  nc_request_t req = 0;
  if (nc_status_t s = nc_broadcast(ctx, data, data, bytes, NC_U8, 0, NC_COMM_WORLD, nullptr, &req);
      s != NC_OK) {
    return fail("nc_broadcast", s);
  }
  if (nc_status_t s = nc_wait_all(ctx, 1, &req, nullptr); s != NC_OK) return fail("wait", s);
  uint64_t wrong = 0;
  uint64_t first = 0;
  for (uint64_t i = 0; i < bytes; ++i) {
    if (data[i] != pattern(i) && wrong++ == 0) first = i;
  }
  if (wrong != 0) {
    std::fprintf(stderr,
                 "large_count_check rank %d: %" PRIu64 " of %" PRIu64
                 " bytes wrong, the first at %" PRIu64 "\n",
                 rank, wrong, bytes, first);
    return 1;
  }
  std::printf("large_count_check rank %d: broadcast of %" PRIu64 " bytes exact\n", rank, bytes);
  nc_free(ctx, buffer);
  nc_finalize(ctx);
  return 0;
}
