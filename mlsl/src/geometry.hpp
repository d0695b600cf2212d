// The arithmetic of the MLSL-compatible layer (issue 22): how MLSL lays a world of processes
// out in data and model groups, and how it cuts minibatches and parameter sets between them.
// Pure functions of the arguments (no nodecomm calls), so every rank computes the same answer
// and the unit tests check the rules without a daemon. Written from MLSL's public API
// documentation and headers as a specification (docs/MLSL.md).
#pragma once

#include <cstddef>

namespace nodecomm::mlsl {

// One process's place in a Distribution(data_parts D, model_parts M) over a world of n
// processes, n a multiple of D×M. With L = D×M the world is n / L independent replicas; in each,
// a model group is M consecutive processes and a data group the D processes M apart. Colors are
// unique across replicas, so one split per kind makes every group of the world.
struct GroupLayout {
  int replica = 0;
  int model_color = 0;
  int model_index = 0;  // rank in the model group
  int model_size = 0;   // M
  int data_color = 0;
  int data_index = 0;  // rank in the data group
  int data_size = 0;   // D
};

// Throws std::invalid_argument (naming n, D and M) when D < 1, M < 1, n is not a multiple of
// D×M or `global` is not in 0..n-1.
GroupLayout grid_layout(int global, int world, int data_parts, int model_parts);

// Operation::GetLocalMinibatchSize / GetGlobalMinibatchOffset: the global minibatch split
// evenly over the data group (the remainder is dropped, as MLSL drops it).
struct MinibatchSlice {
  size_t local = 0;
  size_t offset = 0;
};
MinibatchSlice minibatch_slice(size_t global, int data_size, int data_index);

// A ParameterSet of `kernels` kernels: the model group splits the kernels (local = K / M,
// remainder dropped as in MLSL); with distributed update the data group splits the local part
// again (owned = ceil(local / D)) and local is padded to owned × D, so reduce-scatter and
// allgather see equal blocks.
struct ParameterPartition {
  size_t local = 0;          // kernels this process holds (padded with distributed update)
  size_t global_offset = 0;  // of its first local kernel in the whole set (before padding)
  size_t owned = 0;          // kernels it updates
  size_t owned_offset = 0;   // of its first owned kernel within its local kernels
  bool exchange = false;     // D > 1: gradients cross the data group
};
ParameterPartition parameter_partition(size_t kernels, int model_size, int model_index,
                                       int data_size, int data_index, bool distributed_update);

}  // namespace nodecomm::mlsl
