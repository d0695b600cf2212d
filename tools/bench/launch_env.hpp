// What nodecomm-launch tells a baseline's ranks (--backend mpi or gloo) about the simulated
// cluster: to Open MPI or Gloo every simulated node is this one machine, so the launcher says
// how many nodes the ranks stand for and which one each rank is on.
#pragma once

namespace nodecomm::bench {

// An index in [0, max) from the environment; -1 when unset or anything else.
int env_index(const char* name, int max);
// A count in [1, max] from the environment; 0 when unset or anything else.
int env_count(const char* name, int max);

struct LaunchLayout {
  int nodes = 0;       // 0: not under nodecomm-launch (NODECOMM_NODES unset)
  int local_size = 0;  // this rank's node's rank count
  int node = -1;       // this rank's node index; -1 if not given
};

// NODECOMM_NODES, NODECOMM_LOCAL_SIZE and NODECOMM_NODE, checked against the world size.
LaunchLayout launch_layout(int world_size);

}  // namespace nodecomm::bench
