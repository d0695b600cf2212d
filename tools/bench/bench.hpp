// The measurement loop shared by all backends, and the size arithmetic behind the flags.
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend.hpp"
#include "collectives.hpp"
#include "nodecomm.h"

namespace nodecomm::bench {

struct Config {
  Collective collective = Collective::kAllreduce;
  nc_dtype_t dtype = NC_F32;
  nc_redop_t redop = NC_SUM;  // reducing collectives only
  int root = 0;  // rooted collectives only; checked against the (smallest) group in run()
  // Requested bytes, each a positive multiple of the element size; each becomes one row with
  // nccl-tests' shape for it (shape_for_bytes). Barrier runs one row of size 0 regardless.
  std::vector<size_t> sizes;
  int iters = 20;
  int warmup = 5;
  // Explicit counts are used as given; defaults shrink for very large sizes (iterations()).
  bool iters_explicit = false;
  bool warmup_explicit = false;
  bool check = false;
  bool inplace = false;
  std::string json_path;  // empty: no JSON
  // --timeline: world rank 0 writes one line per timed iteration, "BYTES INDEX START END"
  // (wall-clock seconds), so that runs in different processes (jobs sharing a link) can be
  // compared over the same window. Empty: none.
  std::string timeline_path;
  double started_at = 0;  // wall-clock seconds when the process started: --timeline's header
  // --comm split:K: the collective runs in K groups, world rank r in group r % K (ordered by
  // world rank). 0: on the world (--comm world).
  int split_groups = 0;
  // --link-rate (or NODECOMM_LINK_RATE) in bytes per second, and as given; 0: not known.
  double link_rate = 0;
  std::string link_rate_text;
  // --batch K: K operations of each size posted before waiting for all of them (batch.hpp).
  int batch = 1;
  // --compress: wire compression of every allreduce under test; results are then checked
  // within the compression's error (batch.hpp) instead of exactly.
  nc_compress_t compress = NC_COMPRESS_NONE;
};

// Wall-clock seconds since the epoch: comparable between processes on one machine.
double wall_seconds();

// "world" (0) or "split:K" with K >= 1 (K); empty on anything else.
std::optional<int> parse_comm(std::string_view text);
// How --comm is spelt in the report: "world" or "split:K".
std::string comm_name(int split_groups);

// "8", "16396", "64M", "1g", "64MiB": bytes in the grammar of ipc/byte_size.hpp. Empty on
// anything else, including zero and anything above kMaxBytes (a typo, not a size anyone can
// allocate twice), with the reason in `why` when given.
std::optional<uint64_t> parse_bytes(std::string_view text, std::string* why = nullptr);
// The error text for a --sizes/--min-bytes/... value parse_bytes refuses; empty if it accepts.
std::string bad_byte_count(std::string_view text);
inline constexpr uint64_t kMaxBytes = 1ull << 40;

// A link rate as tc spells it, in whole bytes per second: a decimal number ("1", "2.5",
// "1e9") and a unit, case-insensitive. Bits per second: none, bit, kbit, mbit, gbit, tbit
// (powers of 1000) and kibit, mibit, gibit, tibit (powers of 1024). Bytes per second: bps,
// kbps, mbps, gbps, tbps and kibps, mibps, gibps, tibps. Empty on anything else, including
// signs, spaces, less than one byte per second, and more than kMaxLinkRate.
std::optional<double> parse_link_rate(std::string_view text);
inline constexpr double kMaxLinkRate = 1e18;  // bytes per second: 8 Ebit/s

// min, min*factor, ... up to max inclusive, each rounded down to a multiple of `element`
// (at least one element); a size that rounds to its predecessor is dropped.
std::vector<size_t> geometric_sizes(uint64_t min, uint64_t max, uint64_t factor, size_t element);
// An explicit list, rounded the same way and kept in the given order.
std::vector<size_t> rounded_sizes(const std::vector<uint64_t>& bytes, size_t element);

// The arena the nodecomm backend requests: room for a send and a receive buffer of the
// largest size plus 1 MiB of slack, rounded up to a page; 0 (the default, 64 MiB) when that
// is enough. (No collective's buffer exceeds its reported size, so this covers them all; a
// size below one element per rank grows to that, which the slack absorbs.)
uint64_t arena_bytes_for(size_t max_bytes);

// Default iteration counts are capped by the data they move per size (2 GiB timed, 512 MiB
// warmup), so that multi-GiB sizes finish; default sizes (up to 64M) are unaffected.
int iterations(int requested, bool explicit_count, size_t bytes, uint64_t budget_bytes);
inline constexpr uint64_t kTimedBudget = 2ull << 30;
inline constexpr uint64_t kWarmupBudget = 512ull << 20;

// Owns the buffers of a run (the sweep's, the workload's or the probe's); frees them before the
// backend is finalized.
class Buffers {
 public:
  explicit Buffers(Backend& backend) : backend_(backend) {}
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
  ~Buffers() {
    for (void* p : owned_) backend_.free(p);
  }
  void* alloc(size_t bytes) {
    owned_.reserve(owned_.size() + 1);  // so that push_back cannot throw and leak `p`
    void* p = backend_.alloc(bytes);
    owned_.push_back(p);
    return p;
  }

 private:
  Backend& backend_;
  std::vector<void*> owned_;
};

// A rank's setup, shared by the sweep, the workload and the probe: runs `setup`, then opens
// `json` on `json_path` (truncated) on world rank 0 when the path is not empty. Allocations and
// the JSON file can fail on one rank alone, so an exception from either is reported on this
// rank's stderr and counted, and the ranks agree on the count through the backend's own
// allreduce (via `scratch`, a backend buffer of at least one double) so that all of them stop
// cleanly instead of some waiting in a collective forever; world rank 0 reports how many failed.
// Returns whether none did. `rank` is this rank's world rank. Throws BackendError when that
// allreduce fails.
bool setup_on_all_ranks(Backend& backend, double* scratch, int rank, const std::string& json_path,
                        std::ofstream& json, const std::function<void()>& setup);

// Writes `line` and a newline to `json` (the --json file `path`, for the message) and flushes;
// reports a failure on stderr. Returns whether the stream is still good.
bool write_json_line(std::ofstream& json, const std::string& line, const std::string& path);

// Runs the benchmark and returns the exit code: 0, 1 when results were wrong or setup failed
// on some rank, 2 for a root outside the smallest group (the world) or more groups than ranks,
// or a Rejection's code. Those outcomes are known to
// every rank alike, so the backend may be finalized normally. Throws (BackendError,
// std::runtime_error) when this rank failed on its own, with the size and iteration in the message.
int run(Backend& backend, const Config& config);

}  // namespace nodecomm::bench
