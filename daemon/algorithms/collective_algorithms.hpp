// Inter-node algorithms for the collectives other than allreduce, as resumable state machines
// over point-to-point messages like the allreduce ones (allreduce_algorithms.hpp), chunked and
// pipelined the same way (slices of about --chunk-size, --pipeline-depth of them in flight,
// spread over --endpoints lanes), with the same hooks:
//   ring reduce-scatter: the first half of the ring allreduce; node n ends with its block n,
//                        every node sends and receives (N-1)/N of the buffer;
//   ring allgather:      the second half; every node starts with its block and ends with all;
//   chain broadcast:     root -> root+1 -> ... -> root-1, slice by slice: every link carries
//                        the buffer once, and the pipeline fills in N-1 slice times;
//   chain reduce:        root+1 -> root+2 -> ... -> root, each node adding its contribution
//                        on the way: every link carries the buffer once.
// Blocks may differ in size from node to node (uneven node sizes, allgatherv), even be empty:
// both ends of every message cut the same slices from sizes every node knows alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "algorithms/allreduce_algorithms.hpp"
#include "algorithms/allreduce_hooks.hpp"
#include "config/tuning.hpp"
#include "net/p2p.hpp"
#include "nodecomm/proto/types.hpp"

namespace nodecomm::daemon {

// Whether the collectives other than allreduce run as our pipelined algorithms (true) or as
// the transport's native ones, for a buffer of `bytes` on `nodes` nodes (kAuto resolved).
bool choose_pipelined(const AlgorithmTuning& tuning, size_t bytes, uint32_t nodes);

// Node n's block is `counts[n]` elements, right after node n-1's, from element 0 of `buffer`.
struct BlocksSpec {
  void* buffer = nullptr;
  std::vector<size_t> counts;  // one per node of the group
  proto::DType dtype = proto::DType::kF32;
  proto::RedOp op = proto::RedOp::kSum;  // reduce-scatter only: sum, prod, min or max
};

// `count` elements of `buffer`, to or from node `root`.
struct RootedSpec {
  void* buffer = nullptr;
  size_t count = 0;
  proto::DType dtype = proto::DType::kF32;
  proto::RedOp op = proto::RedOp::kSum;  // reduce only
  uint32_t root = 0;
};

// Hooks, with ranges in elements of the whole buffer:
//   reduce-scatter: prepare every range before it is read; done for this node's block.
//   allgather:      prepare for this node's block only; done for every block (its own too).
//   broadcast:      prepare on the root only; done for every range on every node.
//   reduce:         prepare every range on every node; done on the root only.
// `tag_base` and the next kTagsPerOperation tags belong to the operation alone; each throws
// TransportError on a spec that does not fit the group (counts for another node count).
std::unique_ptr<AllreduceAlgorithm> make_ring_reduce_scatter(PointToPoint& net, int tag_base,
                                                             const BlocksSpec& spec,
                                                             const AllreduceHooks& hooks,
                                                             const AlgorithmTuning& tuning);
std::unique_ptr<AllreduceAlgorithm> make_ring_allgather(PointToPoint& net, int tag_base,
                                                        const BlocksSpec& spec,
                                                        const AllreduceHooks& hooks,
                                                        const AlgorithmTuning& tuning);
std::unique_ptr<AllreduceAlgorithm> make_chain_broadcast(PointToPoint& net, int tag_base,
                                                         const RootedSpec& spec,
                                                         const AllreduceHooks& hooks,
                                                         const AlgorithmTuning& tuning);
std::unique_ptr<AllreduceAlgorithm> make_chain_reduce(PointToPoint& net, int tag_base,
                                                      const RootedSpec& spec,
                                                      const AllreduceHooks& hooks,
                                                      const AlgorithmTuning& tuning);

}  // namespace nodecomm::daemon
