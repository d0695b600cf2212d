// Integration check run under nodecomm-launch: in one launch, every rank runs every selected
// collective for each dtype, redop (reducing collectives), element count, buffer layout and
// root (rooted collectives), and compares every element it holds afterwards with the
// reference of tests/support/collectives.hpp, the same one nodecomm-bench --check uses.
//
//   collectives_check [--ops LIST] [--dtypes LIST] [--redops LIST] [--counts LIST]
//                     [--roots LIST] [--buffers arena|registered]
//
// Counts are the count argument of each call (per rank for reduce_scatter, allgather, gather,
// scatter and alltoall). Roots are ranks or "last". Layouts:
//   out-of-place  send and recv from nc_alloc (zero-copy path); with --buffers registered,
//                 from a memfd of this rank's own that nc_register_fd registered instead
//   in-place      one such buffer aliased as nodecomm.h documents (not alltoall)
//   heap          send and recv from the heap (the library copies through its arena)
//   null          rooted collectives: non-roots pass NULL for the buffer they do not use
// Combinations without a defined result (avg on integers, in-place alltoall) are skipped.
//
// Prints one line per rank, "collectives_check rank R/N: K runs, W wrong", after any wrong
// results and failed calls. Exit status: 0 when nothing was wrong and no call failed, 1
// otherwise, 2 on bad flags.
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "check.hpp"
#include "collectives.hpp"
#include "nodecomm.h"

namespace {

using nodecomm::bench::CallBuffers;
using nodecomm::bench::Collective;
using nodecomm::bench::CollectiveCase;
using nodecomm::bench::Mismatch;

constexpr size_t kMaxMismatchesPerRun = 3;
constexpr int kMaxReportedRuns = 30;  // lines about wrong or failed runs, per rank

// A bad command line; main() prints it as one line and exits 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    out.push_back(
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::optional<uint64_t> parse_number(std::string_view text) {
  uint64_t value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

enum class Mode { kOutOfPlace, kInPlace, kHeap, kNull };

const char* mode_name(Mode mode) {
  switch (mode) {
    case Mode::kOutOfPlace:
      return "out-of-place";
    case Mode::kInPlace:
      return "in-place";
    case Mode::kHeap:
      return "heap";
    case Mode::kNull:
      return "null";
  }
  return "?";
}

struct Options {
  std::vector<Collective> ops;
  std::vector<nc_dtype_t> dtypes;
  std::vector<nc_redop_t> redops;
  std::vector<size_t> counts;
  std::vector<std::string> roots;  // resolved once the world size is known
  bool registered = false;         // --buffers registered
};

Options parse_options(int argc, char** argv) {
  std::string ops = "all";
  std::string dtypes = "f32,f64,i32,i64,f16,bf16,i8,u8";
  std::string redops = "sum,prod,min,max,avg";
  std::string counts = "1,7,4099";
  std::string roots = "0,last";
  std::string buffers = "arena";
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) throw UsageError(fmt::format("{} needs a value", flag));
    const std::string value = argv[i + 1];
    if (flag == "--ops") {
      ops = value;
    } else if (flag == "--dtypes") {
      dtypes = value;
    } else if (flag == "--redops") {
      redops = value;
    } else if (flag == "--counts") {
      counts = value;
    } else if (flag == "--roots") {
      roots = value;
    } else if (flag == "--buffers") {
      if (value != "arena" && value != "registered") {
        throw UsageError(fmt::format("--buffers: '{}' is not arena or registered", value));
      }
      buffers = value;
    } else {
      throw UsageError(fmt::format(
          "unknown flag {} (flags: --ops --dtypes --redops --counts --roots --buffers)", flag));
    }
  }
  Options o;
  o.registered = buffers == "registered";
  if (ops == "all") {
    o.ops.assign(nodecomm::bench::kBenchCollectives.begin(),
                 nodecomm::bench::kBenchCollectives.end());
  } else {
    for (const std::string& name : split(ops)) {
      const auto c = nodecomm::bench::parse_collective(name);
      if (!c) {
        throw UsageError(fmt::format("--ops: unknown collective '{}' (one of: {}, or all)", name,
                                     nodecomm::bench::collective_names()));
      }
      o.ops.push_back(*c);
    }
  }
  for (const std::string& name : split(dtypes)) {
    nc_dtype_t d{};
    if (nc_dtype_parse(name.c_str(), &d) != NC_OK) {
      throw UsageError(fmt::format("--dtypes: unknown dtype '{}'", name));
    }
    o.dtypes.push_back(d);
  }
  for (const std::string& name : split(redops)) {
    nc_redop_t r{};
    if (nc_redop_parse(name.c_str(), &r) != NC_OK) {
      throw UsageError(fmt::format("--redops: unknown redop '{}'", name));
    }
    o.redops.push_back(r);
  }
  for (const std::string& text : split(counts)) {
    const auto n = parse_number(text);
    // An upper bound far above any arena, so that the buffer arithmetic cannot overflow.
    if (!n || *n == 0 || *n > (uint64_t{1} << 34)) {
      throw UsageError(fmt::format("--counts: '{}' is not an element count in [1, 2^34]", text));
    }
    o.counts.push_back(static_cast<size_t>(*n));
  }
  for (const std::string& text : split(roots)) {
    if (text != "last" && !parse_number(text)) {
      throw UsageError(fmt::format("--roots: '{}' is neither a rank nor 'last'", text));
    }
    o.roots.push_back(text);
  }
  return o;
}

// Ranks from --roots for a world of `size`, in order, without repeats.
std::vector<int> resolve_roots(const std::vector<std::string>& roots, int size) {
  std::vector<int> out;
  for (const std::string& text : roots) {
    const uint64_t r = text == "last" ? static_cast<uint64_t>(size - 1) : *parse_number(text);
    if (r >= static_cast<uint64_t>(size)) {
      throw UsageError(
          fmt::format("--roots: {} is not a rank of this job (0..{})", text, size - 1));
    }
    if (std::find(out.begin(), out.end(), static_cast<int>(r)) == out.end()) {
      out.push_back(static_cast<int>(r));
    }
  }
  return out;
}

// Arena bytes one run needs: its own blocks, or the library's copies of heap buffers.
uint64_t run_arena_bytes(const CollectiveCase& c) {
  const nodecomm::bench::Shape& s = c.shape();
  return (s.send_elems + s.recv_elems) * c.element_bytes();
}

// Room for the largest run's buffers twice over (the heap layout's copies through the arena
// come on top of nothing else, but the library may keep its own blocks), plus slack; at least
// the library's default.
uint64_t arena_bytes_for(const Options& o, int size) {
  size_t element = 1;
  for (nc_dtype_t d : o.dtypes) element = std::max(element, nodecomm::bench::dtype_bytes(d));
  const size_t count = *std::max_element(o.counts.begin(), o.counts.end());
  uint64_t largest = 0;
  for (Collective c : o.ops) {
    const nodecomm::bench::Shape s = nodecomm::bench::shape_of(c, count, size);
    largest = std::max<uint64_t>(largest, (s.send_elems + s.recv_elems) * element);
  }
  const uint64_t need = (2 * largest + (4ull << 20) + 4095) / 4096 * 4096;
  return std::max<uint64_t>(need, 64ull << 20);
}

// --buffers registered: this rank's own memfd, registered with nc_register_fd, handed out as
// a stack (runs free their blocks in reverse order).
class RegisteredPool {
 public:
  RegisteredPool(nc_context_t* ctx, uint64_t bytes) : bytes_(bytes) {
    fd_ = memfd_create("collectives_check", MFD_CLOEXEC);
    if (fd_ < 0 || ftruncate(fd_, static_cast<off_t>(bytes)) != 0) {
      throw std::runtime_error("memfd_create/ftruncate failed");
    }
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap of the memfd failed");
    base_ = static_cast<uint8_t*>(p);
    if (const nc_status_t s = nc_register_fd(ctx, fd_, 0, bytes, base_); s != NC_OK) {
      throw std::runtime_error(fmt::format("nc_register_fd of {} bytes: {}: {}", bytes,
                                           nc_status_string(s), nc_last_error()));
    }
  }
  RegisteredPool(const RegisteredPool&) = delete;
  RegisteredPool& operator=(const RegisteredPool&) = delete;
  ~RegisteredPool() {
    // The daemon keeps its own mapping until nc_finalize; this one may go now.
    munmap(base_, bytes_);
    close(fd_);
  }
  void* take(size_t bytes) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded > bytes_ - top_) {
      throw std::runtime_error(fmt::format("the registered pool has {} of {} bytes left, {} asked",
                                           bytes_ - top_, bytes_, bytes));
    }
    void* p = base_ + top_;
    top_ += rounded;
    return p;
  }
  void give_back(const void* p) {
    top_ = static_cast<size_t>(static_cast<const uint8_t*>(p) - base_);
  }

 private:
  int fd_ = -1;
  uint8_t* base_ = nullptr;
  uint64_t bytes_;
  size_t top_ = 0;
};

// A block of the arena (or of the registered pool, when given), or of the heap (kept 8-byte
// aligned for every dtype); null for zero bytes, which a run asks for when a rank passes no
// buffer.
class Block {
 public:
  Block(nc_context_t* ctx, size_t bytes, bool heap, RegisteredPool* pool = nullptr) : ctx_(ctx) {
    if (bytes == 0) return;
    if (heap) {
      heap_.resize((bytes + 7) / 8);
      ptr_ = heap_.data();
      return;
    }
    if (pool != nullptr) {
      ptr_ = pool->take(bytes);
      pool_ = pool;
      return;
    }
    if (const nc_status_t s = nc_alloc(ctx, bytes, &ptr_); s != NC_OK) {
      ptr_ = nullptr;
      throw std::runtime_error(fmt::format("nc_alloc of {} bytes failed: {}: {}", bytes,
                                           nc_status_string(s), nc_last_error()));
    }
    arena_ = true;
  }
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;
  ~Block() {
    if (arena_) (void)nc_free(ctx_, ptr_);
    if (pool_ != nullptr) pool_->give_back(ptr_);
  }
  void* get() const { return ptr_; }

 private:
  nc_context_t* ctx_;
  void* ptr_ = nullptr;
  bool arena_ = false;
  RegisteredPool* pool_ = nullptr;
  std::vector<uint64_t> heap_;
};

// Posts one collective; *call names the function for messages.
nc_status_t post(nc_context_t* ctx, const CollectiveCase& c, int rank, const void* send, void* recv,
                 const nc_op_attr_t* attr, nc_request_t* req, const char** call) {
  const size_t n = c.shape().count;
  switch (c.collective()) {
    case Collective::kAllreduce:
      *call = "nc_allreduce";
      return nc_allreduce(ctx, send, recv, n, c.dtype(), c.op(), NC_COMM_WORLD, attr, req);
    case Collective::kReduce:
      *call = "nc_reduce";
      return nc_reduce(ctx, send, recv, n, c.dtype(), c.op(), c.root(), NC_COMM_WORLD, attr, req);
    case Collective::kBroadcast:
      *call = "nc_broadcast";
      return nc_broadcast(ctx, send, recv, n, c.dtype(), c.root(), NC_COMM_WORLD, attr, req);
    case Collective::kReduceScatter:
      *call = "nc_reduce_scatter";
      return nc_reduce_scatter(ctx, send, recv, n, c.dtype(), c.op(), NC_COMM_WORLD, attr, req);
    case Collective::kAllgather:
      *call = "nc_allgather";
      return nc_allgather(ctx, send, recv, n, c.dtype(), NC_COMM_WORLD, attr, req);
    case Collective::kGather:
      *call = "nc_gather";
      return nc_gather(ctx, send, recv, n, c.dtype(), c.root(), NC_COMM_WORLD, attr, req);
    case Collective::kScatter:
      *call = "nc_scatter";
      return nc_scatter(ctx, send, recv, n, c.dtype(), c.root(), NC_COMM_WORLD, attr, req);
    case Collective::kAlltoall:
      *call = "nc_alltoall";
      return nc_alltoall(ctx, send, recv, n, c.dtype(), NC_COMM_WORLD, attr, req);
    case Collective::kBarrier:
      *call = "nc_barrier";
      return nc_barrier(ctx, NC_COMM_WORLD, attr, req);
    case Collective::kAllgatherv: {
      *call = "nc_allgatherv";
      const auto v = c.vector_args(rank);
      return nc_allgatherv(ctx, send, v.send_count, recv, v.recv_counts.data(),
                           v.recv_displs.data(), c.dtype(), NC_COMM_WORLD, attr, req);
    }
    case Collective::kAlltoallv: {
      *call = "nc_alltoallv";
      const auto v = c.vector_args(rank);
      return nc_alltoallv(ctx, send, v.send_counts.data(), v.send_displs.data(), recv,
                          v.recv_counts.data(), v.recv_displs.data(), c.dtype(), NC_COMM_WORLD,
                          attr, req);
    }
  }
  *call = "?";
  return NC_ERR_INVALID_ARGUMENT;
}

struct Tally {
  uint64_t runs = 0;
  uint64_t wrong = 0;   // elements
  uint64_t failed = 0;  // calls
};

class Checker {
 public:
  // `arena_bytes`: the smallest arena of all ranks, so that every rank skips the same runs.
  Checker(nc_context_t* ctx, const Options& options, uint64_t arena_bytes)
      : ctx_(ctx),
        options_(options),
        rank_(nc_world_rank(ctx)),
        size_(nc_world_size(ctx)),
        roots_(resolve_roots(options.roots, size_)),
        arena_bytes_(arena_bytes),
        pool_(options.registered ? std::make_unique<RegisteredPool>(ctx, arena_bytes) : nullptr) {}

  // False once a failure leaves the ranks possibly out of step, which ends the loop.
  bool run_all() {
    for (Collective c : options_.ops) {
      if (c == Collective::kBarrier) {
        if (!run_one(CollectiveCase(c, NC_F32, NC_SUM, size_, 0, 0), Mode::kOutOfPlace)) {
          return false;
        }
        continue;
      }
      const bool reducing = nodecomm::bench::is_reducing(c);
      const std::vector<int> roots = nodecomm::bench::has_root(c) ? roots_ : std::vector<int>{0};
      // Collectives that do not reduce ignore the redop: one pass with a placeholder.
      const std::vector<nc_redop_t> redops = reducing ? options_.redops : std::vector{NC_SUM};
      for (nc_dtype_t dtype : options_.dtypes) {
        for (nc_redop_t op : redops) {
          if (reducing && !nodecomm::bench::reference_defined(dtype, op)) continue;
          for (size_t count : options_.counts) {
            for (Mode mode : {Mode::kOutOfPlace, Mode::kInPlace, Mode::kHeap, Mode::kNull}) {
              if (mode == Mode::kInPlace && !nodecomm::bench::supports_inplace(c)) continue;
              if (mode == Mode::kNull && !nodecomm::bench::has_root(c)) continue;
              for (int root : roots) {
                if (!run_one(CollectiveCase(c, dtype, op, size_, root, count), mode)) return false;
              }
            }
          }
        }
      }
    }
    return true;
  }

  Tally total() const {
    Tally t;
    for (const auto& [name, tally] : per_collective_) {
      t.runs += tally.runs;
      t.wrong += tally.wrong;
      t.failed += tally.failed;
    }
    return t;
  }
  const std::map<std::string_view, Tally>& per_collective() const { return per_collective_; }

 private:
  // "reduce f16 sum count 7 in-place root 2", for messages.
  static std::string describe(const CollectiveCase& c, Mode mode) {
    const std::string_view name = nodecomm::bench::collective_name(c.collective());
    if (!nodecomm::bench::has_buffers(c.collective())) return std::string(name);
    std::string out = fmt::format("{} {}", name, nc_dtype_name(c.dtype()));
    if (nodecomm::bench::is_reducing(c.collective())) {
      out += fmt::format(" {}", nc_redop_name(c.op()));
    }
    out += fmt::format(" count {} {}", c.shape().count, mode_name(mode));
    if (nodecomm::bench::has_root(c.collective())) out += fmt::format(" root {}", c.root());
    return out;
  }

  bool report_more() { return reported_++ < kMaxReportedRuns; }

  // Runs one case; false when the ranks may be out of step afterwards.
  bool run_one(const CollectiveCase& c, Mode mode) {
    Tally& tally = per_collective_[nodecomm::bench::collective_name(c.collective())];
    const std::string what = describe(c, mode);
    const nodecomm::bench::Shape& shape = c.shape();
    const size_t element = c.element_bytes();
    if (run_arena_bytes(c) + (1u << 20) > arena_bytes_) {
      // Known alike on every rank (the arena is the smallest of all), so all skip it, loudly:
      // the arena was sized for fewer ranks than the job has.
      ++tally.failed;
      if (report_more()) {
        fmt::print(stderr,
                   "collectives_check rank {}: {}: not run: needs {} bytes of arena, the smallest "
                   "rank has {} (set NODECOMM_WORLD_SIZE_HINT to the job's rank count)\n",
                   rank_, what, run_arena_bytes(c), arena_bytes_);
      }
      return true;
    }
    const bool root = rank_ == c.root() || !nodecomm::bench::has_root(c.collective());
    // Which buffers this rank passes: in the null layout a non-root passes none where the
    // collective does not use one (nodecomm.h allows NULL there).
    bool pass_send = true;
    bool pass_recv = true;
    if (mode == Mode::kNull && !root) {
      pass_send =
          c.collective() != Collective::kBroadcast && c.collective() != Collective::kScatter;
      pass_recv = c.collective() != Collective::kReduce && c.collective() != Collective::kGather;
    }
    try {
      const bool heap = mode == Mode::kHeap;
      const bool inplace = mode == Mode::kInPlace;
      RegisteredPool* pool = pool_.get();
      Block one(ctx_, inplace ? shape.inplace_elems * element : 0, false, pool);
      Block send(ctx_, !inplace && pass_send ? shape.send_elems * element : 0, heap, pool);
      Block recv(ctx_, !inplace && pass_recv ? shape.recv_elems * element : 0, heap, pool);
      CallBuffers call{send.get(), recv.get()};
      if (inplace) {
        call = c.inplace_buffers(one.get(), rank_);
        c.prepare_inplace(rank_, one.get());
      } else {
        c.prepare(rank_, send.get(), recv.get());
      }
      const std::string name = fmt::format("collectives_check {}", what);
      const nc_op_attr_t attr{0, name.c_str(), NC_COMPRESS_NONE};
      nc_request_t req = 0;
      const char* call_name = "?";
      if (const nc_status_t s = post(ctx_, c, rank_, call.send, call.recv, &attr, &req, &call_name);
          s != NC_OK) {
        ++tally.failed;
        if (report_more()) {
          fmt::print(stderr, "collectives_check rank {}: {}: {} failed: {} ({}): {}\n", rank_, what,
                     call_name, nc_status_string(s), static_cast<int>(s), nc_last_error());
        }
        // Rejected from its arguments alone, identically on every rank, so all can go on;
        // anything else may have left some ranks waiting for this one.
        return s == NC_ERR_UNSUPPORTED || s == NC_ERR_INVALID_ARGUMENT;
      }
      if (const nc_status_t s = nc_wait(ctx_, req); s != NC_OK) {
        ++tally.failed;
        fmt::print(stderr, "collectives_check rank {}: {}: nc_wait ({}) failed: {} ({}): {}\n",
                   rank_, what, call_name, nc_status_string(s), static_cast<int>(s),
                   nc_last_error());
        return false;
      }
      ++tally.runs;
      if (!nodecomm::bench::has_buffers(c.collective())) return true;
      std::vector<Mismatch> shown;
      const uint64_t wrong =
          inplace ? c.verify_inplace(rank_, one.get(), &shown, kMaxMismatchesPerRun)
                  : c.verify(rank_, send.get(), recv.get(), &shown, kMaxMismatchesPerRun);
      tally.wrong += wrong;
      if (wrong > 0 && report_more()) {
        std::string first;
        for (const Mismatch& m : shown) {
          first +=
              fmt::format("; {}[{}] got {}, expected {}", m.buffer, m.index, m.got, m.expected);
        }
        fmt::print(stderr, "collectives_check rank {}: WRONG {}: {} wrong element(s){}\n", rank_,
                   what, wrong, first);
      }
      return true;
    } catch (const std::exception& e) {
      ++tally.failed;
      fmt::print(stderr, "collectives_check rank {}: {}: {}\n", rank_, what, e.what());
      return false;
    }
  }

  nc_context_t* ctx_;
  const Options& options_;
  const int rank_;
  const int size_;
  const std::vector<int> roots_;
  const uint64_t arena_bytes_;
  std::unique_ptr<RegisteredPool> pool_;  // --buffers registered
  std::map<std::string_view, Tally> per_collective_;
  int reported_ = 0;
};

// NODECOMM_WORLD_SIZE_HINT if set, else twice the ranks of a uniform layout from what
// nodecomm-launch exports, and at least 64.
int world_hint() {
  auto number = [](const char* name) -> uint64_t {
    const char* text = std::getenv(name);
    const auto v = text != nullptr ? parse_number(text) : std::nullopt;
    return v && *v < 65536 ? *v : 0;
  };
  if (const uint64_t hint = number("NODECOMM_WORLD_SIZE_HINT"); hint > 0) {
    return static_cast<int>(hint);
  }
  const uint64_t layout = number("NODECOMM_NODES") * number("NODECOMM_LOCAL_SIZE");
  return static_cast<int>(std::max<uint64_t>(64, 2 * layout));
}

// The smallest arena of all ranks, agreed through an allreduce (min). Throws on failure.
uint64_t smallest_arena(nc_context_t* ctx) {
  uint64_t total = 0;
  uint64_t free_bytes = 0;
  if (const nc_status_t s = nc_arena_info(ctx, &total, &free_bytes); s != NC_OK) {
    throw std::runtime_error(
        fmt::format("nc_arena_info failed: {}: {}", nc_status_string(s), nc_last_error()));
  }
  Block word(ctx, sizeof(double), false);
  double* value = static_cast<double*>(word.get());
  *value = static_cast<double>(free_bytes);
  nc_request_t req = 0;
  nc_status_t s = nc_allreduce(ctx, value, value, 1, NC_F64, NC_MIN, NC_COMM_WORLD, nullptr, &req);
  if (s == NC_OK) s = nc_wait(ctx, req);
  if (s != NC_OK) {
    throw std::runtime_error(
        fmt::format("agreeing on the arena size (allreduce min) failed: {}: {}",
                    nc_status_string(s), nc_last_error()));
  }
  return static_cast<uint64_t>(*value);
}

int check_main(int argc, char** argv) {
  Options options;
  try {
    options = parse_options(argc, argv);
  } catch (const UsageError& e) {
    fmt::print(stderr, "collectives_check: error: {}\n", e.what());
    return 2;
  }
  // The world size is only known after nc_init, but the arena is requested by it, so it is
  // sized for a generous guess (untouched arena pages cost nothing); runs that still do not
  // fit are reported, not attempted.
  nc_init_options_t init;
  nc_init_options_default(&init);
  init.arena_bytes = arena_bytes_for(options, world_hint());
  nc_context_t* ctx = nullptr;
  if (const nc_status_t s = nc_init(&init, &ctx); s != NC_OK) {
    fmt::print(stderr, "collectives_check: nc_init (arena {} bytes) failed: {}: {}\n",
               init.arena_bytes, nc_status_string(s), nc_last_error());
    return 1;
  }
  const int rank = nc_world_rank(ctx);
  const int size = nc_world_size(ctx);
  int rc = 0;
  try {
    Checker checker(ctx, options, smallest_arena(ctx));
    const bool completed = checker.run_all();
    const Tally t = checker.total();
    if (rank == 0) {
      for (const auto& [name, tally] : checker.per_collective()) {
        fmt::print("collectives_check: {}: {} runs, {} wrong, {} failed calls\n", name, tally.runs,
                   tally.wrong, tally.failed);
      }
    }
    if (!completed) {
      fmt::print(stderr, "collectives_check rank {}: stopped early after a failure\n", rank);
    }
    if (t.failed > 0) {
      fmt::print(stderr, "collectives_check rank {}/{}: {} calls failed\n", rank, size, t.failed);
    }
    fmt::print("collectives_check rank {}/{}: {} runs, {} wrong\n", rank, size, t.runs, t.wrong);
    rc = completed && t.failed == 0 && t.wrong == 0 ? 0 : 1;
  } catch (const UsageError& e) {
    if (rank == 0) fmt::print(stderr, "collectives_check: error: {}\n", e.what());
    rc = 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "collectives_check rank {}/{}: error: {}\n", rank, size, e.what());
    rc = 1;
  }
  std::fflush(stdout);
  nc_finalize(ctx);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return check_main(argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "collectives_check: error: {}\n", e.what());
    return 1;
  }
}
