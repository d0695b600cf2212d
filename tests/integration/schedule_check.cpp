// Integration check for the daemon's scheduler, run under nodecomm-launch. Each rank posts
// batches of allreduces without waiting in between (mixed sizes, some larger than a scheduling
// chunk, mixed dtypes and ops, in place and out of place, random priorities), so the daemons
// reorder, chunk and fuse them; then every element is compared with a reference computed here.
// With --compress it checks the wire compression error bounds, that every rank received the
// identical bits, and (int8) that error feedback keeps the accumulated sum on track.
//
// With --skewed-urgent N it checks that holding (SchedulerTuning::hold_us) cannot deadlock: node
// 0's ranks post an urgent allreduce while a big one is on the network, so their daemon holds
// the big one's units, but the other nodes' ranks post the urgent one only after the big one
// has completed; the big one must still complete, and both results must be right.
//
//   schedule_check [--batches 4] [--per-batch 40] [--compress none|bf16|f16|int8]
//                  [--skewed-urgent N]
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "nodecomm.hpp"

namespace {

int64_t pattern(int rank, uint64_t op_index, uint64_t i) {
  return static_cast<int64_t>((static_cast<uint64_t>(rank) * 7919 + op_index * 31 + i * 104729) %
                              61) -
         30;
}

struct Planned {
  nc_dtype_t dtype;
  nc_redop_t op;
  uint64_t count;
  bool in_place;
  int32_t priority;
  void* send = nullptr;
  void* recv = nullptr;
  nc_request_t req = 0;
};

template <class T>
int verify(const Planned& p, uint64_t index, int size, int rank) {
  const T* out = static_cast<const T*>(p.recv);
  int wrong = 0;
  for (uint64_t i = 0; i < p.count; ++i) {
    int64_t acc = pattern(0, index, i);
    for (int r = 1; r < size; ++r) {
      const int64_t v = pattern(r, index, i);
      if (p.op == NC_SUM || p.op == NC_AVG) acc += v;
      if (p.op == NC_MAX) acc = std::max(acc, v);
    }
    const double want = p.op == NC_AVG ? static_cast<double>(acc) / size : static_cast<double>(acc);
    const double got = static_cast<double>(out[i]);
    const double tol = p.op == NC_AVG ? 1e-5 * (1 + std::fabs(want)) : 0;
    if (std::fabs(got - want) > tol) {
      if (wrong < 3) {
        std::fprintf(stderr,
                     "schedule_check: rank %d op %" PRIu64 " (%s %s count %" PRIu64
                     " priority %d%s) element %" PRIu64 ": got %g, expected %g\n",
                     rank, index, nc_dtype_name(p.dtype), nc_redop_name(p.op), p.count, p.priority,
                     p.in_place ? " in place" : "", i, got, want);
      }
      ++wrong;
    }
  }
  return wrong;
}

template <class T>
void fill(const Planned& p, uint64_t index, int rank) {
  T* in = static_cast<T*>(p.send);
  for (uint64_t i = 0; i < p.count; ++i) in[i] = static_cast<T>(pattern(rank, index, i));
  if (!p.in_place) {
    T* out = static_cast<T*>(p.recv);
    for (uint64_t i = 0; i < p.count; ++i) out[i] = static_cast<T>(-99);
  }
}

int run_batches(nodecomm::Context& ctx, int batches, int per_batch) {
  const int rank = ctx.world_rank();
  const int size = ctx.world_size();
  // Same seed everywhere: every rank plans the same operations.
  std::mt19937_64 rng(12345);
  const uint64_t counts[] = {1, 7, 100, 1023, 4099, 65539, 300007};
  int wrong = 0;
  uint64_t index = 0;
  for (int b = 0; b < batches; ++b) {
    std::vector<Planned> plan;
    for (int k = 0; k < per_batch; ++k) {
      Planned p{};
      const int kind = static_cast<int>(rng() % 4);
      p.dtype = kind == 0 ? NC_F32 : kind == 1 ? NC_F64 : kind == 2 ? NC_I32 : NC_F32;
      p.op = kind == 3 ? NC_AVG : (rng() % 2 == 0 ? NC_SUM : NC_MAX);
      p.count = counts[rng() % (k % 8 == 0 ? 7 : 5)];  // some exceed a scheduling chunk
      p.in_place = rng() % 3 == 0;
      p.priority = static_cast<int32_t>(rng() % 5);
      const size_t bytes = p.count * nc_dtype_size(p.dtype);
      nodecomm::check(nc_alloc(ctx.handle(), bytes, &p.send));
      if (p.in_place) {
        p.recv = p.send;
      } else {
        nodecomm::check(nc_alloc(ctx.handle(), bytes, &p.recv));
      }
      plan.push_back(p);
    }
    for (size_t k = 0; k < plan.size(); ++k) {
      Planned& p = plan[k];
      const uint64_t id = index + k;
      if (p.dtype == NC_F32) fill<float>(p, id, rank);
      if (p.dtype == NC_F64) fill<double>(p, id, rank);
      if (p.dtype == NC_I32) fill<int32_t>(p, id, rank);
      const std::string name = "sched." + std::to_string(id);
      const nc_op_attr_t attr{p.priority, name.c_str(), NC_COMPRESS_NONE};
      nodecomm::check(nc_allreduce(ctx.handle(), p.send, p.recv, p.count, p.dtype, p.op,
                                   NC_COMM_WORLD, &attr, &p.req));
    }
    for (size_t k = 0; k < plan.size(); ++k) {
      Planned& p = plan[k];
      nodecomm::check(nc_wait(ctx.handle(), p.req));
      const uint64_t id = index + k;
      if (p.dtype == NC_F32) wrong += verify<float>(p, id, size, rank);
      if (p.dtype == NC_F64) wrong += verify<double>(p, id, size, rank);
      if (p.dtype == NC_I32) wrong += verify<int32_t>(p, id, size, rank);
      nodecomm::check(nc_free(ctx.handle(), p.send));
      if (!p.in_place) nodecomm::check(nc_free(ctx.handle(), p.recv));
    }
    index += plan.size();
  }
  std::printf("schedule_check: rank %d: %" PRIu64 " allreduces in %d batches, %d wrong\n", rank,
              index, batches, wrong);
  return wrong;
}

int run_skewed_urgent(nodecomm::Context& ctx, int rounds) {
  const int rank = ctx.world_rank();
  const int size = ctx.world_size();
  const bool first_node = ctx.node_index() == 0;
  int wrong = 0;
  double slowest_ms = 0;
  for (int r = 0; r < rounds; ++r) {
    Planned big{NC_F32, NC_SUM, uint64_t{4} << 20, false, 0};
    Planned urgent{NC_F32, NC_SUM, 4099, r % 2 == 0, 9};
    const uint64_t big_id = 1000 + 2 * static_cast<uint64_t>(r);
    for (Planned* p : {&big, &urgent}) {
      const size_t bytes = p->count * sizeof(float);
      nodecomm::check(nc_alloc(ctx.handle(), bytes, &p->send));
      p->recv = p->send;
      if (!p->in_place) nodecomm::check(nc_alloc(ctx.handle(), bytes, &p->recv));
      fill<float>(*p, p == &big ? big_id : big_id + 1, rank);
    }
    const auto post = [&](Planned& p, const char* name) {
      const nc_op_attr_t attr{p.priority, name, NC_COMPRESS_NONE};
      nodecomm::check(nc_allreduce(ctx.handle(), p.send, p.recv, p.count, p.dtype, p.op,
                                   NC_COMM_WORLD, &attr, &p.req));
    };
    const auto t0 = std::chrono::steady_clock::now();
    post(big, "skew.big");
    if (first_node) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      post(urgent, "skew.urgent");
      nodecomm::check(nc_wait(ctx.handle(), urgent.req));
      nodecomm::check(nc_wait(ctx.handle(), big.req));
    } else {
      nodecomm::check(nc_wait(ctx.handle(), big.req));
      post(urgent, "skew.urgent");
      nodecomm::check(nc_wait(ctx.handle(), urgent.req));
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    slowest_ms = std::max(slowest_ms, ms);
    wrong += verify<float>(big, big_id, size, rank) + verify<float>(urgent, big_id + 1, size, rank);
    for (Planned* p : {&big, &urgent}) {
      nodecomm::check(nc_free(ctx.handle(), p->send));
      if (!p->in_place) nodecomm::check(nc_free(ctx.handle(), p->recv));
    }
  }
  std::printf("schedule_check: rank %d: %d skewed urgent rounds, slowest %.1f ms, %d wrong\n", rank,
              rounds, slowest_ms, wrong);
  return wrong;
}

// Every rank must hold the same bits: min and max of the bit patterns agree.
bool identical_everywhere(nodecomm::Context& ctx, const float* data, uint64_t count) {
  void* lo = nullptr;
  void* hi = nullptr;
  nodecomm::check(nc_alloc(ctx.handle(), count * 4, &lo));
  nodecomm::check(nc_alloc(ctx.handle(), count * 4, &hi));
  std::memcpy(lo, data, count * 4);
  std::memcpy(hi, data, count * 4);
  nc_request_t a = 0;
  nc_request_t b = 0;
  nodecomm::check(
      nc_allreduce(ctx.handle(), lo, lo, count, NC_I32, NC_MIN, NC_COMM_WORLD, nullptr, &a));
  nodecomm::check(
      nc_allreduce(ctx.handle(), hi, hi, count, NC_I32, NC_MAX, NC_COMM_WORLD, nullptr, &b));
  nodecomm::check(nc_wait(ctx.handle(), a));
  nodecomm::check(nc_wait(ctx.handle(), b));
  const bool same = std::memcmp(lo, hi, count * 4) == 0;
  nodecomm::check(nc_free(ctx.handle(), lo));
  nodecomm::check(nc_free(ctx.handle(), hi));
  return same;
}

// bf16/f16: one step, bounded relative error, identical bits on every rank.
int run_compressed(nodecomm::Context& ctx, nc_compress_t compress) {
  const int rank = ctx.world_rank();
  const int size = ctx.world_size();
  const int nodes = ctx.node_count();
  const double eps = compress == NC_COMPRESS_BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  int wrong = 0;
  for (const uint64_t count : {uint64_t{1}, uint64_t{4099}, uint64_t{300007}}) {
    nodecomm::Buffer<float> buf = ctx.alloc<float>(count);
    auto value = [](int r, uint64_t i) {
      return static_cast<float>(std::sin(0.001 * static_cast<double>(i) + r) * (1 + r));
    };
    for (uint64_t i = 0; i < count; ++i) buf.data()[i] = value(rank, i);
    const nc_op_attr_t attr{0, "compressed", compress};
    nc_request_t req = 0;
    nodecomm::check(nc_allreduce(ctx.handle(), buf.data(), buf.data(), count, NC_F32, NC_SUM,
                                 NC_COMM_WORLD, &attr, &req));
    nodecomm::check(nc_wait(ctx.handle(), req));
    double worst = 0;
    for (uint64_t i = 0; i < count; ++i) {
      double exact = 0;
      double magnitude = 0;
      for (int r = 0; r < size; ++r) {
        exact += value(r, i);
        magnitude += std::fabs(value(r, i));
      }
      // Each of the ring's hops rounds a partial sum once, and the final value once more.
      const double bound = (nodes + 1) * eps * magnitude + 1e-6 * magnitude;
      const double err = std::fabs(buf.data()[i] - exact);
      worst = std::max(worst, magnitude > 0 ? err / magnitude : 0);
      if (err > bound) {
        if (wrong < 3) {
          std::fprintf(stderr,
                       "schedule_check: rank %d %s count %" PRIu64 " element %" PRIu64
                       ": got %g, exact %g, bound %g\n",
                       rank, nc_compress_name(compress), count, i, buf.data()[i], exact, bound);
        }
        ++wrong;
      }
    }
    if (!identical_everywhere(ctx, buf.data(), count)) {
      std::fprintf(stderr,
                   "schedule_check: rank %d %s count %" PRIu64 ": ranks received different bits\n",
                   rank, nc_compress_name(compress), count);
      ++wrong;
    }
    std::printf("schedule_check: rank %d %s count %" PRIu64
                ": worst error %.3g of sum |x| (bound %.3g)\n",
                rank, nc_compress_name(compress), count, worst, (nodes + 1) * eps);
  }
  return wrong;
}

// int8 with error feedback: over many steps of the same tensor, the accumulated result stays
// within a bound that does not grow with the number of steps.
int run_int8(nodecomm::Context& ctx, int steps) {
  const int rank = ctx.world_rank();
  const int size = ctx.world_size();
  const int nodes = ctx.node_count();
  const uint64_t count = 5000;
  std::vector<double> exact(count, 0);
  std::vector<double> got(count, 0);
  nodecomm::Buffer<float> buf = ctx.alloc<float>(count);
  int wrong = 0;
  double worst = 0;
  double largest_node_sum = 0;
  for (int t = 0; t < steps; ++t) {
    auto value = [t](int r, uint64_t i) {
      // A bias int8 would round the same way every step, plus a varying part.
      return static_cast<float>(0.0031 + 0.01 * std::sin(0.37 * static_cast<double>(i) + t + r));
    };
    for (uint64_t i = 0; i < count; ++i) buf.data()[i] = value(rank, i);
    const nc_op_attr_t attr{0, "int8.tensor", NC_COMPRESS_INT8};
    nc_request_t req = 0;
    nodecomm::check(nc_allreduce(ctx.handle(), buf.data(), buf.data(), count, NC_F32, NC_SUM,
                                 NC_COMM_WORLD, &attr, &req));
    nodecomm::check(nc_wait(ctx.handle(), req));
    for (uint64_t i = 0; i < count; ++i) {
      for (int r = 0; r < size; ++r) exact[i] += value(r, i);
      got[i] += buf.data()[i];
      largest_node_sum = std::max(largest_node_sum, 0.0131 * size / nodes);
    }
  }
  // Each node's residual is at most half its block scale, which is at most (node sum +
  // residual) / 127, so the accumulated difference is bounded by nodes * that, at any step.
  const double bound = nodes * (2 * largest_node_sum / 127.0) + 1e-4;
  for (uint64_t i = 0; i < count; ++i) {
    const double err = std::fabs(got[i] - exact[i]);
    worst = std::max(worst, err);
    if (err > bound) ++wrong;
  }
  if (!identical_everywhere(ctx, buf.data(), count)) ++wrong;
  std::printf(
      "schedule_check: rank %d int8: %d steps, accumulated error %.3g (bound %.3g, "
      "accumulated magnitude %.3g)\n",
      rank, steps, worst, bound, std::fabs(exact[0]));
  return wrong;
}

}  // namespace

int main(int argc, char** argv) {
  int batches = 4;
  int per_batch = 40;
  std::string compress = "none";
  int skewed = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--batches") batches = std::atoi(argv[i + 1]);
    if (flag == "--per-batch") per_batch = std::atoi(argv[i + 1]);
    if (flag == "--compress") compress = argv[i + 1];
    if (flag == "--skewed-urgent") skewed = std::atoi(argv[i + 1]);
  }
  try {
    nodecomm::Context ctx;
    int wrong = 0;
    if (skewed > 0) {
      wrong = run_skewed_urgent(ctx, skewed);
    } else if (compress == "none") {
      wrong = run_batches(ctx, batches, per_batch);
    } else if (compress == "int8") {
      wrong = run_int8(ctx, 60);
    } else {
      nc_compress_t c = NC_COMPRESS_NONE;
      nodecomm::check(nc_compress_parse(compress.c_str(), &c));
      wrong = run_compressed(ctx, c);
    }
    if (wrong != 0) {
      std::fprintf(stderr, "schedule_check: rank %d: %d wrong\n", ctx.world_rank(), wrong);
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "schedule_check: %s\n", e.what());
    return 1;
  }
  return 0;
}
