// The state of a simulated service cluster (nodecomm-launch --service, service_cluster.hpp):
// what runs where, recorded in its state directory for `down`, `status`, `restart-node` and
// --attach, which may run from other shells and as other users.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace nodecomm::launch {

// Everything of cluster NAME lives in /tmp/nodecomm-cluster.NAME (short, for sun_path):
// state.json, daemon-env.json (0600), rendezvous.uri, ompi-server.log, node<i>.log and the
// daemons' runtime directories node<i>/.
inline constexpr const char* kClusterDirPrefix = "/tmp/nodecomm-cluster.";
inline constexpr const char* kStateFile = "state.json";

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

// Writes `state` to DIR/state.json (0644), through a temporary file and a rename: readers
// (--attach, status) never see half a file.
void save_cluster_state(const ClusterState& state, const std::string& dir);

// A whole file; empty if it cannot be read.
std::string read_text_file(const std::string& path);
// Writes `text` to `path` with `mode` (whatever the umask) through a temporary file and a rename.
void write_file_atomic(const std::string& path, const std::string& text, mode_t mode);

}  // namespace nodecomm::launch
