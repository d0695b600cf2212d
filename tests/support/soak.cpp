#include "soak.hpp"

#include <fmt/format.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <vector>

#include "backend.hpp"
#include "collectives.hpp"

namespace nodecomm::bench {
namespace {

constexpr size_t kMaxBatch = 6;
// A leak is growth beyond both of these between the warm-up sample and the end.
constexpr uint64_t kFlatSlackBytes = uint64_t{16} << 20;
constexpr double kFlatSlackFraction = 0.10;

double now_sec() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// The resident set of this rank's daemon (pid from its ready file), in bytes; 0 if unknown
// (the MPI backend, or a daemon on another machine).
uint64_t daemon_rss_bytes() {
  const char* dir = std::getenv("NODECOMM_RUNTIME_DIR");
  if (dir == nullptr) return 0;
  std::ifstream ready(std::string(dir) + "/nodecommd.ready");
  std::string text((std::istreambuf_iterator<char>(ready)), std::istreambuf_iterator<char>());
  const size_t at = text.find("\"pid\":");
  if (at == std::string::npos) return 0;
  const long pid = std::atol(text.c_str() + at + 6);
  std::ifstream status(fmt::format("/proc/{}/status", pid));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
  }
  return 0;
}

struct Draw {
  Collective collective;
  nc_dtype_t dtype;
  nc_redop_t op;
  size_t count;
  int root;
  bool in_group;
  bool inplace;
  bool heap;
};

constexpr std::array<nc_dtype_t, 7> kDtypes = {NC_F32, NC_F64,  NC_I32, NC_I64,
                                               NC_F16, NC_BF16, NC_U8};
constexpr std::array<nc_redop_t, 5> kOps = {NC_SUM, NC_PROD, NC_MIN, NC_MAX, NC_AVG};
constexpr std::array<Collective, 11> kCollectives = kBenchCollectives;

// Counts spread over sizes from 1 element up, log-uniformly, mostly odd.
size_t draw_count(std::mt19937_64& rng, size_t max_elems) {
  std::uniform_real_distribution<double> exponent(0.0, std::log2(static_cast<double>(max_elems)));
  size_t count = static_cast<size_t>(std::exp2(exponent(rng)));
  if (rng() % 4 != 0) count |= 1;
  return std::clamp<size_t>(count, 1, max_elems);
}

Draw draw(std::mt19937_64& rng, const SoakConfig& config, int world, int group) {
  Draw d{};
  do {
    d.collective = kCollectives[rng() % kCollectives.size()];
    d.dtype = kDtypes[rng() % kDtypes.size()];
    d.op = kOps[rng() % kOps.size()];
  } while (is_reducing(d.collective) && !reference_defined(d.dtype, d.op));
  d.in_group = rng() % 3 == 0;
  const int size = d.in_group ? group : world;
  d.root = static_cast<int>(rng() % static_cast<uint64_t>(size));
  d.inplace = supports_inplace(d.collective) && rng() % 2 == 0;
  d.heap = rng() % 4 == 0;
  // The largest buffer of the call stays within max_bytes.
  const size_t elem = dtype_bytes(d.dtype);
  const size_t probe = shape_of(d.collective, 1024, size).moved_elems;
  const size_t per_count = std::max<size_t>(1, (probe + 1023) / 1024 + 2);
  const size_t max_elems = std::max<size_t>(1, config.max_bytes / elem / per_count);
  d.count = draw_count(rng, max_elems);
  return d;
}

// Buffers of one call: from the backend's allocator (the arena) or the heap (copied through).
class Buffer {
 public:
  Buffer(Backend& backend, size_t bytes, bool heap) : backend_(backend), heap_(heap) {
    bytes = std::max<size_t>(bytes, 64);
    if (heap) {
      heap_data_.resize(bytes);
      data_ = heap_data_.data();
    } else {
      data_ = backend.alloc(bytes);
    }
  }
  ~Buffer() {
    if (!heap_) backend_.free(data_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* get() { return data_; }

 private:
  Backend& backend_;
  bool heap_;
  std::vector<unsigned char> heap_data_;
  void* data_ = nullptr;
};

struct Prepared {
  Draw d;
  CollectiveCase reference;
  int rank;
  std::unique_ptr<Buffer> send, recv;
  CollectiveCase::VectorArgs vector;
  OpAttr attr;
  std::string name;
  Call call;
};

std::unique_ptr<Prepared> prepare(Backend& b, const Draw& d, uint64_t iteration, size_t part) {
  const int rank = d.in_group ? b.group_rank() : b.world_rank();
  const int size = d.in_group ? b.group_size() : b.world_size();
  auto p = std::unique_ptr<Prepared>(
      new Prepared{d,
                   CollectiveCase(d.collective, d.dtype, d.op, size, d.root, d.count),
                   rank,
                   {},
                   {},
                   {},
                   {},
                   fmt::format("soak.{}.{}", iteration, part),
                   {}});
  const Shape& shape = p->reference.shape();
  const size_t elem = p->reference.element_bytes();
  Call& call = p->call;
  call.collective = d.collective;
  call.count = shape.count;
  call.dtype = d.dtype;
  call.op = d.op;
  call.root = d.root;
  call.inplace = d.inplace;
  call.in_group = d.in_group;
  p->attr.name = p->name.c_str();
  call.attr = &p->attr;
  if (is_vector(d.collective)) {
    p->vector = p->reference.vector_args(rank);
    call.vector = &p->vector;
  }
  if (d.inplace) {
    p->send = std::make_unique<Buffer>(b, shape.inplace_elems * elem, d.heap);
    p->reference.prepare_inplace(rank, p->send->get());
    const CallBuffers buffers = p->reference.inplace_buffers(p->send->get(), rank);
    call.send = buffers.send;
    call.recv = buffers.recv;
  } else {
    p->send = std::make_unique<Buffer>(b, shape.send_elems * elem, d.heap);
    p->recv = std::make_unique<Buffer>(b, shape.recv_elems * elem, d.heap);
    p->reference.prepare(rank, p->send->get(), p->recv->get());
    call.send = p->send->get();
    call.recv = p->recv->get();
  }
  return p;
}

// Wrong elements of a finished call; the first few are printed with the call.
uint64_t check(const Prepared& p, int world_rank, uint64_t iteration) {
  std::vector<Mismatch> shown;
  const uint64_t wrong = p.d.inplace
                             ? p.reference.verify_inplace(p.rank, p.send->get(), &shown, 3)
                             : p.reference.verify(p.rank, p.send->get(), p.recv->get(), &shown, 3);
  if (wrong == 0) return 0;
  fmt::print(stderr,
             "nodecomm-bench --soak: rank {} iteration {}: {} {} {} count {} root {} on {} ({}, "
             "{}): {} wrong elements\n",
             world_rank, iteration, collective_name(p.d.collective), nc_dtype_name(p.d.dtype),
             nc_redop_name(p.d.op), p.d.count, p.d.root, p.d.in_group ? "the split half" : "world",
             p.d.inplace ? "in place" : "out of place", p.d.heap ? "heap" : "arena", wrong);
  for (const Mismatch& m : shown) {
    fmt::print(stderr, "  {}[{}] = {}, expected {}\n", m.buffer, m.index, m.got, m.expected);
  }
  return wrong;
}

}  // namespace

uint64_t soak_arena_bytes(const SoakConfig& config) {
  // Send and receive of the largest call, or a batch of allreduces; rounding per block.
  return (std::max<uint64_t>(2, kMaxBatch) * 2 * config.max_bytes + (uint64_t{16} << 20) + 4095) /
         4096 * 4096;
}

int run_soak(Backend& b, const SoakConfig& config) {
  const int rank = b.world_rank();
  const int world = b.world_size();
  // The split half: even and odd world ranks (one group of everything on a single rank).
  b.split(world > 1 ? rank % 2 : 0, rank);
  const int group = b.group_size();
  const double start = now_sec();
  const double warmup = std::min(5.0, config.seconds / 10);
  const uint64_t rss_start = daemon_rss_bytes();
  uint64_t rss_warm = 0;
  uint64_t iterations = 0;
  uint64_t operations = 0;
  uint64_t bytes = 0;
  uint64_t wrong = 0;
  std::map<std::string, uint64_t> by_collective;
  // The longest iteration: a job sharing the daemon with others must never stall behind them.
  double longest = 0;
  for (double began = now_sec();; ++iterations) {
    const double turn = now_sec();
    longest = std::max(longest, turn - began);
    began = turn;
    // Every rank stops at the same iteration: the largest "done" of all ranks decides.
    // A test that has seen what it needs ends the soak through the stop file; any rank's
    // sighting is enough, since the allreduce below spreads it.
    const bool stopped = !config.stop_file.empty() && access(config.stop_file.c_str(), F_OK) == 0;
    int32_t done = now_sec() - start >= config.seconds || wrong > 0 || stopped ? 1 : 0;
    b.allreduce(&done, &done, 1, NC_I32, NC_MAX);
    if (done != 0) break;
    if (rss_warm == 0 && now_sec() - start >= warmup) rss_warm = daemon_rss_bytes();
    std::mt19937_64 rng(config.seed * 0x9e3779b97f4a7c15ull + iterations);
    const bool batch = rng() % 4 == 0;
    std::vector<std::unique_ptr<Prepared>> calls;
    if (batch) {
      const size_t n = 2 + rng() % (kMaxBatch - 1);
      for (size_t k = 0; k < n; ++k) {
        Draw d = draw(rng, config, world, group);
        d.collective = Collective::kAllreduce;
        while (!reference_defined(d.dtype, d.op)) d.op = kOps[rng() % kOps.size()];
        d.inplace = rng() % 2 == 0;
        d.count = std::max<size_t>(1, d.count / 2);
        calls.push_back(prepare(b, d, iterations, k));
      }
      std::vector<Pending> pending;
      for (auto& p : calls) {
        Pending handle = b.post(p->call);
        while (handle == 0) {  // queue full: complete our own oldest, then post again
          b.wait(pending.front());
          pending.erase(pending.begin());
          handle = b.post(p->call);
        }
        pending.push_back(handle);
      }
      b.wait_all(pending);
    } else {
      calls.push_back(prepare(b, draw(rng, config, world, group), iterations, 0));
      b.run(calls.back()->call);
    }
    for (const auto& p : calls) {
      wrong += check(*p, rank, iterations);
      ++operations;
      ++by_collective[std::string(collective_name(p->d.collective))];
      bytes += p->reference.shape().moved_elems * p->reference.element_bytes();
    }
  }
  const double elapsed = now_sec() - start;
  const uint64_t rss_end = daemon_rss_bytes();
  if (rss_warm == 0) rss_warm = rss_end;
  const uint64_t growth = rss_end > rss_warm ? rss_end - rss_warm : 0;
  const bool flat =
      growth <=
      std::max<uint64_t>(kFlatSlackBytes,
                         static_cast<uint64_t>(kFlatSlackFraction * static_cast<double>(rss_warm)));
  // Every rank's wrong count and verdict, summed: rank 0 reports for all.
  int64_t totals[2] = {static_cast<int64_t>(wrong), flat ? 0 : 1};
  b.allreduce(totals, totals, 2, NC_I64, NC_SUM);
  if (b.local_size() > 0 && rss_end > 0 && (rank == 0 || !flat)) {
    fmt::print(
        "# soak: rank {} daemon RSS {:.1f} MiB at start, {:.1f} MiB after warm-up, "
        "{:.1f} MiB at the end ({})\n",
        rank, static_cast<double>(rss_start) / 1048576, static_cast<double>(rss_warm) / 1048576,
        static_cast<double>(rss_end) / 1048576, flat ? "flat" : "GREW");
  }
  if (rank == 0) {
    std::string mix;
    for (const auto& [name, n] : by_collective) mix += fmt::format(" {}:{}", name, n);
    fmt::print(
        "# soak: {} iterations, {} operations, {:.1f} MiB moved per rank in {:.1f} s; "
        "wrong elements (all ranks): {}; memory: {}\n# soak mix:{}\n"
        "# soak: longest iteration {:.1f} ms (rank 0)\n",
        iterations, operations, static_cast<double>(bytes) / 1048576, elapsed, totals[0],
        totals[1] == 0 ? "flat" : "grew", mix, longest * 1e3);
    if (!config.json_path.empty()) {
      std::ofstream out(config.json_path, std::ios::app);
      out << fmt::format(
          "{{\"soak_seconds\":{:.1f},\"iterations\":{},\"operations\":{},\"wrong\":{},"
          "\"daemon_rss_start\":{},\"daemon_rss_warm\":{},\"daemon_rss_end\":{},\"flat\":{}}}\n",
          elapsed, iterations, operations, totals[0], rss_start, rss_warm, rss_end,
          totals[1] == 0 ? "true" : "false");
    }
  }
  std::fflush(stdout);
  return totals[0] == 0 && (totals[1] == 0 || !config.memory_check) ? 0 : 1;
}

}  // namespace nodecomm::bench
