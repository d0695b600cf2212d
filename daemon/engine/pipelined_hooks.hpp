// The engine's side of reduce_scatter, allgather(v), broadcast and reduce between nodes: the
// hooks through which the inter-node algorithm (InterNode::start_reduce_scatter and the others)
// asks for this node's contribution range by range and hands back finished ranges, as
// allreduce_hooks does for allreduce. The local reduction or copy of a range therefore runs
// just before it first goes out, and each member's receive buffer is written as soon as its
// part is final, overlapping the transfers of the other ranges.
#pragma once

#include "algorithms/allreduce_hooks.hpp"
#include "engine/collective_context.hpp"

namespace nodecomm::daemon {

// Hooks for `op` (one of the four collectives, on several nodes) over its staging buffer, in
// the units InterNode's call for it uses (wire elements; bytes for allgather(v) and
// broadcast). Where a member's send and receive buffers overlap in a way that a range
// delivered early could overwrite input not yet read, the node's whole contribution is read
// here, at once, and prepare does nothing: every in-place layout stays safe. A member that
// vanishes while its buffers are in use marks the operation (member_lost_midway).
AllreduceHooks pipelined_hooks(CollectiveContext& ctx, Operation& op);

}  // namespace nodecomm::daemon
