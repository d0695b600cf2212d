// The hierarchical collectives, in three steps each:
//   stage_in:      read the node's send buffers (once, into daemon-private staging);
//   start_network: run the inter-node part among the daemons on the staging buffers;
//   stage_out:     write each local rank's receive buffer from staging.
// Reading every input before writing any output makes every in-place layout safe, and only
// the node's aggregate crosses the network. Staging is laid out in the communicator's
// node-major order (CommLayout), so each node's part is one contiguous run on the network.
#pragma once

#include <vector>

#include "algorithms/inter_node.hpp"
#include "engine/collective_context.hpp"
#include "engine/job.hpp"
#include "engine/staging.hpp"
#include "net/transport.hpp"

namespace nodecomm::daemon {

// Staging bytes `op` holds on this node at its peak (staging and the second buffer; an
// algorithm's small scratch aside): what it reserves against the caps before it starts.
size_t staging_bytes(const CommLayout& lay, const Operation& op);

// Returns true when the operation is already complete and delivered (small single-node
// fast paths); otherwise staging holds the node's input.
bool stage_in(CollectiveContext& ctx, Operation& op);
TransportHandle start_network(CollectiveContext& ctx, Operation& op);
// Writes results and releases the staging buffers.
void stage_out(CollectiveContext& ctx, Operation& op);
// Releases staging after a failure.
void release_staging(CollectiveContext& ctx, Operation& op);

// For the negotiated scheduler (engine_schedule.cpp), which sends an allreduce in chunks or
// packs several into one transfer. stage_in must have run (it acquires the staging).
struct AllreduceWire {
  proto::DType dtype;  // in staging and on the network (f32 for f16/bf16)
  proto::RedOp op;     // avg travels as sum
  proto::Compression compression;
  size_t elem;  // bytes of one staging element
};
AllreduceWire allreduce_wire(const CommLayout& lay, const Operation& op);
// Elements [first, first + count) of the operation, as one transport allreduce whose scratch
// lives in `scratch` (the caller releases it once the transfer is complete). `link_loaded`:
// the round's agreement that the network is busy (choose_allreduce).
TransportHandle start_allreduce_chunk(CollectiveContext& ctx, Operation& op, size_t first,
                                      size_t count, StagingPool::Buffer& scratch,
                                      bool link_loaded = false);
// Whole allreduces with the same AllreduceWire, packed at element `offset` of `buffer`, as
// one transfer. Each part is reduced into the buffer now and delivered as its range finishes.
struct FusedPart {
  Operation* op;
  size_t offset;
};
TransportHandle start_allreduce_fused(CollectiveContext& ctx, const std::vector<FusedPart>& parts,
                                      StagingPool::Buffer& buffer, StagingPool::Buffer& scratch,
                                      bool link_loaded = false);
// Small allreduces carried inside a scheduling round (wire_formats.hpp, EagerEntry). The bytes
// of op's part in the wire type, or 0 when it cannot go that way (compressed, empty, more
// than `limit`).
size_t eager_allreduce_bytes(const CommLayout& lay, const Operation& op, size_t limit);
// This node's ranks reduced into `out` (eager_allreduce_bytes of it); false if a member is gone.
bool eager_allreduce_part(CollectiveContext& ctx, Operation& op, uint8_t* out);
// How the nodes' parts of op combine: the wire type and op (engine_schedule.cpp reduces the
// parts as the round records are combined).
struct EagerReduction {
  proto::DType wire;
  proto::RedOp op;
};
EagerReduction eager_allreduce_reduction(const CommLayout& lay, const Operation& op);
// Every node's part combined (the same bits on every node) delivered to this node's ranks.
void eager_allreduce_deliver(CollectiveContext& ctx, Operation& op, const uint8_t* combined);

}  // namespace nodecomm::daemon
