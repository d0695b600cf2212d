// Every collective through the whole multi-node path (client library, rings, each node's real
// daemon and engine, the inter-node transport) with every node in this process, over the
// in-memory transport, on the layouts 1x4, 2x2, 3x(3,1,2) and 5x1. Each result is checked
// element by element against the reference of reference.hpp (same generator), with odd
// counts, in place and out of place, from the arena (zero copy) and from the heap (copied).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cluster.hpp"
#include "reference.hpp"

namespace nodecomm::engine_test {
namespace {

// ---- the fixture --------------------------------------------------------------------------

using Param = std::tuple<Layout, Ordering>;

class EngineTest : public ::testing::TestWithParam<Param> {
 protected:
  const Layout& layout() const { return std::get<0>(GetParam()); }
  std::function<void(daemon::DaemonConfig&)> config() const {
    const Ordering o = std::get<1>(GetParam());
    return [o](daemon::DaemonConfig& c) { apply(o, c); };
  }
  void expect_clean(const std::vector<std::string>& failures) {
    for (size_t i = 0; i < failures.size() && i < 20; ++i) ADD_FAILURE() << failures[i];
    if (failures.size() > 20) ADD_FAILURE() << failures.size() << " failures in all";
  }
};

TEST_P(EngineTest, AllreduceDtypesOpsCounts) {
  Cluster cluster(layout(), config(), max_count(std::get<1>(GetParam())));
  expect_clean(cluster.run([](Rank& r) {
    for (const Sample& s : kAllreduceSamples) {
      for (size_t count : {size_t{1}, size_t{7}, size_t{4099}}) {
        allreduce_once(r, s.dtype, s.op, count, /*in_place=*/count != 7, /*arena=*/count != 1);
      }
    }
    // Beyond the recursive-doubling threshold: the ring.
    allreduce_once(r, NC_F32, NC_SUM, 65539, true, true);
    allreduce_once(r, NC_I32, NC_MAX, 65539, false, false);
  }));
}

// f16 and bf16, which the engine widens to f32 for the reduction and rounds back once: small
// integers are exact in both, so every element has one right answer.
uint16_t to_half(float v, nc_dtype_t dtype) {
  uint32_t f = 0;
  std::memcpy(&f, &v, sizeof(f));
  if (dtype == NC_BF16) return static_cast<uint16_t>(f >> 16);  // exact: low half is zero
  // binary16 by rebiasing the exponent (127 - 15): exact for these small integers, whose
  // mantissa's low 13 bits are zero; no _Float16, which clang 14 lacks on x86.
  const uint32_t sign = (f >> 16) & 0x8000U;
  if ((f & 0x7fffffffU) == 0) return static_cast<uint16_t>(sign);
  const uint32_t exponent = ((f >> 23) & 0xffU) - 112U;
  return static_cast<uint16_t>(sign | (exponent << 10) | ((f & 0x7fffffU) >> 13));
}

TEST_P(EngineTest, AllreduceHalfPrecision) {
  Cluster cluster(layout(), config(), max_count(std::get<1>(GetParam())));
  expect_clean(cluster.run([](Rank& r) {
    for (nc_dtype_t dtype : {NC_F16, NC_BF16}) {
      for (nc_redop_t op : {NC_SUM, NC_MIN, NC_MAX}) {
        for (size_t count : {size_t{1}, size_t{7}, size_t{4099}}) {
          const bool in_place = count != 7;
          const std::string what = fmt::format("allreduce {} {} count {}{}", dt(dtype), op_name(op),
                                               count, in_place ? " in place" : "");
          Buf send(r.ctx, count * 2, true);
          Buf recv(r.ctx, count * 2, true);
          for (size_t i = 0; i < count; ++i) {
            send.as<uint16_t>()[i] = to_half(static_cast<float>(value(r.rank, i, op)), dtype);
          }
          uint16_t* out = in_place ? send.as<uint16_t>() : recv.as<uint16_t>();
          nc_request_t req = 0;
          const nc_status_t st = nc_allreduce(r.ctx, send.as<uint16_t>(), out, count, dtype, op,
                                              NC_COMM_WORLD, nullptr, &req);
          if (!wait_ok(r, st, req, what)) continue;
          check(r, what, out, count,
                [&](size_t i) { return to_half(reduced<float>(r.size, i, op), dtype); });
        }
      }
    }
  }));
}

// Many allreduces posted before any is waited for: the scheduler orders and fuses them alike
// on every node.
TEST_P(EngineTest, AllreduceManyInFlight) {
  Cluster cluster(layout(), config(), max_count(std::get<1>(GetParam())));
  expect_clean(cluster.run([](Rank& r) {
    constexpr int kOps = 24;
    std::vector<std::unique_ptr<Buf>> bufs;
    std::vector<nc_request_t> reqs(kOps, 0);
    std::vector<size_t> counts;
    for (int k = 0; k < kOps; ++k) {
      const size_t count = 1 + static_cast<size_t>(k) * 37 % 3001;
      counts.push_back(count);
      bufs.push_back(std::make_unique<Buf>(r.ctx, count * sizeof(int32_t), k % 2 == 0));
      fill(bufs.back()->as<int32_t>(), count, r.rank + k, NC_SUM);
      const nc_op_attr_t attr{k % 3, nullptr, NC_COMPRESS_NONE};
      if (nc_allreduce(r.ctx, bufs.back()->as<int32_t>(), bufs.back()->as<int32_t>(), count, NC_I32,
                       NC_SUM, NC_COMM_WORLD, &attr, &reqs[static_cast<size_t>(k)]) != NC_OK) {
        r.fail(fmt::format("posting allreduce {}: {}", k, nc_last_error()));
        return;
      }
    }
    if (nc_wait_all(r.ctx, reqs.size(), reqs.data(), nullptr) != NC_OK) {
      r.fail(fmt::format("wait_all: {}", nc_last_error()));
      return;
    }
    for (int k = 0; k < kOps; ++k) {
      check(r, fmt::format("allreduce {} of {} in flight", k, kOps), bufs[k]->as<int32_t>(),
            counts[k], [&](size_t i) {
              int32_t acc = 0;
              for (int q = 0; q < r.size; ++q) acc += static_cast<int32_t>(value(q + k, i, NC_SUM));
              return acc;
            });
    }
  }));
}

void reduce_every_root(Rank& r) {
  for (int root : {0, r.size - 1, r.size / 2}) {
    for (const Sample s : {Sample{NC_F32, NC_SUM}, Sample{NC_I64, NC_MAX}, Sample{NC_U8, NC_SUM}}) {
      for (size_t count : {size_t{7}, size_t{4099}}) {
        with_dtype(s.dtype, [&]<class T>(T) {
          const bool in_place = count == 7;
          const bool arena = s.dtype != NC_I64;
          const std::string what =
              fmt::format("reduce {} {} count {} root {}{}", dt(s.dtype), op_name(s.op), count,
                          root, in_place ? " in place" : "");
          Buf send(r.ctx, count * sizeof(T), arena);
          Buf recv(r.ctx, count * sizeof(T), arena);
          fill(send.as<T>(), count, r.rank, s.op);
          T* out = in_place && r.rank == root ? send.as<T>() : recv.as<T>();
          nc_request_t req = 0;
          const nc_status_t st = nc_reduce(r.ctx, send.as<T>(), out, count, s.dtype, s.op, root,
                                           NC_COMM_WORLD, nullptr, &req);
          if (!wait_ok(r, st, req, what) || r.rank != root) return;
          check(r, what, out, count, [&](size_t i) { return reduced<T>(r.size, i, s.op); });
        });
      }
    }
  }
}

TEST_P(EngineTest, ReduceEveryRootInAndOutOfPlace) {
  Cluster cluster(layout(), config(), max_count(std::get<1>(GetParam())));
  expect_clean(cluster.run(reduce_every_root));
}

void broadcast_every_root(Rank& r) {
  for (int root = 0; root < r.size; ++root) {
    for (size_t count : {size_t{1}, size_t{4099}}) {
      // In place (send == recv), and out of place with the root's send buffer untouched.
      const bool in_place = count == 1 || root % 2 == 1;
      const bool arena = root % 2 == 0;
      const std::string what =
          fmt::format("broadcast f64 count {} root {}{}", count, root, in_place ? " in place" : "");
      Buf data(r.ctx, count * sizeof(double), arena);
      Buf send(r.ctx, count * sizeof(double), arena);
      double* src = in_place ? data.as<double>() : send.as<double>();
      std::fill_n(data.as<double>(), count, -1000.0);
      if (r.rank == root) fill(src, count, root, NC_SUM);
      nc_request_t req = 0;
      const nc_status_t st = nc_broadcast(r.ctx, src, data.as<double>(), count, NC_F64, root,
                                          NC_COMM_WORLD, nullptr, &req);
      if (!wait_ok(r, st, req, what)) continue;
      check(r, what, data.as<double>(), count,
            [&](size_t i) { return static_cast<double>(value(root, i, NC_SUM)); });
      if (!in_place && r.rank == root) {
        check(r, what + " (send buffer)", src, count,
              [&](size_t i) { return static_cast<double>(value(root, i, NC_SUM)); });
      }
    }
  }
}

TEST_P(EngineTest, BroadcastEveryRoot) {
  Cluster cluster(layout(), config(), max_count(std::get<1>(GetParam())));
  expect_clean(cluster.run(broadcast_every_root));
}

void reduce_scatter_counts(Rank& r) {
  for (const Sample s : {Sample{NC_F32, NC_SUM}, Sample{NC_I32, NC_MIN}}) {
    for (size_t count : {size_t{1}, size_t{7}, size_t{1025}}) {
      for (bool in_place : {false, true}) {
        with_dtype(s.dtype, [&]<class T>(T) {
          const size_t total = count * static_cast<size_t>(r.size);
          const std::string what = fmt::format("reduce_scatter {} {} count {}{}", dt(s.dtype),
                                               op_name(s.op), count, in_place ? " in place" : "");
          Buf send(r.ctx, total * sizeof(T), in_place);
          Buf recv(r.ctx, count * sizeof(T), in_place);
          fill(send.as<T>(), total, r.rank, s.op);
          const size_t mine = static_cast<size_t>(r.rank) * count;
          T* out = in_place ? send.as<T>() + mine : recv.as<T>();
          nc_request_t req = 0;
          const nc_status_t st = nc_reduce_scatter(r.ctx, send.as<T>(), out, count, s.dtype, s.op,
                                                   NC_COMM_WORLD, nullptr, &req);
          if (!wait_ok(r, st, req, what)) return;
          check(r, what, out, count, [&](size_t i) { return reduced<T>(r.size, mine + i, s.op); });
        });
      }
    }
  }
}

TEST_P(EngineTest, ReduceScatter) {
  Cluster cluster(layout(), config(), max_count(std::get<1>(GetParam())));
  expect_clean(cluster.run(reduce_scatter_counts));
}

void allgather_and_allgatherv(Rank& r) {
  const auto n = static_cast<size_t>(r.size);
  for (size_t count : {size_t{1}, size_t{7}, size_t{1025}}) {
    for (bool in_place : {false, true}) {
      const std::string what =
          fmt::format("allgather i32 count {}{}", count, in_place ? " in place" : "");
      Buf recv(r.ctx, count * n * sizeof(int32_t), !in_place);
      Buf send(r.ctx, count * sizeof(int32_t), true);
      int32_t* src =
          in_place ? recv.as<int32_t>() + static_cast<size_t>(r.rank) * count : send.as<int32_t>();
      fill(src, count, r.rank, NC_SUM);
      nc_request_t req = 0;
      const nc_status_t st =
          nc_allgather(r.ctx, src, recv.as<int32_t>(), count, NC_I32, NC_COMM_WORLD, nullptr, &req);
      if (!wait_ok(r, st, req, what)) continue;
      check(r, what, recv.as<int32_t>(), count * n, [&](size_t i) {
        return static_cast<int32_t>(value(static_cast<int>(i / count), i % count, NC_SUM));
      });
    }
  }
  // Uneven counts (one rank contributes nothing) at displacements with gaps.
  std::vector<size_t> counts(n);
  std::vector<size_t> displs(n);
  size_t end = 0;
  for (size_t q = 0; q < n; ++q) {
    counts[q] = q == 1 ? 0 : q * 5 + 3;
    displs[q] = end + 2;
    end = displs[q] + counts[q];
  }
  for (bool arena : {true, false}) {
    const std::string what = fmt::format("allgatherv u8 {}", arena ? "arena" : "heap");
    Buf send(r.ctx, counts[static_cast<size_t>(r.rank)], arena);
    Buf recv(r.ctx, end, arena);
    fill(send.as<uint8_t>(), counts[static_cast<size_t>(r.rank)], r.rank, NC_SUM);
    std::memset(recv.as<uint8_t>(), 0x5a, end);
    nc_request_t req = 0;
    const nc_status_t st = nc_allgatherv(
        r.ctx, send.as<uint8_t>(), counts[static_cast<size_t>(r.rank)], recv.as<uint8_t>(),
        counts.data(), displs.data(), NC_U8, NC_COMM_WORLD, nullptr, &req);
    if (!wait_ok(r, st, req, what)) continue;
    for (size_t q = 0; q < n; ++q) {
      check(r, fmt::format("{} block of rank {}", what, q), recv.as<uint8_t>() + displs[q],
            counts[q],
            [&](size_t i) { return static_cast<uint8_t>(value(static_cast<int>(q), i, NC_SUM)); });
    }
  }
}

// reduce_scatter and reduce in f16/bf16 (widened to f32 for the reduction and the wire,
// rounded once) and avg (a sum on the wire, one division at the end), in and out of place.
void reductions_half_and_avg(Rank& r) {
  const auto n = static_cast<size_t>(r.size);
  for (size_t count : {size_t{7}, size_t{1029}}) {
    for (bool in_place : {false, true}) {
      const std::string where = fmt::format("count {}{}", count, in_place ? " in place" : "");
      for (nc_dtype_t dtype : {NC_F16, NC_BF16}) {
        for (nc_redop_t op : {NC_SUM, NC_MAX}) {
          const std::string what =
              fmt::format("reduce_scatter {} {} {}", dt(dtype), op_name(op), where);
          Buf send(r.ctx, count * n * 2, true);
          Buf recv(r.ctx, count * 2, true);
          for (size_t i = 0; i < count * n; ++i) {
            send.as<uint16_t>()[i] = to_half(static_cast<float>(value(r.rank, i, op)), dtype);
          }
          const size_t mine = static_cast<size_t>(r.rank) * count;
          uint16_t* out = in_place ? send.as<uint16_t>() + mine : recv.as<uint16_t>();
          nc_request_t req = 0;
          nc_status_t st = nc_reduce_scatter(r.ctx, send.as<uint16_t>(), out, count, dtype, op,
                                             NC_COMM_WORLD, nullptr, &req);
          if (wait_ok(r, st, req, what)) {
            check(r, what, out, count,
                  [&](size_t i) { return to_half(reduced<float>(r.size, mine + i, op), dtype); });
          }
          const int root = r.size - 1;
          const std::string rwhat =
              fmt::format("reduce {} {} {} root {}", dt(dtype), op_name(op), where, root);
          Buf rsend(r.ctx, count * 2, true);
          for (size_t i = 0; i < count; ++i) {
            rsend.as<uint16_t>()[i] = to_half(static_cast<float>(value(r.rank, i, op)), dtype);
          }
          uint16_t* rout = in_place ? rsend.as<uint16_t>() : recv.as<uint16_t>();
          st = nc_reduce(r.ctx, rsend.as<uint16_t>(), rout, count, dtype, op, root, NC_COMM_WORLD,
                         nullptr, &req);
          if (wait_ok(r, st, req, rwhat) && r.rank == root) {
            check(r, rwhat, rout, count,
                  [&](size_t i) { return to_half(reduced<float>(r.size, i, op), dtype); });
          }
        }
      }
      for (nc_dtype_t dtype : {NC_F32, NC_F64}) {
        with_dtype(dtype, [&]<class T>(T) {
          const std::string what = fmt::format("reduce_scatter {} avg {}", dt(dtype), where);
          Buf send(r.ctx, count * n * sizeof(T), true);
          Buf recv(r.ctx, count * sizeof(T), true);
          fill(send.as<T>(), count * n, r.rank, NC_SUM);
          const size_t mine = static_cast<size_t>(r.rank) * count;
          T* out = in_place ? send.as<T>() + mine : recv.as<T>();
          const auto avg = [&](size_t i) {
            return reduced<T>(r.size, i, NC_SUM) / static_cast<T>(r.size);
          };
          nc_request_t req = 0;
          nc_status_t st = nc_reduce_scatter(r.ctx, send.as<T>(), out, count, dtype, NC_AVG,
                                             NC_COMM_WORLD, nullptr, &req);
          if (wait_ok(r, st, req, what)) {
            check(r, what, out, count, [&](size_t i) { return avg(mine + i); });
          }
          const std::string rwhat = fmt::format("reduce {} avg {} root 1", dt(dtype), where);
          Buf rsend(r.ctx, count * sizeof(T), true);
          fill(rsend.as<T>(), count, r.rank, NC_SUM);
          T* rout = in_place ? rsend.as<T>() : recv.as<T>();
          const int root = std::min(1, r.size - 1);
          st = nc_reduce(r.ctx, rsend.as<T>(), rout, count, dtype, NC_AVG, root, NC_COMM_WORLD,
                         nullptr, &req);
          if (wait_ok(r, st, req, rwhat) && r.rank == root) check(r, rwhat, rout, count, avg);
        });
      }
    }
  }
}

TEST_P(EngineTest, ReductionsHalfPrecisionAndAvg) {
  Cluster cluster(layout(), config(), max_count(std::get<1>(GetParam())));
  expect_clean(cluster.run(reductions_half_and_avg));
}

TEST_P(EngineTest, AllgatherAndAllgatherv) {
  Cluster cluster(layout(), config(), max_count(std::get<1>(GetParam())));
  expect_clean(cluster.run(allgather_and_allgatherv));
}

TEST_P(EngineTest, GatherAndScatterEveryRoot) {
  Cluster cluster(layout(), config(), max_count(std::get<1>(GetParam())));
  expect_clean(cluster.run([](Rank& r) {
    const auto n = static_cast<size_t>(r.size);
    for (int root : {0, r.size - 1, r.size / 2}) {
      for (size_t count : {size_t{7}, size_t{1025}}) {
        for (bool in_place : {false, true}) {
          const bool at_root = r.rank == root;
          const auto root_off = static_cast<size_t>(root) * count;
          {
            const std::string what = fmt::format("gather f32 count {} root {}{}", count, root,
                                                 in_place ? " in place" : "");
            Buf all(r.ctx, count * n * sizeof(float), !in_place);
            Buf send(r.ctx, count * sizeof(float), !in_place);
            float* src = in_place && at_root ? all.as<float>() + root_off : send.as<float>();
            fill(src, count, r.rank, NC_SUM);
            nc_request_t req = 0;
            const nc_status_t st = nc_gather(r.ctx, src, at_root ? all.as<float>() : nullptr, count,
                                             NC_F32, root, NC_COMM_WORLD, nullptr, &req);
            if (wait_ok(r, st, req, what) && at_root) {
              check(r, what, all.as<float>(), count * n, [&](size_t i) {
                return static_cast<float>(value(static_cast<int>(i / count), i % count, NC_SUM));
              });
            }
          }
          {
            const std::string what = fmt::format("scatter i64 count {} root {}{}", count, root,
                                                 in_place ? " in place" : "");
            Buf all(r.ctx, count * n * sizeof(int64_t), in_place);
            Buf recv(r.ctx, count * sizeof(int64_t), in_place);
            if (at_root) fill(all.as<int64_t>(), count * n, root, NC_MIN);
            int64_t* dst = in_place && at_root ? all.as<int64_t>() + root_off : recv.as<int64_t>();
            nc_request_t req = 0;
            const nc_status_t st = nc_scatter(r.ctx, at_root ? all.as<int64_t>() : nullptr, dst,
                                              count, NC_I64, root, NC_COMM_WORLD, nullptr, &req);
            if (wait_ok(r, st, req, what)) {
              const size_t first = static_cast<size_t>(r.rank) * count;
              check(r, what, dst, count, [&](size_t i) { return value(root, first + i, NC_MIN); });
            }
          }
        }
      }
    }
  }));
}

TEST_P(EngineTest, AlltoallAndAlltoallv) {
  Cluster cluster(layout(), config(), max_count(std::get<1>(GetParam())));
  expect_clean(cluster.run([](Rank& r) {
    const auto n = static_cast<size_t>(r.size);
    const auto me = static_cast<size_t>(r.rank);
    // Block j of rank i's send: value(i, j * 100000 + k).
    for (size_t count : {size_t{1}, size_t{3}, size_t{1025}}) {
      for (bool arena : {true, false}) {
        const std::string what =
            fmt::format("alltoall i32 count {} {}", count, arena ? "arena" : "heap");
        Buf send(r.ctx, count * n * sizeof(int32_t), arena);
        Buf recv(r.ctx, count * n * sizeof(int32_t), arena);
        for (size_t j = 0; j < n; ++j) {
          for (size_t k = 0; k < count; ++k) {
            send.as<int32_t>()[j * count + k] =
                static_cast<int32_t>(value(r.rank, j * 100000 + k, NC_SUM));
          }
        }
        nc_request_t req = 0;
        const nc_status_t st = nc_alltoall(r.ctx, send.as<int32_t>(), recv.as<int32_t>(), count,
                                           NC_I32, NC_COMM_WORLD, nullptr, &req);
        if (!wait_ok(r, st, req, what)) continue;
        check(r, what, recv.as<int32_t>(), count * n, [&](size_t x) {
          return static_cast<int32_t>(
              value(static_cast<int>(x / count), me * 100000 + x % count, NC_SUM));
        });
      }
    }
    // Rank i sends (i + j) % 4 elements to rank j (some zero), packed; receives likewise.
    const auto amount = [](size_t from, size_t to) { return (from + 2 * to) % 4; };
    std::vector<size_t> scounts(n), sdispls(n), rcounts(n), rdispls(n);
    size_t sent = 0;
    size_t got = 0;
    for (size_t j = 0; j < n; ++j) {
      scounts[j] = amount(me, j);
      sdispls[j] = sent;
      sent += scounts[j];
      rcounts[j] = amount(j, me);
      rdispls[j] = got + 1;  // a gap before each block
      got = rdispls[j] + rcounts[j];
    }
    Buf send(r.ctx, std::max<size_t>(sent, 1) * sizeof(double), true);
    Buf recv(r.ctx, std::max<size_t>(got, 1) * sizeof(double), true);
    for (size_t j = 0; j < n; ++j) {
      for (size_t k = 0; k < scounts[j]; ++k) {
        send.as<double>()[sdispls[j] + k] = static_cast<double>(value(r.rank, j * 100 + k, NC_SUM));
      }
    }
    nc_request_t req = 0;
    const nc_status_t st =
        nc_alltoallv(r.ctx, send.as<double>(), scounts.data(), sdispls.data(), recv.as<double>(),
                     rcounts.data(), rdispls.data(), NC_F64, NC_COMM_WORLD, nullptr, &req);
    if (!wait_ok(r, st, req, "alltoallv f64")) return;
    for (size_t j = 0; j < n; ++j) {
      check(r, fmt::format("alltoallv f64 block from rank {}", j), recv.as<double>() + rdispls[j],
            rcounts[j], [&](size_t k) {
              return static_cast<double>(value(static_cast<int>(j), me * 100 + k, NC_SUM));
            });
    }
  }));
}

// In one process the barrier's promise can be checked directly: no rank leaves round k before
// every rank has entered it.
TEST_P(EngineTest, BarrierHoldsEveryRank) {
  Cluster cluster(layout(), config(), max_count(std::get<1>(GetParam())));
  std::atomic<int> arrived{0};
  expect_clean(cluster.run([&](Rank& r) {
    for (int round = 1; round <= 5; ++round) {
      // acq_rel: the count read after the barrier must include every earlier arrival.
      arrived.fetch_add(1, std::memory_order_acq_rel);
      nc_request_t req = 0;
      const nc_status_t st = nc_barrier(r.ctx, NC_COMM_WORLD, nullptr, &req);
      if (!wait_ok(r, st, req, fmt::format("barrier {}", round))) return;
      const int seen = arrived.load(std::memory_order_acquire);
      if (seen < round * r.size) {
        r.fail(fmt::format("left barrier {} after only {} of {} arrivals", round, seen,
                           round * r.size));
      }
      // A second barrier keeps the next round's arrivals from racing this round's check.
      const nc_status_t st2 = nc_barrier(r.ctx, NC_COMM_WORLD, nullptr, &req);
      if (!wait_ok(r, st2, req, fmt::format("barrier {}b", round))) return;
    }
  }));
}

// comm_check's set on a communicator whose members (world ranks, in communicator order) are
// known: allreduce, allgather, allgatherv, alltoall, alltoallv, reduce_scatter, gather and
// scatter (root: the last member), broadcast (root: the first); i32 data from the members'
// world ranks, so a misplaced member shows.
void collectives_on(Rank& r, nc_comm_t comm, const std::vector<int>& members,
                    const std::string& name) {
  const size_t n = members.size();
  const auto me =
      static_cast<size_t>(std::find(members.begin(), members.end(), r.rank) - members.begin());
  const auto world = [&](size_t k) { return members[k]; };
  constexpr size_t c = 5;
  const auto what = [&](const char* op) { return fmt::format("{} on {}", op, name); };
  Buf send(r.ctx, c * n * sizeof(int32_t), true);
  Buf recv(r.ctx, c * n * sizeof(int32_t), true);
  int32_t* s = send.as<int32_t>();
  int32_t* o = recv.as<int32_t>();
  nc_request_t req = 0;
  // Reads req when called: after its argument, the posting call, has set it.
  const auto done = [&](nc_status_t posted, const std::string& w) {
    return wait_ok(r, posted, req, w);
  };
  allreduce_once(r, NC_I32, NC_SUM, 4099, true, true, comm, members);
  fill(s, c * n, r.rank, NC_SUM);  // allgatherv below sends up to n elements
  if (done(nc_allgather(r.ctx, s, o, c, NC_I32, comm, nullptr, &req), what("allgather"))) {
    check(r, what("allgather"), o, c * n,
          [&](size_t i) { return static_cast<int32_t>(value(world(i / c), i % c, NC_SUM)); });
  }
  // Member k contributes k + 1 elements, packed.
  std::vector<size_t> counts(n);
  std::vector<size_t> displs(n);
  for (size_t k = 0, at = 0; k < n; at += counts[k], ++k) {
    counts[k] = k + 1;
    displs[k] = at;
  }
  if (done(nc_allgatherv(r.ctx, s, counts[me], o, counts.data(), displs.data(), NC_I32, comm,
                         nullptr, &req),
           what("allgatherv"))) {
    for (size_t k = 0; k < n; ++k) {
      check(r, what("allgatherv"), o + displs[k], counts[k],
            [&](size_t i) { return static_cast<int32_t>(value(world(k), i, NC_SUM)); });
    }
  }
  // Block j of member k's send: value(k's world rank, j * 1000 + i).
  for (size_t j = 0; j < n; ++j) {
    for (size_t i = 0; i < c; ++i)
      s[j * c + i] = static_cast<int32_t>(value(r.rank, j * 1000 + i, NC_SUM));
  }
  if (done(nc_alltoall(r.ctx, s, o, c, NC_I32, comm, nullptr, &req), what("alltoall"))) {
    check(r, what("alltoall"), o, c * n, [&](size_t x) {
      return static_cast<int32_t>(value(world(x / c), me * 1000 + x % c, NC_SUM));
    });
  }
  // alltoallv: c elements to every member, so the same layout with counts and displacements.
  std::vector<size_t> each(n, c);
  std::vector<size_t> at(n);
  for (size_t j = 0; j < n; ++j) at[j] = j * c;
  if (done(nc_alltoallv(r.ctx, s, each.data(), at.data(), o, each.data(), at.data(), NC_I32, comm,
                        nullptr, &req),
           what("alltoallv"))) {
    check(r, what("alltoallv"), o, c * n, [&](size_t x) {
      return static_cast<int32_t>(value(world(x / c), me * 1000 + x % c, NC_SUM));
    });
  }
  fill(s, c * n, r.rank, NC_SUM);
  if (done(nc_reduce_scatter(r.ctx, s, o, c, NC_I32, NC_SUM, comm, nullptr, &req),
           what("reduce_scatter"))) {
    check(r, what("reduce_scatter"), o, c,
          [&](size_t i) { return reduced<int32_t>(0, me * c + i, NC_SUM, members); });
  }
  const size_t last = n - 1;
  fill(s, c, r.rank, NC_SUM);
  if (done(nc_gather(r.ctx, s, me == last ? o : nullptr, c, NC_I32, static_cast<int>(last), comm,
                     nullptr, &req),
           what("gather")) &&
      me == last) {
    check(r, what("gather"), o, c * n,
          [&](size_t i) { return static_cast<int32_t>(value(world(i / c), i % c, NC_SUM)); });
  }
  if (me == last) fill(s, c * n, 500, NC_SUM);
  if (done(nc_scatter(r.ctx, me == last ? s : nullptr, o, c, NC_I32, static_cast<int>(last), comm,
                      nullptr, &req),
           what("scatter"))) {
    check(r, what("scatter"), o, c,
          [&](size_t i) { return static_cast<int32_t>(value(500, me * c + i, NC_SUM)); });
  }
  fill(o, c, me == 0 ? 600 : 1, NC_SUM);
  if (done(nc_broadcast(r.ctx, o, o, c, NC_I32, 0, comm, nullptr, &req), what("broadcast"))) {
    check(r, what("broadcast"), o, c,
          [&](size_t i) { return static_cast<int32_t>(value(600, i, NC_SUM)); });
  }
}

// Split (two colors by parity, keys reversing the order, rank 0 opting out), dup,
// nc_distribution, and collectives on the new communicators, whose node groups span some nodes or
// all.
TEST_P(EngineTest, CommSplitAndDup) {
  Cluster cluster(layout(), config(), max_count(std::get<1>(GetParam())));
  expect_clean(cluster.run([](Rank& r) {
    const int color = r.rank == 0 && r.size > 2 ? NC_UNDEFINED : r.rank % 2;
    nc_comm_t comm = NC_COMM_NULL;
    if (nc_comm_split(r.ctx, NC_COMM_WORLD, color, -r.rank, &comm) != NC_OK) {
      r.fail(fmt::format("split: {}", nc_last_error()));
      return;
    }
    if (color == NC_UNDEFINED) {
      if (comm != NC_COMM_NULL) r.fail("opted out of the split but got a communicator");
    } else {
      // Members by descending world rank (the key), excluding an opted-out rank 0.
      std::vector<int> members;
      for (int q = r.size - 1; q >= 0; --q) {
        if (q % 2 == color && !(q == 0 && r.size > 2)) members.push_back(q);
      }
      int crank = -1;
      int csize = -1;
      nc_comm_rank(r.ctx, comm, &crank);
      nc_comm_size(r.ctx, comm, &csize);
      const auto pos = std::find(members.begin(), members.end(), r.rank) - members.begin();
      if (csize != static_cast<int>(members.size()) || crank != pos) {
        r.fail(fmt::format("split comm rank {} of {}, expected {} of {}", crank, csize, pos,
                           members.size()));
      }
      collectives_on(r, comm, members, "the split communicator");
      allreduce_once(r, NC_F32, NC_MAX, 7, false, false, comm, members);
      // Broadcast from the sub-communicator's last rank.
      const int root = csize - 1;
      Buf data(r.ctx, 33 * sizeof(int64_t), true);
      fill(data.as<int64_t>(), 33, crank == root ? 77 : 3, NC_SUM);
      nc_request_t req = 0;
      const nc_status_t st = nc_broadcast(r.ctx, data.as<int64_t>(), data.as<int64_t>(), 33, NC_I64,
                                          root, comm, nullptr, &req);
      if (wait_ok(r, st, req, "broadcast on split comm")) {
        check(r, "broadcast on split comm", data.as<int64_t>(), 33,
              [](size_t i) { return value(77, i, NC_SUM); });
      }
      if (nc_comm_free(r.ctx, &comm) != NC_OK) r.fail(fmt::format("free: {}", nc_last_error()));
    }
    nc_comm_t dup = NC_COMM_NULL;
    if (nc_comm_dup(r.ctx, NC_COMM_WORLD, &dup) != NC_OK) {
      r.fail(fmt::format("dup: {}", nc_last_error()));
      return;
    }
    std::vector<int> everyone(static_cast<size_t>(r.size));
    for (int q = 0; q < r.size; ++q) everyone[static_cast<size_t>(q)] = q;
    collectives_on(r, dup, everyone, "the duplicated world");
    allreduce_once(r, NC_F64, NC_SUM, 1025, false, true, dup);
    nc_comm_free(r.ctx, &dup);
    // MLSL's distribution: model groups of 2 consecutive ranks (1 on odd sizes), data groups
    // across them.
    const int model_parts = r.size % 2 == 0 ? 2 : 1;
    nc_comm_t data = NC_COMM_NULL;
    nc_comm_t model = NC_COMM_NULL;
    if (nc_distribution(r.ctx, r.size / model_parts, model_parts, &data, &model) != NC_OK) {
      r.fail(fmt::format("distribution: {}", nc_last_error()));
      return;
    }
    std::vector<int> data_members;
    std::vector<int> model_members;
    for (int q = 0; q < r.size; ++q) {
      if (q % model_parts == r.rank % model_parts) data_members.push_back(q);
      if (q / model_parts == r.rank / model_parts) model_members.push_back(q);
    }
    collectives_on(r, data, data_members, "the data group");
    collectives_on(r, model, model_members, "the model group");
    allreduce_once(r, NC_F32, NC_MAX, 9, false, true, model, model_members);
    nc_comm_free(r.ctx, &data);
    nc_comm_free(r.ctx, &model);
    // The world still works after the communicators are gone.
    allreduce_once(r, NC_I64, NC_MIN, 13, true, true);
  }));
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return std::get<0>(info.param).name() + "_" + ordering_name(std::get<1>(info.param));
}

// One node, on both single-node transports (the loopback and the in-memory one with one
// node): nothing crosses the network, so the ordering variants would only repeat the test.
INSTANTIATE_TEST_SUITE_P(OneNode, EngineTest,
                         ::testing::Combine(::testing::Values(Layout{{4}, true}, Layout{{4}}),
                                            ::testing::Values(Ordering::kNegotiated)),
                         param_name);
INSTANTIATE_TEST_SUITE_P(
    Nodes, EngineTest,
    ::testing::Combine(::testing::Values(Layout{{2, 2}}, Layout{{3, 1, 2}},
                                         Layout{{1, 1, 1, 1, 1}}),
                       ::testing::Values(Ordering::kNegotiated, Ordering::kChunked,
                                         Ordering::kSequence, Ordering::kSmallCalls,
                                         Ordering::kCombined)),
    param_name);

// reduce_scatter, allgather(v), broadcast and reduce with each inter-node algorithm forced:
// ours (ring and chain, in slices of 4 KiB so that the test sizes pipeline) and the
// transport's native collectives, under both ordering policies, on even and uneven layouts.
using AlgorithmParam = std::tuple<Layout, Ordering, daemon::CollectiveAlgorithmKind>;

class CollectiveAlgorithmTest : public ::testing::TestWithParam<AlgorithmParam> {
 protected:
  void run(const std::function<void(Rank&)>& body) {
    // Named copies, not structured bindings: clang before 16 cannot capture those.
    const Ordering ordering = std::get<1>(GetParam());
    const daemon::CollectiveAlgorithmKind kind = std::get<2>(GetParam());
    Cluster cluster(
        std::get<0>(GetParam()),
        [ordering, kind](daemon::DaemonConfig& c) {
          apply(ordering, c);
          c.tuning.collectives = kind;
          c.tuning.chunk_bytes = 4096;
        },
        max_count(ordering));
    const std::vector<std::string> failures = cluster.run(body);
    for (size_t i = 0; i < failures.size() && i < 20; ++i) ADD_FAILURE() << failures[i];
    if (failures.size() > 20) ADD_FAILURE() << failures.size() << " failures in all";
  }
};

TEST_P(CollectiveAlgorithmTest, Reduce) {
  run(reduce_every_root);
}
TEST_P(CollectiveAlgorithmTest, Broadcast) {
  run(broadcast_every_root);
}
TEST_P(CollectiveAlgorithmTest, ReduceScatter) {
  run(reduce_scatter_counts);
}
TEST_P(CollectiveAlgorithmTest, Allgather) {
  run(allgather_and_allgatherv);
}
TEST_P(CollectiveAlgorithmTest, HalfPrecisionAndAvg) {
  run(reductions_half_and_avg);
}

std::string algorithm_param_name(const ::testing::TestParamInfo<AlgorithmParam>& info) {
  return std::get<0>(info.param).name() + "_" + ordering_name(std::get<1>(info.param)) + "_" +
         daemon::collective_algorithm_name(std::get<2>(info.param));
}

INSTANTIATE_TEST_SUITE_P(
    Nodes, CollectiveAlgorithmTest,
    ::testing::Combine(::testing::Values(Layout{{2, 2}}, Layout{{3, 1, 2}},
                                         Layout{{1, 1, 1, 1, 1}}),
                       ::testing::Values(Ordering::kNegotiated, Ordering::kSequence),
                       ::testing::Values(daemon::CollectiveAlgorithmKind::kPipelined,
                                         daemon::CollectiveAlgorithmKind::kMpi)),
    algorithm_param_name);

}  // namespace
}  // namespace nodecomm::engine_test
