// Counts that disagree, and staging under a cap (issue 16, points 2 and 3), against running
// daemons. Exits 0 only if every rank saw what it should; every result is checked element by
// element.
//
//   hostile_counts pattern  1 rank: a 4 MiB alltoallv of a known pattern, exact (the earlier
//                           job whose bytes the attack tries to read)
//   hostile_counts attack   1 rank: alltoallv receiving 1M elements while sending 1 (the
//                           reported attack): NC_ERR_MISMATCH naming the counts, and the
//                           receive buffer untouched (none of the earlier job's bytes)
//   hostile_counts local    all ranks on one node: alltoallv, allgatherv and reduce_scatter
//                           whose counts disagree, each on its own duplicate of the world;
//                           every rank gets NC_ERR_MISMATCH naming ranks and counts, no receive
//                           buffer is written, and correct operations on the world are exact
//   hostile_counts between  2 nodes x 2 ranks: the same, but each node's ranks agree among
//                           themselves and only the other node's counts differ
//   hostile_counts cap      under --max-staging-per-job 1M: a 4 MiB-per-rank allgather fails
//                           with NC_ERR_NO_MEMORY naming the cap, and the same communicator
//                           then runs correct operations exactly
//   hostile_counts cap-uneven  nodes of 3 and 1 ranks under --max-staging 2M: an alltoall
//                           only the first node cannot stage fails on every rank of both
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "nodecomm.h"

namespace {

constexpr uint32_t kSentinel = 0x5a5a5a5au;
constexpr uint32_t kPattern = 0x0badf00du;

struct Ctx {
  nc_context_t* ctx;
  int rank;
  int size;
};

int failed(const Ctx& c, const std::string& what, const std::string& detail) {
  std::fprintf(stderr, "hostile_counts rank %d: expected %s; got: %s\n", c.rank, what.c_str(),
               detail.c_str());
  return 1;
}

bool contains(const std::string& text, const std::string& words) {
  return text.find(words) != std::string::npos;
}

uint32_t* alloc_u32(const Ctx& c, size_t n) {
  void* p = nullptr;
  if (nc_alloc(c.ctx, std::max<size_t>(n, 1) * sizeof(uint32_t), &p) != NC_OK) return nullptr;
  return static_cast<uint32_t*>(p);
}

// Posts with `post` and waits; the status, with the library's message in `message`.
template <typename Post>
nc_status_t run(const Ctx& c, std::string& message, Post post) {
  nc_request_t req = 0;
  nc_status_t s = post(&req);
  if (s == NC_OK) s = nc_wait(c.ctx, req);
  message = s == NC_OK ? "" : nc_last_error();
  return s;
}

int expect_status(const Ctx& c, nc_status_t got, nc_status_t want, const std::string& message,
                  const std::vector<std::string>& words, const char* what) {
  int bad = 0;
  if (got != want) {
    return failed(c, std::string(what) + ": " + nc_status_string(want),
                  std::string(nc_status_string(got)) + " " + message);
  }
  for (const std::string& w : words) {
    if (!contains(message, w))
      bad += failed(c, std::string(what) + ": a message with '" + w + "'", message);
  }
  return bad;
}

int expect_untouched(const Ctx& c, const uint32_t* buf, size_t n, const char* what) {
  for (size_t i = 0; i < n; ++i) {
    if (buf[i] != kSentinel) {
      return failed(c, std::string(what) + ": receive buffer untouched",
                    "element " + std::to_string(i) + " is " + std::to_string(buf[i]));
    }
  }
  return 0;
}

// Elements rank i sends rank j in the correct alltoallv.
size_t a2a_count(int i, int j) {
  return 1 + static_cast<size_t>(i) + 2 * static_cast<size_t>(j);
}
uint32_t a2a_value(int i, int j, size_t e) {
  return static_cast<uint32_t>(i * 1000003 + j * 1009 + static_cast<int>(e));
}

// A correct alltoallv and allgatherv on `comm` (ranks as in the world), checked exactly.
int exact_vector_ops(const Ctx& c, nc_comm_t comm) {
  int bad = 0;
  std::vector<size_t> sc(c.size), sd(c.size), rc(c.size), rd(c.size);
  size_t st = 0, rt = 0;
  for (int j = 0; j < c.size; ++j) {
    sc[j] = a2a_count(c.rank, j);
    sd[j] = st;
    st += sc[j];
    rc[j] = a2a_count(j, c.rank);
    rd[j] = rt;
    rt += rc[j];
  }
  uint32_t* send = alloc_u32(c, st);
  uint32_t* recv = alloc_u32(c, rt);
  if (send == nullptr || recv == nullptr) return failed(c, "arena room", nc_last_error());
  for (int j = 0; j < c.size; ++j) {
    for (size_t e = 0; e < sc[j]; ++e) send[sd[j] + e] = a2a_value(c.rank, j, e);
  }
  std::string msg;
  nc_status_t s = run(c, msg, [&](nc_request_t* r) {
    return nc_alltoallv(c.ctx, send, sc.data(), sd.data(), recv, rc.data(), rd.data(), NC_I32, comm,
                        nullptr, r);
  });
  bad += expect_status(c, s, NC_OK, msg, {}, "a correct alltoallv");
  for (int i = 0; i < c.size && bad == 0; ++i) {
    for (size_t e = 0; e < rc[i]; ++e) {
      if (recv[rd[i] + e] != a2a_value(i, c.rank, e)) {
        bad +=
            failed(c, "alltoallv exact",
                   "from rank " + std::to_string(i) + " element " + std::to_string(e) + " wrong");
        break;
      }
    }
  }
  // allgatherv: rank r contributes r + 2 elements.
  std::vector<size_t> counts(c.size), displs(c.size);
  size_t total = 0;
  for (int r = 0; r < c.size; ++r) {
    counts[r] = static_cast<size_t>(r) + 2;
    displs[r] = total;
    total += counts[r];
  }
  uint32_t* gsend = alloc_u32(c, counts[c.rank]);
  uint32_t* grecv = alloc_u32(c, total);
  for (size_t e = 0; e < counts[c.rank]; ++e) gsend[e] = a2a_value(c.rank, 99, e);
  s = run(c, msg, [&](nc_request_t* r) {
    return nc_allgatherv(c.ctx, gsend, counts[c.rank], grecv, counts.data(), displs.data(), NC_I32,
                         comm, nullptr, r);
  });
  bad += expect_status(c, s, NC_OK, msg, {}, "a correct allgatherv");
  for (int r = 0; r < c.size && bad == 0; ++r) {
    for (size_t e = 0; e < counts[r]; ++e) {
      if (grecv[displs[r] + e] != a2a_value(r, 99, e)) {
        bad += failed(c, "allgatherv exact", "from rank " + std::to_string(r) + " wrong");
        break;
      }
    }
  }
  nc_free(c.ctx, send);
  nc_free(c.ctx, recv);
  nc_free(c.ctx, gsend);
  nc_free(c.ctx, grecv);
  return bad;
}

constexpr size_t kAttackElems = size_t{1} << 20;  // 4 MiB of u32

int pattern(const Ctx& c) {
  uint32_t* send = alloc_u32(c, kAttackElems);
  uint32_t* recv = alloc_u32(c, kAttackElems);
  if (send == nullptr || recv == nullptr) return failed(c, "arena room", nc_last_error());
  for (size_t i = 0; i < kAttackElems; ++i) send[i] = kPattern;
  const size_t n = kAttackElems, zero = 0;
  std::string msg;
  const nc_status_t s = run(c, msg, [&](nc_request_t* r) {
    return nc_alltoallv(c.ctx, send, &n, &zero, recv, &n, &zero, NC_I32, NC_COMM_WORLD, nullptr, r);
  });
  int bad = expect_status(c, s, NC_OK, msg, {}, "the pattern alltoallv");
  for (size_t i = 0; i < kAttackElems && bad == 0; ++i) {
    if (recv[i] != kPattern) bad += failed(c, "the pattern delivered", "a wrong element");
  }
  return bad;
}

int attack(const Ctx& c) {
  uint32_t* send = alloc_u32(c, 1);
  uint32_t* recv = alloc_u32(c, kAttackElems);
  if (send == nullptr || recv == nullptr) return failed(c, "arena room", nc_last_error());
  send[0] = 7;
  for (size_t i = 0; i < kAttackElems; ++i) recv[i] = kSentinel;
  const size_t one = 1, many = kAttackElems, zero = 0;
  std::string msg;
  const nc_status_t s = run(c, msg, [&](nc_request_t* r) {
    return nc_alltoallv(c.ctx, send, &one, &zero, recv, &many, &zero, NC_I32, NC_COMM_WORLD,
                        nullptr, r);
  });
  int bad = expect_status(
      c, s, NC_ERR_MISMATCH, msg,
      {"alltoallv seq 1: rank 0 sends 1 elements to rank 0, rank 0 expects 1048576 from rank 0"},
      "the attack");
  size_t stale = 0;
  for (size_t i = 0; i < kAttackElems; ++i) stale += recv[i] == kPattern ? 1 : 0;
  if (stale > 0)
    bad += failed(c, "no byte of the earlier job", std::to_string(stale) + " stale elements");
  bad += expect_untouched(c, recv, kAttackElems, "the attack");
  return bad;
}

// One mismatched operation of each shape, each on its own duplicate of the world. `between`:
// the counts agree within each node (node 0 holds ranks 0 and 1) and differ only across nodes.
int mismatches(const Ctx& c, bool between) {
  int bad = 0;
  std::string msg;
  const bool far_node = c.rank >= 2;  // between: node 1
  // alltoallv: rank 0 sends rank 2 two elements more than rank 2 expects from it.
  {
    nc_comm_t comm = NC_COMM_NULL;
    if (nc_comm_dup(c.ctx, NC_COMM_WORLD, &comm) != NC_OK)
      return failed(c, "a dup", nc_last_error());
    std::vector<size_t> sc(c.size), sd(c.size), rc(c.size), rd(c.size);
    size_t st = 0, rt = 0;
    for (int j = 0; j < c.size; ++j) {
      sc[j] = a2a_count(c.rank, j) + (c.rank == 0 && j == 2 ? 2 : 0);
      sd[j] = st;
      st += sc[j];
      rc[j] = a2a_count(j, c.rank);
      rd[j] = rt;
      rt += rc[j];
    }
    uint32_t* send = alloc_u32(c, st);
    uint32_t* recv = alloc_u32(c, rt);
    for (size_t i = 0; i < st; ++i) send[i] = kPattern;
    for (size_t i = 0; i < rt; ++i) recv[i] = kSentinel;
    const nc_status_t s = run(c, msg, [&](nc_request_t* r) {
      return nc_alltoallv(c.ctx, send, sc.data(), sd.data(), recv, rc.data(), rd.data(), NC_I32,
                          comm, nullptr, r);
    });
    bad += expect_status(
        c, s, NC_ERR_MISMATCH, msg,
        between
            ? std::vector<std::string>{"mismatched alltoallv counts on comm", "seq 1 between nodes",
                                       "node 0 (ranks 0,1), node 1 "
                                       "(ranks 2,3)",
                                       far_node ? "here, node 1 (ranks 2,3) sends 18 elements "
                                                  "to ranks on other nodes and expects 26"
                                                : "here, node 0 (ranks 0,1) sends 28 elements "
                                                  "to ranks on other nodes and expects 18"}
            : std::vector<std::string>{"mismatched counts on comm",
                                       "alltoallv seq 1: rank 0 sends 7 elements to rank 2, "
                                       "rank 2 expects 5 from rank 0"},
        "mismatched alltoallv counts");
    bad += expect_untouched(c, recv, rt, "mismatched alltoallv");
  }
  // allgatherv: rank 0 sends 3 elements; between nodes, node 1's ranks expect 4 from it; on one
  // node, rank 1 sends 4 while the others expect 3 from it.
  {
    nc_comm_t comm = NC_COMM_NULL;
    if (nc_comm_dup(c.ctx, NC_COMM_WORLD, &comm) != NC_OK)
      return failed(c, "a dup", nc_last_error());
    std::vector<size_t> counts(c.size, 3), displs(c.size);
    if (between && far_node) counts[0] = 4;
    if (!between && c.rank == 1) counts[1] = 4;
    size_t total = 0;
    for (int r = 0; r < c.size; ++r) {
      displs[r] = total;
      total += counts[r];
    }
    uint32_t* send = alloc_u32(c, counts[c.rank]);
    uint32_t* recv = alloc_u32(c, total);
    for (size_t i = 0; i < counts[c.rank]; ++i) send[i] = kPattern;
    for (size_t i = 0; i < total; ++i) recv[i] = kSentinel;
    const nc_status_t s = run(c, msg, [&](nc_request_t* r) {
      return nc_allgatherv(c.ctx, send, counts[c.rank], recv, counts.data(), displs.data(), NC_I32,
                           comm, nullptr, r);
    });
    bad += expect_status(
        c, s, NC_ERR_MISMATCH, msg,
        between ? std::vector<std::string>{"mismatched allgatherv counts on comm",
                                           "node 1 (ranks 2,3) passed recv_counts other than node "
                                           "0 (ranks 0,1)'s",
                                           far_node ? "here, node 1 (ranks 2,3) sends 6 elements "
                                                      "and its recv_counts total 13"
                                                    : "here, node 0 (ranks 0,1) sends 6 elements "
                                                      "and its recv_counts total 12"}
                : std::vector<std::string>{"allgatherv seq 1: rank 1 sends 4 elements, rank 0 "
                                           "expects 3 from rank 1"},
        "mismatched allgatherv counts");
    bad += expect_untouched(c, recv, total, "mismatched allgatherv");
  }
  // reduce_scatter: the far node's ranks (between) or the last rank (one node) post count 5,
  // the others 4.
  {
    nc_comm_t comm = NC_COMM_NULL;
    if (nc_comm_dup(c.ctx, NC_COMM_WORLD, &comm) != NC_OK)
      return failed(c, "a dup", nc_last_error());
    const bool odd = between ? far_node : c.rank == c.size - 1;
    const size_t count = odd ? 5 : 4;
    uint32_t* send = alloc_u32(c, count * c.size);
    uint32_t* recv = alloc_u32(c, count);
    for (size_t i = 0; i < count * c.size; ++i) send[i] = 1;
    for (size_t i = 0; i < count; ++i) recv[i] = kSentinel;
    const nc_status_t s = run(c, msg, [&](nc_request_t* r) {
      return nc_reduce_scatter(c.ctx, send, recv, count, NC_I32, NC_SUM, comm, nullptr, r);
    });
    bad += expect_status(
        c, s, NC_ERR_MISMATCH, msg,
        between ? std::vector<std::string>{"node 0 (ranks 0,1) posted reduce_scatter i32 sum "
                                           "count 4",
                                           "node 1 (ranks 2,3) posted reduce_scatter i32 sum "
                                           "count 5"}
                : std::vector<std::string>{"rank 2 posted reduce_scatter i32 sum count 5",
                                           "rank 0 posted reduce_scatter i32 sum count 4"},
        "mismatched reduce_scatter counts");
    bad += expect_untouched(c, recv, count, "mismatched reduce_scatter");
  }
  // The world was never part of it: correct operations on it are exact.
  bad += exact_vector_ops(c, NC_COMM_WORLD);
  return bad;
}

// Under a --max-staging-per-job below size x HOSTILE_COUNTS_CAP_MIB (1 by default) MiB: an
// allgather of that many MiB per rank needs size times as much staging.
int cap(const Ctx& c) {
  const char* mib = std::getenv("HOSTILE_COUNTS_CAP_MIB");
  const size_t n = (size_t{1} << 18) * static_cast<size_t>(mib != nullptr ? std::atoi(mib) : 1);
  uint32_t* send = alloc_u32(c, n);
  uint32_t* recv = alloc_u32(c, n * c.size);
  if (send == nullptr || recv == nullptr) return failed(c, "arena room", nc_last_error());
  for (size_t i = 0; i < n; ++i) send[i] = kPattern;
  for (size_t i = 0; i < n * c.size; ++i) recv[i] = kSentinel;
  std::string msg;
  nc_status_t s = run(c, msg, [&](nc_request_t* r) {
    return nc_allgather(c.ctx, send, recv, n, NC_I32, NC_COMM_WORLD, nullptr, r);
  });
  const std::string needed = std::to_string(n * 4 * c.size);
  int bad = expect_status(c, s, NC_ERR_NO_MEMORY, msg,
                          {"out of staging memory", "allgather", "seq 1 on comm 0", needed},
                          "an allgather over the staging cap");
  bad += expect_untouched(c, recv, n * c.size, "an allgather over the staging cap");
  // Only that operation failed: the same communicator runs the next ones exactly.
  const size_t small = 16;
  s = run(c, msg, [&](nc_request_t* r) {
    for (size_t i = 0; i < small; ++i) send[i] = static_cast<uint32_t>(c.rank * 100 + i);
    return nc_allgather(c.ctx, send, recv, small, NC_I32, NC_COMM_WORLD, nullptr, r);
  });
  bad += expect_status(c, s, NC_OK, msg, {}, "a small allgather after the refusal");
  for (int r = 0; r < c.size && bad == 0; ++r) {
    for (size_t i = 0; i < small; ++i) {
      if (recv[r * small + i] != static_cast<uint32_t>(r * 100 + i)) {
        bad += failed(c, "the small allgather exact", "a wrong element");
        break;
      }
    }
  }
  bad += exact_vector_ops(c, NC_COMM_WORLD);
  return bad;
}

// Under --max-staging 2M on nodes of 3 and 1 ranks: an alltoall of 128 KiB blocks needs
// 3 MiB of staging on the first node and 1 MiB on the second. Only the first refuses, and
// every rank on both nodes gets NC_ERR_NO_MEMORY naming it; the world then runs exactly.
int cap_uneven(const Ctx& c) {
  const size_t n = size_t{1} << 15;  // u32 elements per block
  uint32_t* send = alloc_u32(c, n * c.size);
  uint32_t* recv = alloc_u32(c, n * c.size);
  if (send == nullptr || recv == nullptr) return failed(c, "arena room", nc_last_error());
  for (size_t i = 0; i < n * c.size; ++i) {
    send[i] = kPattern;
    recv[i] = kSentinel;
  }
  std::string msg;
  nc_status_t s = run(c, msg, [&](nc_request_t* r) {
    return nc_alltoall(c.ctx, send, recv, n, NC_I32, NC_COMM_WORLD, nullptr, r);
  });
  const bool refusing_node = c.rank < 3;
  int bad = expect_status(
      c, s, NC_ERR_NO_MEMORY, msg,
      refusing_node ? std::vector<std::string>{"out of staging memory: alltoall",
                                               "seq 1 on comm 0 "
                                               "(ranks 0,1,2 on node 0) needs 3145728 bytes",
                                               "the daemon's cap of 2097152 bytes (--max-staging"}
                    : std::vector<std::string>{"seq 1 on comm 0 not run, out of staging memory: "
                                               "node 0 (ranks 0,1,2) cannot stage it"},
      "an alltoall over the staging cap on one node");
  bad += expect_untouched(c, recv, n * c.size, "an alltoall refused on one node");
  bad += exact_vector_ops(c, NC_COMM_WORLD);
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: hostile_counts pattern|attack|local|between|cap|cap-uneven\n");
    return 2;
  }
  nc_init_options_t opts;
  nc_init_options_default(&opts);
  nc_context_t* ctx = nullptr;
  if (nc_init(&opts, &ctx) != NC_OK) {
    std::fprintf(stderr, "hostile_counts: nc_init: %s\n", nc_last_error());
    return 1;
  }
  const Ctx c{ctx, nc_world_rank(ctx), nc_world_size(ctx)};
  const std::string mode = argv[1];
  int bad = 0;
  if (mode == "pattern") {
    bad = pattern(c);
  } else if (mode == "attack") {
    bad = attack(c);
  } else if (mode == "local") {
    bad = mismatches(c, false);
  } else if (mode == "between") {
    if (c.size != 4) {
      std::fprintf(stderr, "hostile_counts between: needs 2 nodes x 2 ranks\n");
      return 2;
    }
    bad = mismatches(c, true);
  } else if (mode == "cap") {
    bad = cap(c);
  } else if (mode == "cap-uneven") {
    bad = cap_uneven(c);
  } else {
    std::fprintf(stderr, "hostile_counts: unknown mode %s\n", argv[1]);
    return 2;
  }
  nc_finalize(ctx);
  if (bad == 0) std::printf("hostile_counts %s: rank %d ok\n", argv[1], c.rank);
  return bad == 0 ? 0 : 1;
}
