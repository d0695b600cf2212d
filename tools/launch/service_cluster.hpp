// nodecomm-launch --service: a simulated cluster of persistent service daemons (nodecommd
// --transport service), one per simulated node, plus the rendezvous server (ompi-server) that
// their multi-node jobs form groups through. Unlike a launch's daemons they outlive the
// launcher: `up` starts them detached and records them in a state directory, `down` stops
// them and removes everything, and `nodecomm-launch --attach` starts a job's ranks against them.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "options.hpp"

namespace nodecomm::launch {

// Everything of cluster NAME lives in /tmp/nodecomm-cluster.NAME (short, for sun_path):
// state.json, daemon-env.json (0600), rendezvous.uri, ompi-server.log, node<i>.log and the
// daemons' runtime directories node<i>/.
inline constexpr const char* kClusterDirPrefix = "/tmp/nodecomm-cluster.";

// One daemon of the cluster, as the state file records it.
struct ClusterNode {
  int index = 0;
  std::string instance;           // <cluster>-node<index>
  std::string runtime_dir;        // <dir>/node<index>
  std::string log;                // <dir>/node<index>.log: its stdout and stderr
  std::vector<std::string> argv;  // its command line, the executable first
  pid_t pid = -1;                 // -1 until started
  unsigned long long start_time = 0;
  std::string netns;  // its network namespace under --netsim, else empty
};

struct ClusterState {
  std::string name;
  std::string dir;
  uid_t uid = 0;
  int nodes = 0;
  std::string daemon;      // nodecommd's path
  std::string rendezvous;  // the URI file ompi-server writes (-r) and the daemons read
  std::vector<std::string> server_argv;
  pid_t server_pid = -1;
  unsigned long long server_start_time = 0;
  std::string server_log;
  // --netsim: the link rate and the namespaces (the switch's first), else empty.
  std::string link_rate;
  std::vector<std::string> namespaces;
  std::vector<ClusterNode> node_list;
};

std::string cluster_dir(const std::string& name);

// Reads the state of cluster `name`. Throws std::runtime_error when no such cluster is up, or
// its state directory is not one the cluster's owner made (a symlink, writable by others).
ClusterState load_cluster(const std::string& name);

// True while node `node`'s daemon runs and has written its ready file.
bool cluster_node_ready(const ClusterNode& node);

// --service up|down|status|restart-node K. Returns the launcher's exit status.
int run_service(const Options& opts);

}  // namespace nodecomm::launch
