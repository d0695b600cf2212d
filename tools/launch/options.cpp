#include "options.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <stdexcept>
#include <string_view>

#include "netsim.hpp"

namespace nodecomm::launch {
namespace {

// Generous bounds that still keep N * R and the mpirun --timeout argument far from overflow.
constexpr int kMaxNodes = 4096;
constexpr int kMaxRanksPerNode = 4096;
constexpr int kMaxTimeoutSeconds = 100'000'000;

constexpr const char* kDescription =
    "Simulates N nodecomm nodes on this machine: starts one nodecommd per node under a single "
    "mpirun, waits until every daemon is ready, runs R copies of PROGRAM per node attached to "
    "their node's daemon, then stops the daemons. With --backend mpi it runs the N*R copies of "
    "PROGRAM under one mpirun instead, with plain Open MPI and no daemons; --backend gloo "
    "likewise, for a PROGRAM that uses Gloo (told where to meet in NODECOMM_GLOO_STORE and "
    "which interface to use in GLOO_SOCKET_IFNAME). With --netsim RATE "
    "every node is a host in its own network namespace behind a link shaped to RATE (needs "
    "root), and the launcher removes all of it again at the end. Exit status: 0 if every rank "
    "exited 0, 1 on failure, 124 on --timeout, 128+N on signal N, 2 on bad flags.";

// Scripts parse stderr line by line, so a CLI11 message must stay on one line.
std::string one_line(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

void check_combinations(const CLI::App& app, Options& opts) {
  if (opts.backend != Backend::kNodecomm) {
    for (const char* flag : {"--daemon", "--daemon-arg"}) {
      if (app.count(flag) > 0) {
        throw std::invalid_argument(
            fmt::format("{} has no effect with --backend {}", flag, backend_name(opts.backend)));
      }
    }
  }
  if (app.count("--netsim") == 0) return;
  const auto bits = parse_tc_rate(opts.netsim_rate);
  if (!bits) {
    throw std::invalid_argument(fmt::format(
        "--netsim: '{}' is not a tc rate (a positive number with a unit such as 1gbit, 500mbit, "
        "100kbit or 125mbps)",
        opts.netsim_rate));
  }
  opts.netsim_bits_per_second = *bits;
  if (opts.nodes > kMaxNetsimHosts) {
    throw std::invalid_argument(
        fmt::format("--netsim simulates at most {} nodes, not {}", kMaxNetsimHosts, opts.nodes));
  }
}

}  // namespace

const char* backend_name(Backend backend) {
  switch (backend) {
    case Backend::kMpi:
      return "mpi";
    case Backend::kGloo:
      return "gloo";
    case Backend::kNodecomm:
      break;
  }
  return "nodecomm";
}

std::vector<int> parse_ranks_per_node(const std::string& text, int nodes) {
  std::vector<int> counts;
  size_t begin = 0;
  while (true) {
    const size_t end = std::min(text.find(',', begin), text.size());
    const std::string_view item(text.data() + begin, end - begin);
    int value = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size()) {
      throw std::invalid_argument(
          fmt::format("--ranks-per-node: '{}' is not a count in '{}'", item, text));
    }
    if (value < 1 || value > kMaxRanksPerNode) {
      throw std::invalid_argument(
          fmt::format("--ranks-per-node: {} is out of range [1, {}]", value, kMaxRanksPerNode));
    }
    counts.push_back(value);
    if (end == text.size()) break;
    begin = end + 1;
  }
  if (counts.size() == 1) return std::vector<int>(static_cast<size_t>(nodes), counts.front());
  if (counts.size() != static_cast<size_t>(nodes)) {
    throw std::invalid_argument(
        fmt::format("--ranks-per-node lists {} counts but --nodes is {}", counts.size(), nodes));
  }
  return counts;
}

ParseResult parse_options(int argc, char** argv) {
  Options opts;
  std::string ranks_per_node;
  CLI::App app{kDescription, "nodecomm-launch"};
  app.add_option("--nodes", opts.nodes, "Number of simulated nodes (one nodecommd each)")
      ->required()
      ->check(CLI::Range(1, kMaxNodes));
  app.add_option("--ranks-per-node", ranks_per_node,
                 "Copies of PROGRAM per node: one count, or a comma list with one per node")
      ->required();
  app.add_option("--timeout", opts.timeout_s,
                 "Seconds from launch until everything is killed (exit 124)")
      ->check(CLI::Range(1, kMaxTimeoutSeconds))
      ->capture_default_str();
  app.add_option("--daemon", opts.daemon,
                 "nodecommd to run (default: next to this executable, else from PATH)");
  app.add_option("--daemon-arg", opts.daemon_args,
                 "Extra argument for every daemon (repeatable; use --daemon-arg=--flag)")
      ->allow_extra_args(false);
  app.add_option("--mpirun", opts.mpirun,
                 "mpirun to start the daemons (with --backend mpi or gloo, the ranks) with")
      ->capture_default_str();
  app.add_flag("--verbose,-v", opts.verbose, "Report each launch step on stderr");
  std::string backend = "nodecomm";
  app.add_option("--backend", backend,
                 "nodecomm: daemons plus ranks; mpi: the ranks alone under one mpirun, plain "
                 "Open MPI; gloo: the same for Gloo (exported to PROGRAM as NODECOMM_BACKEND)")
      ->check(CLI::IsMember({"nodecomm", "mpi", "gloo"}))
      ->capture_default_str();
  app.add_option("--netsim", opts.netsim_rate,
                 "Simulated cluster network (root only): one network namespace per node, all "
                 "joined by a bridge, each link TBF-shaped to RATE both ways (tc syntax: 1gbit, "
                 "500mbit); exported to PROGRAM as NODECOMM_LINK_RATE")
      ->type_name("RATE");
  app.add_option("program", opts.program, "-- PROGRAM [ARGS...] to run on every rank")->required();

  try {
    app.parse(argc, argv);
    opts.ranks_per_node = parse_ranks_per_node(ranks_per_node, opts.nodes);
    opts.backend = backend == "mpi"    ? Backend::kMpi
                   : backend == "gloo" ? Backend::kGloo
                                       : Backend::kNodecomm;
    check_combinations(app, opts);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return {std::nullopt, 0};
  } catch (const CLI::CallForAllHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return {std::nullopt, 0};
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "nodecomm-launch: {} (see --help)\n", one_line(e.what()));
    return {std::nullopt, 2};
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "nodecomm-launch: {} (see --help)\n", one_line(e.what()));
    return {std::nullopt, 2};
  }
  if (!opts.netsim_rate.empty() && ::geteuid() != 0) {
    fmt::print(stderr,
               "nodecomm-launch: --netsim needs root: it creates network namespaces, veth pairs, "
               "a bridge and tc qdiscs (run it as root, e.g. with sudo)\n");
    return {std::nullopt, 2};
  }
  return {std::move(opts), 0};
}

}  // namespace nodecomm::launch
