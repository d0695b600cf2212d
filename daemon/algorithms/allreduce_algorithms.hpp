// Inter-node allreduce algorithms over point-to-point messages, as resumable state machines
// that the engine's loop advances without ever blocking:
//   ring:               chunked, pipelined reduce-scatter + allgather; every node sends and
//                       receives 2(N-1)/N of the buffer, the bandwidth optimum;
//   recursive doubling: log2(N) exchanges of the whole buffer (plus two for the nodes beyond
//                       the largest power of two), the latency optimum for small messages.
// The node's own contribution is produced range by range (hooks.prepare) just before a range
// is first read, and every range is handed back (hooks.done) as soon as it holds the final
// result, so the local reduction and delivery overlap the transfers of other ranges.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "algorithms/allreduce_hooks.hpp"
#include "algorithms/operation_tags.hpp"
#include "config/tuning.hpp"
#include "net/p2p.hpp"
#include "nodecomm/proto/types.hpp"

namespace nodecomm::daemon {

// Picks the algorithm for `bytes` on `nodes` nodes (kAuto is resolved, never returned).
// `link_loaded`: the daemons agreed that other transfers are still on the network (the round's
// RoundRecord::staying), where auto takes the ring at every size on up to kLoadedRingMaxNodes.
AllreduceAlgorithmKind choose_allreduce(const AlgorithmTuning& tuning, size_t bytes, uint32_t nodes,
                                        bool link_loaded = false);

struct AllreduceSpec {
  void* buffer = nullptr;
  size_t count = 0;
  proto::DType dtype = proto::DType::kF32;
  proto::RedOp op = proto::RedOp::kSum;  // sum, prod, min or max
  // bf16/f16 (f32 data only, ring only): every message carries 2-byte values and is
  // accumulated in f32 on arrival. The node that finishes a block rounds its own copy the same
  // way, so every node ends with identical bits.
  proto::Compression wire = proto::Compression::kNone;
};

class AllreduceAlgorithm {
 public:
  virtual ~AllreduceAlgorithm() = default;
  // Advances as far as completed messages allow; true once every range is done. The caller
  // polls the PointToPoint before each call. Throws TransportError.
  virtual bool progress() = 0;
};

// `tag_base` and the next `tag_span(...)` tags belong to this operation alone.
std::unique_ptr<AllreduceAlgorithm> make_ring_allreduce(PointToPoint& net, int tag_base,
                                                        const AllreduceSpec& spec,
                                                        const AllreduceHooks& hooks,
                                                        const AlgorithmTuning& tuning);
std::unique_ptr<AllreduceAlgorithm> make_recursive_doubling_allreduce(PointToPoint& net,
                                                                      int tag_base,
                                                                      const AllreduceSpec& spec,
                                                                      const AllreduceHooks& hooks);
// Every node's `bytes` at records + rank * bytes reach every other node's `records`: one
// message to and from each peer, for the scheduler's small per-round records. Only the first
// `send_bytes` (at most `bytes`) of this node's record are sent; receives take up to `bytes`,
// so the rest of each peer's slot keeps what it held (the caller zeroes it).
std::unique_ptr<AllreduceAlgorithm> make_record_exchange(PointToPoint& net, int tag_base,
                                                         void* records, size_t bytes,
                                                         size_t send_bytes);

}  // namespace nodecomm::daemon
