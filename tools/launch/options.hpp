// Command line of nodecomm-launch. Users' job scripts depend on these flags: keep them stable.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace nodecomm::launch {

// nodecomm: daemons under mpirun, the ranks attached to them. mpi: the ranks under mpirun alone,
// plain Open MPI, as the baseline. gloo: the ranks under mpirun alone too, started as plain
// processes that use Gloo over TCP (the second baseline).
enum class Backend { kNodecomm, kMpi, kGloo };

// --service: what to do with a simulated cluster of persistent service daemons
// (service_cluster.hpp). kNone: a normal launch, or --attach.
enum class ServiceAction { kNone, kUp, kDown, kStatus, kRestartNode };

// The name PROGRAM sees in NODECOMM_BACKEND.
const char* backend_name(Backend backend);

struct Options {
  int nodes = 0;
  // One count per node, already expanded from a single value or checked against --nodes.
  std::vector<int> ranks_per_node;
  int timeout_s = 600;
  // Empty: nodecommd next to the launcher's own executable, else from PATH.
  std::string daemon;
  std::vector<std::string> daemon_args;
  std::string mpirun = "mpirun";
  bool verbose = false;
  Backend backend = Backend::kNodecomm;
  // --netsim: the link rate as given ("1gbit"), empty without --netsim, and in bit/s.
  std::string netsim_rate;
  double netsim_bits_per_second = 0;
  // PROGRAM and its arguments.
  std::vector<std::string> program;

  // --service up|down|status|restart-node K and --cluster NAME.
  ServiceAction service = ServiceAction::kNone;
  int restart_node = -1;
  std::string cluster = "sim";
  // ompi-server for --service up (the rendezvous server of the cluster's daemons).
  std::string ompi_server = "ompi-server";
  // --attach: only the ranks, against the running cluster `cluster`; job node k runs on
  // cluster node on_nodes[k] (filled in as 0..nodes-1 when not given).
  bool attach = false;
  std::vector<int> on_nodes;
  // NODECOMM_JOB of the ranks; empty: launch-<pid>.
  std::string job;
};

struct ParseResult {
  // Absent when the launcher must exit right away with `exit_code` (--help, bad flags).
  std::optional<Options> options;
  int exit_code = 0;
};

// Parses argv; prints help or a one-line error itself.
ParseResult parse_options(int argc, char** argv);

// "4" (every node) or "3,1,2" (one per node, exactly `nodes` of them), each >= 1.
// Throws std::invalid_argument with a message fit for the user.
std::vector<int> parse_ranks_per_node(const std::string& text, int nodes);

// "0,2" for --on-nodes: exactly `nodes` distinct cluster node indices, each >= 0. Throws
// std::invalid_argument with a message fit for the user.
std::vector<int> parse_on_nodes(const std::string& text, int nodes);

// A cluster name fit for paths and instance names: 1..40 of [A-Za-z0-9_.-], not starting
// with '.' or '-'. Empty if fine, else why not.
std::string cluster_name_problem(const std::string& name);

}  // namespace nodecomm::launch
