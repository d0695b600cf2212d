// nodecomm-launch --attach: a job's ranks against the daemons of a running simulated service
// cluster (nodecomm-launch --service up). The ranks get the environment, timeout, output, exit
// status and teardown of a normal launch (launcher.cpp); no daemon is started or stopped, and
// none of the cluster's files is removed.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>

#include "launcher.hpp"
#include "service_state.hpp"

namespace nodecomm::launch {

int Launcher::run_attached_job() {
  setup();
  attach_to_cluster();
  start_ranks();
  if (!wait_ranks()) return abort_code_;
  // run() turns failed ranks into 1.
  return 0;
}

void Launcher::attach_to_cluster() {
  const ClusterState cluster = load_cluster(opts_.cluster);
  attached_daemons_ = cluster.nodes;
  link_rate_ = cluster.link_rate;
  for (int job_node = 0; job_node < opts_.nodes; ++job_node) {
    const int index = opts_.on_nodes.at(static_cast<size_t>(job_node));
    if (index >= cluster.nodes) {
      throw std::runtime_error(fmt::format(
          "job node {} is to run on cluster node {}, but cluster '{}' has nodes 0..{}{}", job_node,
          index, cluster.name, cluster.nodes - 1,
          opts_.nodes > cluster.nodes
              ? fmt::format(" (--nodes {} is more than it has)", opts_.nodes)
              : std::string(" (see --on-nodes)")));
    }
    const ClusterNode& node = cluster.node_list.at(static_cast<size_t>(index));
    if (!cluster_node_ready(node)) {
      throw std::runtime_error(
          fmt::format("cluster '{}' node {}: its daemon (pid {}) is not running or not ready (see "
                      "--service status --cluster {}; --service restart-node {} starts it again)",
                      cluster.name, index, node.pid, cluster.name, index));
    }
    attached_dirs_.push_back(node.runtime_dir);
    verbose(fmt::format("job node {} on cluster '{}' node {}: daemon pid {}, runtime dir {}",
                        job_node, cluster.name, index, node.pid, node.runtime_dir));
  }
  // Clients accept a daemon of root, their own uid or the user nodecomm; a cluster another user
  // brought up is one the caller chose by name.
  if (cluster.uid != 0 && cluster.uid != ::geteuid() &&
      std::getenv("NODECOMM_DAEMON_UID") == nullptr) {
    ::setenv("NODECOMM_DAEMON_UID", std::to_string(cluster.uid).c_str(), 1);
  }
  verbose(fmt::format("job {}: {} ranks on {} nodes of cluster '{}', no daemons started", job_,
                      total_ranks(), opts_.nodes, cluster.name));
}

}  // namespace nodecomm::launch
