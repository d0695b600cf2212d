#include "bench.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <stdexcept>

#include "batch.hpp"
#include "check.hpp"
#include "collectives.hpp"
#include "nodecomm/ipc/byte_size.hpp"
#include "report.hpp"
#include "workload.hpp"

namespace nodecomm::bench {

std::optional<uint64_t> parse_bytes(std::string_view text, std::string* why) {
  std::string reason;
  const std::optional<uint64_t> bytes = ipc::parse_byte_size(text, reason);
  if (bytes && *bytes >= 1 && *bytes <= kMaxBytes) return bytes;
  if (why != nullptr) *why = bytes ? "out of range" : std::move(reason);
  return std::nullopt;
}

std::string bad_byte_count(std::string_view text) {
  std::string why;
  if (parse_bytes(text, &why)) return {};
  return fmt::format("'{}' is not a byte count in [1, 1024G]: {}", text, why);
}

std::optional<double> parse_link_rate(std::string_view text) {
  // tc's units (tc_util.c), as bits per unit.
  struct Unit {
    std::string_view name;
    double bits;
  };
  static constexpr Unit kUnits[] = {
      {"", 1},           {"bit", 1},        {"kbit", 1e3},     {"mbit", 1e6},     {"gbit", 1e9},
      {"tbit", 1e12},    {"kibit", 0x1p10}, {"mibit", 0x1p20}, {"gibit", 0x1p30}, {"tibit", 0x1p40},
      {"bps", 8},        {"kbps", 8e3},     {"mbps", 8e6},     {"gbps", 8e9},     {"tbps", 8e12},
      {"kibps", 0x1p13}, {"mibps", 0x1p23}, {"gibps", 0x1p33}, {"tibps", 0x1p43},
  };
  // strtod's decimal form, as tc reads it, less signs, spaces, hex, inf and nan: digits with
  // an optional point (at least one digit) and an optional exponent.
  size_t i = 0;
  size_t digits = 0;
  const auto skip_digits = [&] {
    for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) ++digits;
  };
  skip_digits();
  if (i < text.size() && text[i] == '.') {
    ++i;
    skip_digits();
  }
  if (digits == 0) return std::nullopt;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    digits = 0;
    skip_digits();
    if (digits == 0) return std::nullopt;
  }
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + i, value);
  if (ec != std::errc() || end != text.data() + i) return std::nullopt;
  std::string unit(text.substr(i));
  for (char& ch : unit) {
    if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
  }
  for (const Unit& u : kUnits) {
    if (unit != u.name) continue;
    // Whole bytes per second, as tc keeps it; rounded, so that 0.1gbit is 12500000 exactly.
    const double bytes = std::round(value * u.bits / 8);
    if (!(bytes >= 1) || bytes > kMaxLinkRate) return std::nullopt;
    return bytes;
  }
  return std::nullopt;
}

std::optional<int> parse_comm(std::string_view text) {
  if (text == "world") return 0;
  constexpr std::string_view kSplit = "split:";
  if (!text.starts_with(kSplit) || text.size() == kSplit.size()) return std::nullopt;
  int groups = 0;
  for (char ch : text.substr(kSplit.size())) {
    if (ch < '0' || ch > '9' || groups > (INT32_MAX - 9) / 10) return std::nullopt;
    groups = groups * 10 + (ch - '0');
  }
  if (groups < 1) return std::nullopt;
  return groups;
}

std::string comm_name(int split_groups) {
  return split_groups > 0 ? fmt::format("split:{}", split_groups) : std::string("world");
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

namespace {

size_t round_to_element(uint64_t bytes, size_t element) {
  return std::max<size_t>(element, static_cast<size_t>(bytes / element * element));
}
}  // namespace

std::vector<size_t> geometric_sizes(uint64_t min, uint64_t max, uint64_t factor, size_t element) {
  std::vector<size_t> sizes;
  for (uint64_t s = min; s <= max;) {
    const size_t rounded = round_to_element(s, element);
    if (sizes.empty() || sizes.back() != rounded) sizes.push_back(rounded);
    if (s > max / factor) break;  // the next size would pass max (or overflow)
    s *= factor;
  }
  return sizes;
}

std::vector<size_t> rounded_sizes(const std::vector<uint64_t>& bytes, size_t element) {
  std::vector<size_t> sizes;
  sizes.reserve(bytes.size());
  for (uint64_t b : bytes) sizes.push_back(round_to_element(b, element));
  return sizes;
}

uint64_t arena_bytes_for(size_t max_bytes) {
  constexpr uint64_t kDefaultArena = 64ull << 20;
  const uint64_t need = (2 * static_cast<uint64_t>(max_bytes) + (1ull << 20) + 4095) / 4096 * 4096;
  return need > kDefaultArena ? need : 0;
}

int iterations(int requested, bool explicit_count, size_t bytes, uint64_t budget_bytes) {
  if (explicit_count || requested <= 1) return requested;
  const uint64_t fit = std::max<uint64_t>(1, budget_bytes / std::max<size_t>(bytes, 1));
  return static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(requested), fit));
}

namespace {

constexpr size_t kMismatchLines = 10;               // per rank, over the whole run
constexpr size_t kMedianSamples = size_t{1} << 16;  // iteration times kept for the median

// Sums `count` doubles over all ranks in place, through the backend's own allreduce (so that
// nodecomm's figures are averaged by nodecomm), via a scratch buffer from the backend.
void sum_over_ranks(Backend& backend, double* scratch, double* values, size_t count) {
  std::copy(values, values + count, scratch);
  backend.allreduce(scratch, scratch, count, NC_F64, NC_SUM);
  std::copy(scratch, scratch + count, values);
}

class Runner {
 public:
  Runner(Backend& backend, const Config& config)
      : backend_(backend),
        config_(config),
        rank_(backend.world_rank()),
        world_size_(backend.world_size()),
        buffers_(backend),
        batch_(backend, config.batch),
        op_name_(collective_name(config.collective)),
        dtype_name_(nc_dtype_name(config.dtype) ? nc_dtype_name(config.dtype) : "?"),
        redop_name_(nc_redop_name(config.redop) ? nc_redop_name(config.redop) : "?") {}

  int run() {
    const int groups = config_.split_groups;
    if (groups > world_size_) {
      // An empty group would not exist: there would be fewer groups than asked for.
      if (rank_ == 0) {
        fmt::print(stderr, "nodecomm-bench: error: --comm {} needs at least {} ranks, not {}\n",
                   comm_name(groups), groups, world_size_);
      }
      return 2;
    }
    // Only now is the world size known; every rank sees the same, so all stop alike. With
    // --comm split:K the root must be a rank of every group, the smallest having size / K.
    if (has_root(config_.collective) && groups > 0 && config_.root >= world_size_ / groups) {
      if (rank_ == 0) {
        fmt::print(stderr,
                   "nodecomm-bench: error: --root {} is not a rank of every group of --comm {} "
                   "(the smallest has ranks 0..{})\n",
                   config_.root, comm_name(groups), world_size_ / groups - 1);
      }
      return 2;
    }
    if (has_root(config_.collective) && config_.root >= world_size_) {
      if (rank_ == 0) {
        fmt::print(stderr, "nodecomm-bench: error: --root {} is not a rank of this run (0..{})\n",
                   config_.root, world_size_ - 1);
      }
      return 2;
    }
    if (auto rejection = backend_.reject(config_.collective, config_.dtype, config_.redop)) {
      if (rank_ == 0) fmt::print(stderr, "nodecomm-bench: error: {}\n", rejection->why);
      return rejection->exit_code;
    }
    if (groups > 0) {
      try {
        backend_.split(rank_ % groups, rank_);
      } catch (const BackendError& e) {
        throw BackendError(fmt::format("--comm {}: {}", comm_name(groups), e.what()));
      }
    }
    group_rank_ = backend_.group_rank();
    size_ = backend_.group_size();
    // The scratch words come first: without them the ranks cannot even agree to stop.
    scratch_ = static_cast<double*>(buffers_.alloc(3 * sizeof(double)));
    if (!setup()) return 1;
    if (!config_.timeline_path.empty()) write_timeline_header();

    std::unique_ptr<Report> report;
    if (rank_ == 0) {
      report = std::make_unique<Report>(run_info(), stdout, json_.is_open() ? &json_ : nullptr);
      report->header();
    }
    uint64_t total_wrong = 0;
    for (const Shape& shape : shapes()) {
      const Row row = measure(shape);
      total_wrong += row.wrong.value_or(0);
      if (report) report->row(row);
    }
    if (report) report->footer();

    if (hidden_mismatches_ > 0) {
      fmt::print(stderr, "nodecomm-bench: rank {}: {} more wrong elements not shown\n", rank_,
                 hidden_mismatches_);
    }
    int rc = 0;
    if (total_wrong > 0) {
      if (rank_ == 0) {
        fmt::print(stderr, "nodecomm-bench: error: {} wrong elements in total (--check)\n",
                   total_wrong);
      }
      rc = 1;
    }
    if (report && !report->json_ok()) {
      fmt::print(stderr, "nodecomm-bench: error: writing --json {} failed\n", config_.json_path);
      rc = 1;
    }
    return rc;
  }

 private:
  // One row per requested size, in nccl-tests' shape for it; barrier has no size.
  std::vector<Shape> shapes() const {
    if (!has_buffers(config_.collective)) return {shape_of(config_.collective, 0, size_)};
    std::vector<Shape> out;
    for (size_t bytes : config_.sizes) {
      out.push_back(shape_for_bytes(config_.collective, bytes, dtype_bytes(config_.dtype), size_));
    }
    return out;
  }

  bool inplace() const { return config_.inplace && supports_inplace(config_.collective); }

  // setup()'s agreement was the job's first collective: with the ranks' start times, how long
  // a new job took to become usable (a service job's group formation included).
  void write_timeline_header() {
    scratch_[0] = config_.started_at;
    scratch_[1] = wall_seconds();
    backend_.allreduce(scratch_, scratch_, 2, NC_F64, NC_MAX);
    if (!timeline_.is_open()) return;
    timeline_ << fmt::format("# started {:.6f} first-collective {:.6f}\n", scratch_[0],
                             scratch_[1]);
    timeline_.flush();
  }
  // --compress applies to allreduce only (main rejects it elsewhere).
  bool compressed() const {
    return config_.compress != NC_COMPRESS_NONE && config_.collective == Collective::kAllreduce;
  }

  // Allocations and the JSON file can fail on one rank alone; the ranks agree on the outcome
  // so that all of them stop cleanly instead of some waiting in a collective forever.
  bool setup() {
    try {
      return setup_on_all_ranks(backend_, scratch_, rank_, config_.json_path, json_, [&] {
        if (has_buffers(config_.collective)) {
          const size_t element = dtype_bytes(config_.dtype);
          size_t send_bytes = 0;
          size_t recv_bytes = 0;
          size_t inplace_bytes = 0;
          for (const Shape& s : shapes()) {
            // At least one element: a vector collective's buffer can be empty on one rank, and
            // a zero-byte allocation is not worth asking a backend about.
            send_bytes = std::max({send_bytes, s.send_elems * element, element});
            recv_bytes = std::max({recv_bytes, s.recv_elems * element, element});
            inplace_bytes = std::max(inplace_bytes, s.inplace_elems * element);
          }
          if (inplace()) {
            send_ = recv_ = buffers_.alloc(inplace_bytes);
          } else {
            send_ = buffers_.alloc(send_bytes);
            recv_ = buffers_.alloc(recv_bytes);
          }
          if (config_.batch > 1) {
            const size_t max_bytes = *std::max_element(config_.sizes.begin(), config_.sizes.end());
            batch_.allocate(send_, inplace() ? inplace_bytes : send_bytes, recv_,
                            inplace() ? inplace_bytes : recv_bytes,
                            batch_slots(config_.batch, max_bytes));
          }
        }
        if (config_.batch > 1 && !has_buffers(config_.collective)) {
          batch_.allocate(nullptr, 0, nullptr, 0, 1);  // barrier: nothing to allocate
        }
        if (rank_ == 0 && !config_.timeline_path.empty()) {
          timeline_.open(config_.timeline_path, std::ios::out | std::ios::trunc);
          if (!timeline_) {
            throw std::runtime_error(fmt::format("cannot open --timeline file {}: {}",
                                                 config_.timeline_path, std::strerror(errno)));
          }
        }
      });
    } catch (const BackendError& e) {
      throw BackendError(fmt::format("agreeing on setup: {}", e.what()));
    }
  }

  RunInfo run_info() const {
    RunInfo info;
    info.op = std::string(op_name_);
    info.collective = config_.collective;
    info.root = has_root(config_.collective) ? config_.root : -1;
    info.backend = std::string(backend_.name());
    info.world_size = world_size_;
    info.comm = comm_name(config_.split_groups);
    info.comm_size = size_;
    info.nodes = backend_.node_count();
    info.ranks_per_node = backend_.local_size();
    info.iters = config_.iters;
    info.warmup = config_.warmup;
    info.inplace = inplace();
    info.check = config_.check;
    info.buffers = backend_.buffer_kind();
    info.link_rate = config_.link_rate;
    info.link_rate_text = config_.link_rate_text;
    info.batch = config_.batch;
    info.compress = compressed() ? nc_compress_name(config_.compress) : "none";
    if (config_.batch > 1) {
      info.batch_note = fmt::format(
          "batch {}: {} operations of each size in flight before waiting, on {} buffer pair{}; "
          "time(us) = total / {}",
          config_.batch, config_.batch, batch_.slots(), batch_.slots() == 1 ? "" : "s",
          config_.batch);
    }
    if (compressed()) {
      if (!info.batch_note.empty()) info.batch_note += "\n# ";
      info.batch_note +=
          fmt::format("compress {}: results checked within the compression's error, not exactly",
                      nc_compress_name(config_.compress));
    }
    const size_t element = dtype_bytes(config_.dtype);
    for (const Shape& s : shapes()) {
      const size_t bytes = reported_bytes(s, element);
      if (iterations(config_.iters, config_.iters_explicit, bytes, kTimedBudget) < config_.iters ||
          iterations(config_.warmup, config_.warmup_explicit, bytes, kWarmupBudget) <
              config_.warmup) {
        info.reduced_note =
            "default iters/warmup are capped at 2 GiB/512 MiB of data per size (see \"iters\" "
            "in --json); --iters/--warmup override";
        break;
      }
    }
    return info;
  }

  Row measure(const Shape& shape) {
    const bool buffers = has_buffers(config_.collective);
    const bool reducing = is_reducing(config_.collective);
    const size_t element = dtype_bytes(config_.dtype);
    const size_t bytes = reported_bytes(shape, element);
    const int iters = iterations(config_.iters, config_.iters_explicit, bytes, kTimedBudget);
    const int warmup = iterations(config_.warmup, config_.warmup_explicit, bytes, kWarmupBudget);
    Call call{config_.collective, send_,         recv_,        shape.count,
              config_.dtype,      config_.redop, config_.root, inplace()};
    call.in_group = true;
    OpAttr attr;
    std::string name;
    if (compressed()) {
      // int8's error feedback keeps a residual per tensor name: one name per size.
      name = fmt::format("bench.{}", bytes);
      attr.name = name.c_str();
      attr.compress = config_.compress;
      call.attr = &attr;
    }
    const int batch = config_.batch;
    const auto run_once = [&] {
      if (batch > 1) {
        batch_.run(call);
      } else {
        backend_.run(call);
      }
    };
    CollectiveCase::VectorArgs vector;  // kept alive for every run of this size
    // Where a failure happened, kept in plain variables so the timed loop builds no strings.
    const char* phase = "setup";
    int index = 0;
    int total = 0;
    // Mean time per iteration (us), wrong elements, median time per iteration (us).
    double local[3] = {0, 0, 0};
    try {
      if (buffers) {
        const CollectiveCase reference(config_.collective, config_.dtype, config_.redop, size_,
                                       config_.root, shape.count);
        if (is_vector(config_.collective)) {
          vector = reference.vector_args(group_rank_);
          call.vector = &vector;
        }
        if (inplace()) {
          const CallBuffers b = reference.inplace_buffers(send_, group_rank_);
          call.send = b.send;
          call.recv = b.recv;
        }
        // Always filled, so that timed runs move defined data; refilled before the check run.
        prepare(reference);
        if (batch > 1)
          batch_.replicate(inplace() ? shape.inplace_elems * element : shape.send_elems * element);
        if (config_.check) {
          phase = "check run";
          backend_.run(call);
          local[1] = static_cast<double>(check(reference, bytes));
        }
      } else if (config_.check) {
        phase = "check run";
        backend_.run(call);  // a barrier has nothing to compare; completing is the check
      }
      phase = "warmup iteration";
      total = warmup;
      for (index = 0; index < warmup; ++index) run_once();
      phase = "sync before timing";
      index = total = 0;
      backend_.sync();
      phase = "timed iteration";
      total = iters;
      // Iterations' own times too, for the median: on a shared machine one descheduled
      // iteration moves the mean, not the median (the typical operation's time, which
      // tools/scale-model checks). Every stride-th of them, at most kMedianSamples: a bench
      // run until it is killed (--iters 100000000) must not hold one per iteration.
      using Clock = std::chrono::steady_clock;
      const size_t stride =
          std::max<size_t>(1, (static_cast<size_t>(iters) + kMedianSamples - 1) / kMedianSamples);
      std::vector<double> each;
      each.reserve(std::min(static_cast<size_t>(iters), kMedianSamples));
      // Wall-clock times only for a timeline: other processes' timelines are compared with them.
      std::vector<double> walls(timeline_.is_open() ? static_cast<size_t>(iters) + 1 : 0);
      const Clock::time_point start = Clock::now();
      Clock::time_point last = start;
      if (!walls.empty()) walls[0] = wall_seconds();
      for (index = 0; index < iters; ++index) {
        run_once();
        const Clock::time_point end = Clock::now();
        if (static_cast<size_t>(index) % stride == 0)
          each.push_back(std::chrono::duration<double, std::micro>(end - last).count());
        last = end;
        if (!walls.empty()) walls[static_cast<size_t>(index) + 1] = wall_seconds();
      }
      for (size_t i = 0; i + 1 < walls.size(); ++i)
        timeline_ << fmt::format("{} {} {:.6f} {:.6f}\n", bytes, i, walls[i], walls[i + 1]);
      if (!walls.empty()) timeline_.flush();
      const std::chrono::duration<double, std::micro> elapsed = last - start;
      local[0] = elapsed.count() / iters / batch;
      local[2] = median(std::move(each)) / batch;
      phase = "averaging the results over ranks";
      index = total = 0;
      sum_over_ranks(backend_, scratch_, local, 3);
    } catch (const std::exception& e) {
      const std::string at =
          total > 0 ? fmt::format("{} {} of {}", phase, index + 1, total) : std::string(phase);
      throw std::runtime_error(fmt::format("{} of {} bytes ({}), {}: {}", op_name_, bytes,
                                           describe(shape.count), at, e.what()));
    }
    Row row;
    row.bytes = bytes;
    row.count = shape.count;
    row.type = buffers ? dtype_name_ : "none";
    row.redop = reducing ? redop_name_ : "none";
    row.time_us = local[0] / world_size_;  // averaged over every rank of every group
    row.median_us = local[2] / world_size_;
    if (config_.check && buffers) row.wrong = static_cast<uint64_t>(local[1]);
    row.iters = iters;
    return row;
  }

  // "count 1024 x f32 sum, root 0", for messages.
  std::string describe(size_t count) const {
    std::string out = fmt::format("count {} x {}", count, dtype_name_);
    if (is_reducing(config_.collective)) out += fmt::format(" {}", redop_name_);
    if (has_root(config_.collective)) out += fmt::format(", root {}", config_.root);
    return out;
  }

  void prepare(const CollectiveCase& reference) {
    if (inplace()) {
      reference.prepare_inplace(group_rank_, send_);
    } else {
      reference.prepare(group_rank_, send_, recv_);
    }
  }

  // This rank's wrong elements after the check run; reports the first few on stderr.
  uint64_t check(const CollectiveCase& reference, size_t bytes) {
    if (!reference.defined()) {
      throw std::runtime_error(
          fmt::format("the {} succeeded, but {} on {} has no defined result; nodecomm should have "
                      "rejected it with NC_ERR_INVALID_ARGUMENT",
                      op_name_, redop_name_, dtype_name_));
    }
    std::vector<Mismatch> shown;
    const size_t room = kMismatchLines - std::min(kMismatchLines, mismatch_lines_);
    uint64_t wrong = 0;
    if (compressed() && config_.dtype == NC_F32) {
      // Only the result, within the compression's error (the send buffer is not compared).
      const Pattern pattern(config_.dtype, config_.redop, size_);
      wrong = verify_compressed(pattern, static_cast<const float*>(inplace() ? send_ : recv_),
                                reference.shape().count, config_.compress, backend_.node_count(),
                                &shown, room);
    } else {
      wrong = inplace() ? reference.verify_inplace(group_rank_, send_, &shown, room)
                        : reference.verify(group_rank_, send_, recv_, &shown, room);
    }
    for (const Mismatch& m : shown) {
      fmt::print(stderr,
                 "nodecomm-bench: rank {}: wrong result of {} at size {} ({}{}): {} element {}: "
                 "got {}, expected {}\n",
                 rank_, op_name_, bytes, describe(reference.shape().count),
                 inplace() ? ", in place" : "", m.buffer, m.index, m.got, m.expected);
    }
    mismatch_lines_ += shown.size();
    hidden_mismatches_ += wrong - shown.size();
    return wrong;
  }

  Backend& backend_;
  const Config& config_;
  const int rank_;  // in the world: for messages, and the split's color and key
  const int world_size_;
  // In the group the collective runs in (the world without --comm split:K): shapes,
  // references and roots are the group's. Set in run(), once the group exists.
  int group_rank_ = 0;
  int size_ = 1;
  Buffers buffers_;
  Batch batch_;  // --batch; after buffers_, so destroyed before them
  const std::string_view op_name_;
  const std::string dtype_name_;
  const std::string redop_name_;
  double* scratch_ = nullptr;
  void* send_ = nullptr;  // in place: the one buffer (recv_ == send_)
  void* recv_ = nullptr;
  std::ofstream json_;
  std::ofstream timeline_;
  size_t mismatch_lines_ = 0;
  uint64_t hidden_mismatches_ = 0;
};

}  // namespace

bool setup_on_all_ranks(Backend& backend, double* scratch, int rank, const std::string& json_path,
                        std::ofstream& json, const std::function<void()>& setup) {
  double failed = 0;
  try {
    setup();
    if (rank == 0 && !json_path.empty()) {
      json.open(json_path, std::ios::out | std::ios::trunc);
      if (!json) {
        throw std::runtime_error(
            fmt::format("cannot open --json file {}: {}", json_path, std::strerror(errno)));
      }
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "nodecomm-bench: rank {}: setup failed: {}\n", rank, e.what());
    failed = 1;
  }
  sum_over_ranks(backend, scratch, &failed, 1);
  if (failed > 0 && rank == 0) {
    fmt::print(stderr, "nodecomm-bench: error: setup failed on {} rank(s)\n", failed);
  }
  return failed == 0;
}

bool write_json_line(std::ofstream& json, const std::string& line, const std::string& path) {
  json << line << '\n';
  json.flush();
  const bool ok = json.good();
  if (!ok) fmt::print(stderr, "nodecomm-bench: error: writing --json {} failed\n", path);
  return ok;
}

int run(Backend& backend, const Config& config) {
  if (config.sizes.empty() && has_buffers(config.collective))
    throw std::invalid_argument("no sizes to run");
  Runner runner(backend, config);
  return runner.run();
}

}  // namespace nodecomm::bench
