// 8-bit sums and products wrap modulo 256 on every path, between nodes too. Open MPI 4.1's
// op/avx component saturates them (open-mpi/ompi#8045), so the daemon passes its own op to the
// MPI collectives it uses for reduce_scatter and reduce; this checks every element of sums and
// products that overflow, for u8 and i8, through reduce_scatter, reduce and allreduce.
#include <nodecomm.h>

#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

uint8_t wrap8_input(int rank, size_t i, bool prod) {
  // Sums overflow quickly; products mix odd factors (never 0 mod 256 by accident) and 2s.
  const auto r = static_cast<size_t>(rank);
  return prod ? static_cast<uint8_t>(((r * 5 + i * 3) % 7) * 2 + 1)
              : static_cast<uint8_t>((r * 29 + i * 7 + 101) & 0xFF);
}

}  // namespace

int main() {
  nc_context_t* ctx = nullptr;
  if (nc_init(nullptr, &ctx) != NC_OK) {
    std::fprintf(stderr, "wrap8_check: nc_init: %s\n", nc_last_error());
    return 2;
  }
  const int rank = nc_world_rank(ctx);
  const int n = nc_world_size(ctx);
  long bad = 0;
  long checks = 0;
  for (nc_dtype_t dtype : {NC_U8, NC_I8}) {
    for (nc_redop_t op : {NC_SUM, NC_PROD}) {
      const bool prod = op == NC_PROD;
      for (size_t count : {size_t{7}, size_t{4099}}) {
        for (int which = 0; which < 3; ++which) {  // reduce_scatter, reduce to rank n-1, allreduce
          std::vector<uint8_t> send(count * n);
          std::vector<uint8_t> recv(count * n, 0xA5);
          for (size_t i = 0; i < send.size(); ++i) send[i] = wrap8_input(rank, i, prod);
          nc_request_t req = 0;
          nc_status_t st = NC_OK;
          const char* name = which == 0 ? "reduce_scatter" : which == 1 ? "reduce" : "allreduce";
          if (which == 0) {
            st = nc_reduce_scatter(ctx, send.data(), recv.data(), count, dtype, op, NC_COMM_WORLD,
                                   nullptr, &req);
          } else if (which == 1) {
            st = nc_reduce(ctx, send.data(), recv.data(), count, dtype, op, n - 1, NC_COMM_WORLD,
                           nullptr, &req);
          } else {
            st = nc_allreduce(ctx, send.data(), recv.data(), count, dtype, op, NC_COMM_WORLD,
                              nullptr, &req);
          }
          if (st == NC_OK) st = nc_wait(ctx, req);
          if (st != NC_OK) {
            std::fprintf(stderr, "wrap8_check: rank %d %s: %s\n", rank, name, nc_last_error());
            return 1;
          }
          if (which == 1 && rank != n - 1) continue;
          for (size_t i = 0; i < count; ++i) {
            const size_t at = which == 0 ? static_cast<size_t>(rank) * count + i : i;
            unsigned expected = prod ? 1u : 0u;
            for (int r = 0; r < n; ++r) {
              expected =
                  prod ? expected * wrap8_input(r, at, true) : expected + wrap8_input(r, at, false);
            }
            expected &= 0xFFu;
            ++checks;
            if (recv[i] != expected && ++bad <= 5) {
              std::fprintf(stderr,
                           "wrap8_check: rank %d %s %s %s count %zu element %zu: expected %u, "
                           "got %u\n",
                           rank, name, nc_dtype_name(dtype), nc_redop_name(op), count, i, expected,
                           recv[i]);
            }
          }
        }
      }
    }
  }
  std::printf("wrap8_check: rank %d/%d: %ld checks, %ld wrong\n", rank, n, checks, bad);
  nc_finalize(ctx);
  return bad == 0 ? 0 : 1;
}
