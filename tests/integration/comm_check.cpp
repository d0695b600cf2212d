// Communicators under nodecomm-launch: splits with several colors (one rank opting out),
// keys that reverse the order, dup, free, and nc_distribution; on each new communicator the
// collectives are checked element by element against results computed here from the
// members' world ranks.
#include <nodecomm.h>

#include <cstdio>
#include <vector>
#define CK(x)                                                 \
  do {                                                        \
    nc_status_t s_ = (x);                                     \
    if (s_ != NC_OK) {                                        \
      printf("rank %d: %s -> %s\n", wr, #x, nc_last_error()); \
      return 1;                                               \
    }                                                         \
  } while (0)
int wr;
int check_comm(nc_context_t* ctx, nc_comm_t comm,
               const std::vector<int>& members /*world ranks in comm order*/) {
  int rank, n;
  CK(nc_comm_rank(ctx, comm, &rank));
  CK(nc_comm_size(ctx, comm, &n));
  int bad = 0;
  if (n != (int)members.size() || members[rank] != wr) {
    printf("rank %d: comm rank %d size %d wrong\n", wr, rank, n);
    return 1;
  }
  const size_t c = 3;
  int32_t *s, *r;
  CK(nc_alloc(ctx, c * n * 4, (void**)&s));
  CK(nc_alloc(ctx, c * n * 4, (void**)&r));
  nc_request_t q;
  for (size_t i = 0; i < c; ++i) s[i] = wr + i;
  CK(nc_allreduce(ctx, s, r, c, NC_I32, NC_SUM, comm, nullptr, &q));
  CK(nc_wait(ctx, q));
  for (size_t i = 0; i < c; ++i) {
    int e = 0;
    for (int m : members) e += m + i;
    if (r[i] != e) {
      bad++;
      printf("rank %d ar\n", wr);
    }
  }
  for (size_t i = 0; i < c; ++i) s[i] = wr * 100 + static_cast<int>(i);
  CK(nc_allgather(ctx, s, r, c, NC_I32, comm, nullptr, &q));
  CK(nc_wait(ctx, q));
  for (int k = 0; k < n; ++k)
    for (size_t i = 0; i < c; ++i)
      if (r[k * c + i] != members[k] * 100 + static_cast<int>(i)) {
        bad++;
        printf("rank %d ag k%d got %d\n", wr, k, r[k * c + i]);
      }
  for (int j = 0; j < n; ++j)
    for (size_t i = 0; i < c; ++i) s[j * c + i] = wr * 10000 + j * 10 + i;
  CK(nc_alltoall(ctx, s, r, c, NC_I32, comm, nullptr, &q));
  CK(nc_wait(ctx, q));
  for (int k = 0; k < n; ++k)
    for (size_t i = 0; i < c; ++i)
      if (r[k * c + i] != (int)(members[k] * 10000 + rank * 10 + i)) {
        bad++;
        printf("rank %d a2a\n", wr);
      }
  for (size_t i = 0; i < c * n; ++i) s[i] = wr + i;
  CK(nc_reduce_scatter(ctx, s, r, c, NC_I32, NC_SUM, comm, nullptr, &q));
  CK(nc_wait(ctx, q));
  for (size_t i = 0; i < c; ++i) {
    int e = 0;
    for (int m : members) e += m + rank * c + i;
    if (r[i] != e) {
      bad++;
      printf("rank %d rs\n", wr);
    }
  }
  int root = n - 1;
  for (size_t i = 0; i < c * n; ++i) s[i] = rank == root ? 5 * i : -1;
  CK(nc_scatter(ctx, s, r, c, NC_I32, root, comm, nullptr, &q));
  CK(nc_wait(ctx, q));
  for (size_t i = 0; i < c; ++i)
    if (r[i] != (int)(5 * (rank * c + i))) {
      bad++;
      printf("rank %d scatter\n", wr);
    }
  for (size_t i = 0; i < c; ++i) s[i] = wr * 7 + static_cast<int>(i);
  CK(nc_gather(ctx, s, r, c, NC_I32, root, comm, nullptr, &q));
  CK(nc_wait(ctx, q));
  if (rank == root)
    for (int k = 0; k < n; ++k)
      for (size_t i = 0; i < c; ++i)
        if (r[k * c + i] != members[k] * 7 + static_cast<int>(i)) {
          bad++;
          printf("rank %d gather\n", wr);
        }
  for (size_t i = 0; i < c; ++i) {
    s[i] = rank == root ? 42 + i : 0;
  }
  CK(nc_broadcast(ctx, s, s, c, NC_I32, root, comm, nullptr, &q));
  CK(nc_wait(ctx, q));
  for (size_t i = 0; i < c; ++i)
    if (s[i] != (int)(42 + i)) {
      bad++;
      printf("rank %d bcast\n", wr);
    }
  // allgatherv: rank k contributes k % 3 elements (some contribute none), placed with gaps.
  {
    std::vector<size_t> counts(n), displs(n);
    size_t at = 1;
    for (int k = 0; k < n; ++k) {
      counts[k] = static_cast<size_t>(k % 3);
      displs[k] = at;
      at += counts[k] + 2;
    }
    std::vector<int32_t> send(counts[rank] + 1), recv(at, -9);  // heap: the copy path
    for (size_t i = 0; i < counts[rank]; ++i) send[i] = wr * 10 + static_cast<int>(i);
    CK(nc_allgatherv(ctx, send.data(), counts[rank], recv.data(), counts.data(), displs.data(),
                     NC_I32, comm, nullptr, &q));
    CK(nc_wait(ctx, q));
    for (int k = 0; k < n; ++k) {
      for (size_t i = 0; i < counts[k]; ++i) {
        if (recv[displs[k] + i] != members[k] * 10 + static_cast<int>(i)) {
          bad++;
          printf("rank %d allgatherv k %d i %zu got %d\n", wr, k, i, recv[displs[k] + i]);
        }
      }
      if (recv[displs[k] + counts[k]] != -9) {
        bad++;
        printf("rank %d allgatherv wrote into a gap\n", wr);
      }
    }
  }
  // alltoallv: rank i sends (i + j) % 3 elements to rank j, in reverse order of peers.
  {
    std::vector<size_t> sc(n), sd(n), rc(n), rd(n);
    size_t sat = 0, rat = 0;
    for (int j = n - 1; j >= 0; --j) {
      sc[j] = static_cast<size_t>((rank + j) % 3);
      sd[j] = sat;
      sat += sc[j];
    }
    for (int i = 0; i < n; ++i) {
      rc[i] = static_cast<size_t>((i + rank) % 3);
      rd[i] = rat;
      rat += rc[i] + 1;
    }
    int32_t *vs, *vr;
    CK(nc_alloc(ctx, (sat + 1) * 4, (void**)&vs));
    CK(nc_alloc(ctx, (rat + 1) * 4, (void**)&vr));
    for (int j = 0; j < n; ++j)
      for (size_t i = 0; i < sc[j]; ++i)
        vs[sd[j] + i] = wr * 1000 + members[j] * 10 + static_cast<int>(i);
    CK(nc_alltoallv(ctx, vs, sc.data(), sd.data(), vr, rc.data(), rd.data(), NC_I32, comm, nullptr,
                    &q));
    CK(nc_wait(ctx, q));
    for (int i = 0; i < n; ++i)
      for (size_t e = 0; e < rc[i]; ++e)
        if (vr[rd[i] + e] != members[i] * 1000 + wr * 10 + static_cast<int>(e)) {
          bad++;
          printf("rank %d alltoallv from %d [%zu] got %d\n", wr, i, e, vr[rd[i] + e]);
        }
    nc_free(ctx, vs);
    nc_free(ctx, vr);
  }
  nc_free(ctx, s);
  nc_free(ctx, r);
  return bad;
}
int main() {
  nc_context_t* ctx;
  if (nc_init(nullptr, &ctx) != NC_OK) {
    printf("init %s\n", nc_last_error());
    return 1;
  }
  wr = nc_world_rank(ctx);
  int n = nc_world_size(ctx);
  int bad = 0;
  for (int K = 1; K <= 3; ++K) {
    nc_comm_t sub;
    int color = (K == 3 && wr == 0) ? NC_UNDEFINED : wr % K;
    // reverse order by key
    CK(nc_comm_split(ctx, NC_COMM_WORLD, color, -wr, &sub));
    if (color == NC_UNDEFINED) {
      if (sub != NC_COMM_NULL) {
        printf("rank %d expected NULL\n", wr);
        bad++;
      }
      continue;
    }
    std::vector<int> members;
    for (int r = n - 1; r >= 0; --r)
      if (r % K == color && !(K == 3 && r == 0)) members.push_back(r);
    bad += check_comm(ctx, sub, members);
    nc_comm_t d;
    CK(nc_comm_dup(ctx, sub, &d));
    bad += check_comm(ctx, d, members);
    CK(nc_comm_free(ctx, &d));
    CK(nc_comm_free(ctx, &sub));
  }
  // world still fine
  std::vector<int> all(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) all[static_cast<size_t>(r)] = r;
  bad += check_comm(ctx, NC_COMM_WORLD, all);
  if (n % 2 == 0) {
    nc_comm_t data, model;
    CK(nc_distribution(ctx, n / 2, 2, &data, &model));
    std::vector<int> dm, mm;
    for (int r = 0; r < n; ++r) {
      if (r % 2 == wr % 2) dm.push_back(r);
      if (r / 2 == wr / 2) mm.push_back(r);
    }
    bad += check_comm(ctx, data, dm);
    bad += check_comm(ctx, model, mm);
  }
  printf("rank %d/%d bad %d\n", wr, n, bad);
  nc_finalize(ctx);
  return bad ? 1 : 0;
}
