// nodecomm-bench: latency and bandwidth of nodecomm's collectives or, as a baseline, MPI's,
// printed as an nccl-tests-style table (see --help).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "backend.hpp"
#include "bench.hpp"
#include "check.hpp"
#include "collectives.hpp"
#include "nodecomm.h"
#include "workload.hpp"

namespace {

// "f32 f64 ..." from the library's own tables, so new dtypes show up without edits here.
template <class Enum>
std::string names(const char* (*name_of)(Enum)) {
  std::string out;
  for (int i = 0; name_of(static_cast<Enum>(i)) != nullptr; ++i) {
    if (!out.empty()) out += ' ';
    out += name_of(static_cast<Enum>(i));
  }
  return out;
}

const CLI::Validator kByteCount(
    [](std::string& text) { return nodecomm::bench::bad_byte_count(text); }, "BYTES");

std::string bad_link_rate(const std::string& text) {
  return fmt::format(
      "'{}' is not a link rate such as 1gbit, 2.5gbit, 500mbit or 100mbps (tc's units: "
      "[k|m|g|t|ki|mi|gi|ti]bit for bits/s, [k|m|g|t|ki|mi|gi|ti]bps for bytes/s)",
      text);
}

const CLI::Validator kLinkRate(
    [](std::string& text) {
      return nodecomm::bench::parse_link_rate(text) ? std::string() : bad_link_rate(text);
    },
    "RATE");

// An environment variable's value; empty when unset or empty.
std::string env_or_empty(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::string(value) : std::string();
}

uint64_t bytes_or_throw(const std::string& text, const char* flag) {
  if (auto bytes = nodecomm::bench::parse_bytes(text)) return *bytes;
  throw CLI::ValidationError(
      flag, nodecomm::bench::bad_byte_count(text));  // the validator normally catches it
}

struct Flags {
  std::string op = "allreduce";
  int root = 0;
  std::string dtype = "f32";
  std::string redop = "sum";
  std::string min_bytes = "8";
  std::string max_bytes = "64M";
  uint64_t factor = 2;
  std::vector<std::string> sizes;
  int iters = 20;
  int warmup = 5;
  bool check = false;
  std::string json;
  std::string timeline;
  std::string backend;    // empty: NODECOMM_BACKEND, else nodecomm
  std::string link_rate;  // empty: NODECOMM_LINK_RATE, else not known
  bool inplace = false;
  bool no_arena = false;
  std::string comm = "world";
};

// Everything a bad flag can be is found here, before any backend starts, so that it is one
// line and exit code 2 on every rank alike.
nodecomm::bench::Config to_config(const Flags& f, const CLI::App& app) {
  nodecomm::bench::Config c;
  const auto collective = nodecomm::bench::parse_collective(f.op);
  if (!collective) {
    throw CLI::ValidationError("--op", fmt::format("unknown collective '{}' (one of: {})", f.op,
                                                   nodecomm::bench::collective_names()));
  }
  c.collective = *collective;
  c.root = f.root;
  if (f.inplace && c.collective == nodecomm::bench::Collective::kAlltoall) {
    throw CLI::ValidationError("--inplace",
                               "alltoall has no in-place form (send and recv must not overlap)");
  }
  if (f.inplace && nodecomm::bench::is_vector(c.collective)) {
    throw CLI::ValidationError("--inplace",
                               fmt::format("{} has no in-place form (not supported)", f.op));
  }
  const auto split_groups = nodecomm::bench::parse_comm(f.comm);
  if (!split_groups) {
    throw CLI::ValidationError("--comm",
                               fmt::format("'{}' is not world or split:K with K >= 1", f.comm));
  }
  c.split_groups = *split_groups;
  if (nc_dtype_parse(f.dtype.c_str(), &c.dtype) != NC_OK) {
    throw CLI::ValidationError(
        "--dtype", fmt::format("unknown dtype '{}' (one of: {})", f.dtype, names(&nc_dtype_name)));
  }
  if (nc_redop_parse(f.redop.c_str(), &c.redop) != NC_OK) {
    throw CLI::ValidationError(
        "--redop", fmt::format("unknown redop '{}' (one of: {})", f.redop, names(&nc_redop_name)));
  }
  const size_t element = nodecomm::bench::dtype_bytes(c.dtype);
  if (!f.sizes.empty()) {
    std::vector<uint64_t> bytes;
    for (const std::string& s : f.sizes) bytes.push_back(bytes_or_throw(s, "--sizes"));
    c.sizes = nodecomm::bench::rounded_sizes(bytes, element);
  } else {
    const uint64_t min = bytes_or_throw(f.min_bytes, "--min-bytes");
    const uint64_t max = bytes_or_throw(f.max_bytes, "--max-bytes");
    if (min > max) {
      throw CLI::ValidationError(
          "--min-bytes", fmt::format("{} is larger than --max-bytes {}", f.min_bytes, f.max_bytes));
    }
    c.sizes = nodecomm::bench::geometric_sizes(min, max, f.factor, element);
  }
  c.iters = f.iters;
  c.warmup = f.warmup;
  c.iters_explicit = app.count("--iters") > 0;
  c.warmup_explicit = app.count("--warmup") > 0;
  c.check = f.check;
  c.inplace = f.inplace;
  c.json_path = f.json;
  c.timeline_path = f.timeline;
  if (!f.link_rate.empty()) {
    // Validated already, but a second look costs nothing.
    const auto rate = nodecomm::bench::parse_link_rate(f.link_rate);
    if (!rate) throw CLI::ValidationError("--link-rate", bad_link_rate(f.link_rate));
    c.link_rate = *rate;
    c.link_rate_text = f.link_rate;
  }
  return c;
}

int bench_main(int argc, char** argv) {
  const double started_at = nodecomm::bench::wall_seconds();
  CLI::App app{
      "nodecomm-bench: collective latency and bandwidth, nccl-tests style.\n"
      "With --backend nodecomm run it under nodecomm-launch; with --backend mpi or gloo\n"
      "under nodecomm-launch --backend mpi|gloo, or mpirun. Rank 0 prints the table; times are per "
      "iteration, averaged over ranks.\n"
      "Sizes, counts and busbw follow nccl-tests: `size` is the larger of the send and\n"
      "receive buffer, `count` the count argument of the call (per rank for\n"
      "reduce_scatter, allgather, gather, scatter and alltoall; nominal per rank for\n"
      "allgatherv and alltoallv, whose runs are count-1, count or count+1 elements).",
      "nodecomm-bench"};
  Flags f;
  // Checked in to_config, so that a bad name is one line naming every valid one.
  app.add_option("--op", f.op,
                 "Collective: allreduce reduce broadcast reduce_scatter allgather allgatherv "
                 "gather scatter alltoall alltoallv barrier")
      ->capture_default_str();
  app.add_option("--comm", f.comm,
                 "Where the collective runs: world, or split:K for K groups made by a split "
                 "(color world_rank % K, key world_rank); sizes, roots and busbw are the group's")
      ->capture_default_str();
  app.add_option("--root", f.root, "Root rank of reduce, broadcast, gather and scatter")
      ->check(CLI::Range(0, INT32_MAX))
      ->capture_default_str();
  app.add_option("--dtype", f.dtype, "Element type: f32 f64 i32 i64 f16 bf16 i8 u8")
      ->capture_default_str();
  app.add_option("--redop", f.redop,
                 "Reduction of allreduce, reduce and reduce_scatter: sum prod min max avg")
      ->capture_default_str();
  app.add_option("--min-bytes", f.min_bytes, "Smallest size (K/M/G = powers of 1024)")
      ->check(kByteCount)
      ->capture_default_str();
  app.add_option("--max-bytes", f.max_bytes, "Largest size, inclusive")
      ->check(kByteCount)
      ->capture_default_str();
  app.add_option("--factor", f.factor, "Multiplier between consecutive sizes")
      ->check(CLI::Range(uint64_t{2}, uint64_t{1} << 32))
      ->capture_default_str();
  app.add_option("--sizes", f.sizes,
                 "Comma-separated sizes in bytes; overrides --min-bytes/--max-bytes/--factor")
      ->delimiter(',')
      ->check(kByteCount);
  app.add_option("--iters", f.iters,
                 "Timed iterations per size (default 20, reduced above ~100 MiB to move at most "
                 "2 GiB per size unless given)")
      ->check(CLI::Range(1, 1 << 30));
  app.add_option("--warmup", f.warmup,
                 "Untimed iterations per size (default 5, reduced above ~100 MiB to move at most "
                 "512 MiB per size unless given)")
      ->check(CLI::Range(0, 1 << 30));
  app.add_flag("--check", f.check,
               "Verify every element of one run per size against an independent reference");
  app.add_option("--json", f.json, "Also write one JSON object per size to FILE (JSON Lines)")
      ->type_name("FILE");
  app.add_option("--timeline", f.timeline,
                 "Also write one line per timed iteration to FILE: \"BYTES INDEX START END\", "
                 "wall-clock seconds on rank 0 (to compare runs over the same window), after "
                 "\"# started S first-collective E\": the last rank's start and when the first "
                 "collective had completed on every rank")
      ->type_name("FILE");
  app.add_option("--backend", f.backend,
                 "nodecomm (under nodecomm-launch), mpi (under mpirun, or nodecomm-launch "
                 "--backend mpi) or gloo (Gloo's collectives over TCP, under nodecomm-launch "
                 "--backend gloo or mpirun); default: $NODECOMM_BACKEND, else nodecomm")
      ->check(CLI::IsMember({"nodecomm", "mpi", "gloo"}));
  app.add_option("--link-rate", f.link_rate,
                 "Each node's link rate, tc-style (1gbit, 500mbit, 100mbps = bytes/s); default: "
                 "$NODECOMM_LINK_RATE. Adds the link efficiency, algbw x F / rate with N "
                 "nodes and F the busbw factor over nodes (allreduce 2(N-1)/N, reduce_scatter and "
                 "allgather(v) (N-1)/N, broadcast and reduce 1), as `# linkeff SIZE:EFF...` "
                 "under the table and \"linkeff\" "
                 "in --json")
      ->check(kLinkRate);
  app.add_flag("--inplace", f.inplace,
               "In place, as nodecomm.h documents per collective (not for alltoall, allgatherv "
               "and alltoallv; ignored for barrier)");
  app.add_flag("--no-arena", f.no_arena,
               "nodecomm: malloc'd buffers, which the library copies through its arena, "
               "instead of nc_alloc'd ones");

  nodecomm::bench::ExtraFlags xf;  // --workload, --priority-probe, --batch, --compress, ...
  nodecomm::bench::add_extra_flags(app, xf);

  nodecomm::bench::Config config;
  nodecomm::bench::RunMode mode;
  try {
    app.parse(argc, argv);
    // Defaults from the launcher's environment, checked as strictly as the flags.
    if (f.backend.empty()) {
      f.backend = env_or_empty("NODECOMM_BACKEND");
      if (f.backend.empty()) f.backend = "nodecomm";
      if (f.backend != "nodecomm" && f.backend != "mpi" && f.backend != "gloo") {
        throw CLI::ValidationError("NODECOMM_BACKEND",
                                   fmt::format("'{}' is not nodecomm, mpi or gloo", f.backend));
      }
    }
    if (f.link_rate.empty()) {
      f.link_rate = env_or_empty("NODECOMM_LINK_RATE");
      if (!f.link_rate.empty() && !nodecomm::bench::parse_link_rate(f.link_rate)) {
        throw CLI::ValidationError("NODECOMM_LINK_RATE", bad_link_rate(f.link_rate));
      }
    }
    config = to_config(f, app);
    config.started_at = started_at;
    // Also sets the daemon's runtime parameters in the environment, for nc_init.
    mode = nodecomm::bench::resolve_run_mode(xf, app, f.backend, config);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "nodecomm-bench: error: %s (see --help)\n", e.what());
    return 2;
  }

  if (xf.print_layers) {
    if (mode.kind != nodecomm::bench::RunMode::kWorkload) {
      std::fprintf(stderr, "nodecomm-bench: error: --print-layers needs --workload (see --help)\n");
      return 2;
    }
    fmt::print("# {}: {} layers in backprop order, name elements compute_us\n", xf.workload,
               mode.workload.layers.size());
    for (const auto& layer : mode.workload.layers)
      fmt::print("{} {} {:.3f}\n", layer.name, layer.count, layer.compute_us);
    return 0;
  }

  std::unique_ptr<nodecomm::bench::Backend> backend;
  try {
    if (f.backend == "mpi") {
      backend = nodecomm::bench::make_mpi_backend();
    } else if (f.backend == "gloo") {
      backend = nodecomm::bench::make_gloo_backend();
    } else {
      nodecomm::bench::NodecommBackendOptions options;
      options.arena_bytes = mode.arena_bytes;
      options.use_arena = !f.no_arena;
      backend = nodecomm::bench::make_nodecomm_backend(options);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "nodecomm-bench: error: starting the {} backend: {}\n", f.backend, e.what());
    return 1;
  }

  const int rank = backend->world_rank();
  if (rank == 0 && !mode.note.empty()) fmt::print(stderr, "nodecomm-bench: note: {}\n", mode.note);
  try {
    int rc = 0;
    switch (mode.kind) {
      case nodecomm::bench::RunMode::kSweep:
        rc = nodecomm::bench::run(*backend, config);
        break;
      case nodecomm::bench::RunMode::kWorkload:
        rc = nodecomm::bench::run_workload(*backend, mode.workload);
        break;
      case nodecomm::bench::RunMode::kProbe:
        rc = nodecomm::bench::run_probe(*backend, mode.probe);
        break;
      case nodecomm::bench::RunMode::kSoak:
        mode.soak.json_path = f.json;
        rc = nodecomm::bench::run_soak(*backend, mode.soak);
        break;
    }
    backend->finalize(true);
    return rc;
  } catch (const std::exception& e) {
    std::fflush(stdout);  // the rows measured so far, before the error
    fmt::print(stderr, "nodecomm-bench: rank {}: error: {}\n", rank, e.what());
    backend->finalize(false);
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return bench_main(argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "nodecomm-bench: error: {}\n", e.what());
    return 1;
  }
}
