#include "config.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "nodecomm/proto/abi.hpp"

namespace nodecomm::daemon {

uint64_t parse_bytes(const std::string& text) {
  size_t used = 0;
  const unsigned long long value = std::stoull(text, &used, 10);
  const std::string suffix = text.substr(used);
  uint64_t scale = 1;
  if (suffix.empty() || suffix == "B") {
    scale = 1;
  } else if (suffix == "K" || suffix == "k" || suffix == "KiB") {
    scale = 1ULL << 10;
  } else if (suffix == "M" || suffix == "m" || suffix == "MiB") {
    scale = 1ULL << 20;
  } else if (suffix == "G" || suffix == "g" || suffix == "GiB") {
    scale = 1ULL << 30;
  } else {
    throw std::invalid_argument("unknown size suffix '" + suffix + "' in '" + text + "'");
  }
  return value * scale;
}

std::string expand_node(std::string text, uint32_t node) {
  const std::string token = "{node}";
  for (size_t pos = text.find(token); pos != std::string::npos; pos = text.find(token, pos)) {
    text.replace(pos, token.size(), std::to_string(node));
  }
  return text;
}

DaemonConfig parse_config(int argc, char** argv) {
  DaemonConfig c;
  CLI::App app{
      "nodecommd: the nodecomm node daemon. Runs collectives for the training processes "
      "of this node over shared memory and drives the network (MPI) for them.",
      "nodecommd"};
  std::string default_arena = "64M";
  std::string max_arena = "16G";
  std::string staging_cache = "1G";
  std::string log_level = "info";
  std::string algorithm = "auto";
  std::string small_bytes = std::to_string(c.tuning.small_bytes);
  std::string chunk_bytes = std::to_string(c.tuning.chunk_bytes);
  std::string priority_policy = "direct";
  std::string fusion = "on";
  std::string fusion_threshold = std::to_string(c.sched.fusion_threshold_bytes);
  std::string sched_chunk = std::to_string(c.sched.chunk_bytes);
  std::string sched_window = std::to_string(c.sched.window_bytes);
  app.add_option("--instance", c.instance,
                 "Instance name; '{node}' is replaced by the node index (MPI rank)")
      ->capture_default_str();
  app.add_option("--runtime-dir", c.runtime_dir,
                 "Directory for the socket and ready file (default: <runtime base>/<instance>); "
                 "'{node}' is replaced by the node index");
  app.add_option("--cores", c.cores,
                 "CPUs to pin the daemon to: a list such as 3 or 2-3 (hwloc syntax), 'auto' (the "
                 "last core of the first NUMA domain) or 'none'")
      ->capture_default_str();
  app.add_option("--transport", c.transport, "Inter-node transport")
      ->check(CLI::IsMember({"mpi", "loopback"}))
      ->capture_default_str();
  app.add_option("--default-arena", default_arena, "Arena size for clients that ask for none")
      ->capture_default_str();
  app.add_option("--max-arena", max_arena, "Largest arena one client may ask for")
      ->capture_default_str();
  app.add_option("--max-clients", c.max_clients, "Clients attached at once")
      ->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  app.add_option("--ring-capacity", c.ring_capacity,
                 "Submission and completion ring entries per client (power of two)")
      ->check(CLI::Range(2u, 1u << 16))
      ->capture_default_str();
  app.add_option("--staging-cache", staging_cache, "Staging memory kept for reuse")
      ->capture_default_str();
  app.add_option("--log-level", log_level, "error, warn, info or debug")
      ->check(CLI::IsMember({"error", "warn", "info", "debug"}))
      ->capture_default_str();
  app.add_option("--allreduce-algorithm", algorithm,
                 "Inter-node allreduce: auto (rd up to --small-bytes, ring above), ring, rd "
                 "(recursive doubling) or mpi (MPI_Iallreduce)")
      ->check(CLI::IsMember({"auto", "ring", "rd", "recursive-doubling", "mpi"}))
      ->capture_default_str();
  app.add_option("--small-bytes", small_bytes,
                 "auto: allreduces of at most this many bytes use recursive doubling")
      ->capture_default_str();
  app.add_option("--chunk-size", chunk_bytes, "Ring slice size in bytes (K, M suffixes)")
      ->capture_default_str();
  app.add_option("--pipeline-depth", c.tuning.pipeline_depth, "Ring slices in flight per node")
      ->check(CLI::Range(1u, 1024u))
      ->capture_default_str();
  app.add_option("--endpoints", c.tuning.endpoints,
                 "Lanes (MPI communicators) the ring spreads its slices over, like MLSL's epNum")
      ->check(CLI::Range(1u, 64u))
      ->capture_default_str();
  app.add_option("--lanes", c.lanes,
                 "Lanes opened at start; --endpoints can later use at most this many")
      ->check(CLI::Range(1u, 64u))
      ->capture_default_str();
  app.add_option("--idle", c.idle,
                 "How the daemon waits for clients: auto (spin unless its clients outnumber "
                 "the CPUs), spin (a dedicated core) or backoff (a shared machine)")
      ->check(CLI::IsMember({"auto", "spin", "backoff"}))
      ->capture_default_str();
  app.add_option("--net-park-min-us", c.net_park_min_us,
                 "While the network is busy: first sleep between polls (microseconds)")
      ->check(CLI::Range(0u, 100000u))
      ->capture_default_str();
  app.add_option("--net-park-max-us", c.net_park_max_us,
                 "While the network is busy: longest sleep between polls (microseconds)")
      ->check(CLI::Range(0u, 100000u))
      ->capture_default_str();
  app.add_option("--priority-policy", priority_policy,
                 "Order of ready operations on the network: none (submission order), direct "
                 "(the caller's priority, higher first) or lifo (latest submission first)")
      ->check(CLI::IsMember({"none", "direct", "lifo"}))
      ->capture_default_str();
  app.add_option("--fusion", fusion, "Pack small ready allreduces into one transfer")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  app.add_option("--fusion-threshold", fusion_threshold,
                 "Largest fused transfer in bytes (K, M suffixes), as HOROVOD_FUSION_THRESHOLD")
      ->capture_default_str();
  app.add_option("--fusion-cycle-us", c.sched.fusion_cycle_us,
                 "Shortest time between two scheduling rounds (microseconds), as "
                 "HOROVOD_CYCLE_TIME")
      ->check(CLI::Range(0u, 10000000u))
      ->capture_default_str();
  app.add_option("--sched-chunk-size", sched_chunk,
                 "Bytes one scheduling round hands out: large operations go out in chunks of "
                 "this size, and a higher-priority operation overtakes at the next chunk")
      ->capture_default_str();
  app.add_option("--sched-window", sched_window,
                 "Scheduled bytes on the network above which no new round starts")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
    c.sched.policy = parse_priority_policy(priority_policy);
    c.sched.fusion = fusion == "on";
    c.sched.fusion_threshold_bytes = parse_bytes(fusion_threshold);
    c.sched.chunk_bytes = parse_bytes(sched_chunk);
    c.sched.window_bytes = parse_bytes(sched_window);
    if (c.sched.chunk_bytes == 0) throw CLI::ValidationError("--sched-chunk-size", "must be > 0");
    c.tuning.allreduce = parse_algorithm(algorithm);
    c.tuning.small_bytes = parse_bytes(small_bytes);
    c.tuning.chunk_bytes = parse_bytes(chunk_bytes);
    if (c.tuning.chunk_bytes == 0) throw CLI::ValidationError("--chunk-size", "must be > 0");
    c.lanes = std::max(c.lanes, c.tuning.endpoints);
    if (!proto::is_power_of_two(c.ring_capacity)) {
      throw CLI::ValidationError("--ring-capacity", "must be a power of two");
    }
    c.default_arena_bytes = parse_bytes(default_arena);
    c.max_arena_bytes = parse_bytes(max_arena);
    c.staging_cache_bytes = parse_bytes(staging_cache);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    std::exit(0);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "nodecommd: %s (see --help)\n", e.what());
    std::exit(2);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nodecommd: bad size: %s (see --help)\n", e.what());
    std::exit(2);
  }
  const std::string levels[] = {"error", "warn", "info", "debug"};
  for (int i = 0; i < 4; ++i) {
    if (levels[i] == log_level) c.log_level = static_cast<LogLevel>(i);
  }
  return c;
}

}  // namespace nodecomm::daemon
