#include "options.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <initializer_list>
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
    "exited 0, 1 on failure, 124 on --timeout, 128+N on signal N, 2 on bad flags. "
    "--service up|down|status|restart-node K manages a simulated cluster of persistent service "
    "daemons (nodecommd --transport service) that outlives the launcher, and --attach runs only "
    "a job's ranks against such a cluster.";

// NODECOMM_JOB travels in a 64-byte field with its terminating NUL.
constexpr size_t kMaxJobName = 63;
constexpr size_t kMaxClusterName = 40;

// Scripts parse stderr line by line, so a CLI11 message must stay on one line.
std::string one_line(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

const char* service_action_name(ServiceAction action) {
  switch (action) {
    case ServiceAction::kUp:
      return "up";
    case ServiceAction::kDown:
      return "down";
    case ServiceAction::kStatus:
      return "status";
    case ServiceAction::kRestartNode:
      return "restart-node";
    case ServiceAction::kNone:
      break;
  }
  return "";
}

// --service ACTION [K]: the action, and the node of restart-node.
void parse_service(const std::vector<std::string>& words, Options& opts) {
  const std::string& action = words.front();
  if (action == "up") {
    opts.service = ServiceAction::kUp;
  } else if (action == "down") {
    opts.service = ServiceAction::kDown;
  } else if (action == "status") {
    opts.service = ServiceAction::kStatus;
  } else if (action == "restart-node") {
    opts.service = ServiceAction::kRestartNode;
  } else {
    throw std::invalid_argument(
        fmt::format("--service: '{}' is not one of up, down, status, restart-node K", action));
  }
  if (opts.service != ServiceAction::kRestartNode) {
    if (words.size() > 1) {
      throw std::invalid_argument(
          fmt::format("--service {} takes no argument, got '{}'", action, words[1]));
    }
    return;
  }
  if (words.size() < 2) throw std::invalid_argument("--service restart-node needs a node index K");
  const std::string& text = words[1];
  int node = -1;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), node);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || node < 0 ||
      node >= kMaxNodes) {
    throw std::invalid_argument(fmt::format(
        "--service restart-node: '{}' is not a node index (0..{})", text, kMaxNodes - 1));
  }
  opts.restart_node = node;
}

// Flags that mean nothing in this mode are refused rather than ignored.
void refuse_flags(const CLI::App& app, std::initializer_list<const char*> flags,
                  const std::string& mode) {
  for (const char* flag : flags) {
    if (app.count(flag) > 0) {
      throw std::invalid_argument(fmt::format("{} has no effect with {}", flag, mode));
    }
  }
}

void require_flags(const CLI::App& app, std::initializer_list<const char*> flags,
                   const std::string& mode) {
  for (const char* flag : flags) {
    if (app.count(flag) == 0) {
      throw std::invalid_argument(mode.empty() ? fmt::format("{} is required", flag)
                                               : fmt::format("{} is required with {}", flag, mode));
    }
  }
}

// Which flags each mode takes: a normal launch, --attach, and each --service action.
void check_modes(const CLI::App& app, Options& opts, const std::string& ranks_per_node,
                 const std::string& on_nodes) {
  if (opts.service != ServiceAction::kNone && opts.attach) {
    throw std::invalid_argument("--service and --attach exclude each other");
  }
  if (opts.service != ServiceAction::kNone) {
    const std::string mode = fmt::format("--service {}", service_action_name(opts.service));
    refuse_flags(app,
                 {"--ranks-per-node", "--on-nodes", "--job", "--timeout", "--mpirun", "--backend"},
                 mode);
    if (!opts.program.empty()) {
      throw std::invalid_argument(fmt::format("{} runs no PROGRAM", mode));
    }
    if (opts.service == ServiceAction::kUp) {
      require_flags(app, {"--nodes"}, mode);
    } else {
      refuse_flags(app, {"--nodes", "--netsim", "--ompi-server"}, mode);
      if (opts.service != ServiceAction::kRestartNode) {
        refuse_flags(app, {"--daemon", "--daemon-arg"}, mode);
      }
    }
    if (opts.service == ServiceAction::kRestartNode) {
      // The node restarts with the command line it was started with.
      refuse_flags(app, {"--daemon", "--daemon-arg"}, mode);
    }
  } else {
    refuse_flags(app, {"--ompi-server"}, "a launch (only with --service up)");
    require_flags(app, {"--nodes", "--ranks-per-node"}, opts.attach ? "--attach" : "");
    if (opts.program.empty()) throw std::invalid_argument("-- PROGRAM is required");
    opts.ranks_per_node = parse_ranks_per_node(ranks_per_node, opts.nodes);
    if (opts.attach) {
      refuse_flags(app, {"--daemon", "--daemon-arg", "--mpirun", "--netsim"},
                   "--attach (the cluster's daemons are running already)");
      if (opts.backend != Backend::kNodecomm) {
        throw std::invalid_argument("--attach runs the nodecomm backend only");
      }
      if (app.count("--on-nodes") > 0) {
        opts.on_nodes = parse_on_nodes(on_nodes, opts.nodes);
      } else {
        for (int node = 0; node < opts.nodes; ++node) opts.on_nodes.push_back(node);
      }
    } else {
      refuse_flags(app, {"--cluster", "--on-nodes", "--job"}, "a launch (only with --attach)");
    }
  }
  if (app.count("--cluster") > 0) {
    if (const std::string problem = cluster_name_problem(opts.cluster); !problem.empty()) {
      throw std::invalid_argument("--cluster: " + problem);
    }
  }
  if (app.count("--job") > 0) {
    const bool printable = std::all_of(opts.job.begin(), opts.job.end(), [](char c) {
      return static_cast<unsigned char>(c) > ' ' && c != 0x7f;
    });
    if (opts.job.empty() || opts.job.size() > kMaxJobName || !printable) {
      throw std::invalid_argument(fmt::format(
          "--job: '{}' is not a job name (1..{} bytes, no blanks or control characters)", opts.job,
          kMaxJobName));
    }
  }
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

std::vector<int> parse_on_nodes(const std::string& text, int nodes) {
  std::vector<int> list;
  size_t begin = 0;
  while (true) {
    const size_t end = std::min(text.find(',', begin), text.size());
    const std::string_view item(text.data() + begin, end - begin);
    int value = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || value < 0 ||
        value >= kMaxNodes) {
      throw std::invalid_argument(
          fmt::format("--on-nodes: '{}' is not a cluster node index in '{}'", item, text));
    }
    if (std::find(list.begin(), list.end(), value) != list.end()) {
      throw std::invalid_argument(fmt::format(
          "--on-nodes lists cluster node {} twice: each job node needs a daemon of its own",
          value));
    }
    list.push_back(value);
    if (end == text.size()) break;
    begin = end + 1;
  }
  if (list.size() != static_cast<size_t>(nodes)) {
    throw std::invalid_argument(
        fmt::format("--on-nodes lists {} cluster nodes but --nodes is {}", list.size(), nodes));
  }
  return list;
}

std::string cluster_name_problem(const std::string& name) {
  const bool allowed = std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '.' || c == '-';
  });
  if (name.empty() || name.size() > kMaxClusterName || !allowed || name.front() == '.' ||
      name.front() == '-') {
    return fmt::format(
        "'{}' is not a cluster name (1..{} of A-Z a-z 0-9 _ . -, not starting with . or -)", name,
        kMaxClusterName);
  }
  return {};
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
  std::string on_nodes;
  std::vector<std::string> service;
  CLI::App app{kDescription, "nodecomm-launch"};
  // --nodes, --ranks-per-node and PROGRAM are required by mode (check_modes), not here.
  app.add_option("--nodes", opts.nodes,
                 "Number of simulated nodes (one nodecommd each); with --attach, the job's nodes")
      ->check(CLI::Range(1, kMaxNodes));
  app.add_option("--ranks-per-node", ranks_per_node,
                 "Copies of PROGRAM per node: one count, or a comma list with one per node");
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
  app.add_option("--service", service,
                 "up: start a simulated cluster of --nodes persistent service daemons (and its "
                 "ompi-server) that outlives the launcher; down: stop it and remove its files; "
                 "status: one line per node; restart-node K: kill -9 node K's daemon and start "
                 "it again")
      ->type_name("ACTION [K]")
      ->expected(1, 2)
      ->allow_extra_args(false);
  app.add_option("--cluster", opts.cluster,
                 "Name of the simulated service cluster (state in /tmp/nodecomm-cluster.NAME)")
      ->capture_default_str();
  app.add_flag("--attach", opts.attach,
               "Start only the job's ranks, against the running cluster --cluster: no daemon "
               "is started or stopped");
  app.add_option("--on-nodes", on_nodes,
                 "With --attach: the cluster node of each job node, a comma list (default "
                 "0,1,...,N-1)")
      ->type_name("LIST");
  app.add_option("--job", opts.job,
                 "With --attach: NODECOMM_JOB of the ranks (default launch-PID)");
  app.add_option("--ompi-server", opts.ompi_server,
                 "With --service up: the rendezvous server to start (Open MPI's ompi-server)")
      ->capture_default_str();
  app.add_option("program", opts.program, "-- PROGRAM [ARGS...] to run on every rank");

  try {
    app.parse(argc, argv);
    if (!service.empty()) parse_service(service, opts);
    opts.backend = backend == "mpi"    ? Backend::kMpi
                   : backend == "gloo" ? Backend::kGloo
                                       : Backend::kNodecomm;
    check_modes(app, opts, ranks_per_node, on_nodes);
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
