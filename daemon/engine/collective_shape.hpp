// What the steps of every collective (collectives.cpp) and the hooks of the pipelined ones
// (pipelined_hooks.cpp) share about one operation on this node: its shape, this node's
// members and their buffers, staging, and the local reduction and its finish.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/collective_context.hpp"
#include "engine/job.hpp"
#include "engine/staging.hpp"
#include "nodecomm/proto/types.hpp"
#include "session/client_session.hpp"

namespace nodecomm::daemon::coll {

using proto::Collective;
using proto::DType;
using proto::RedOp;

// What every step needs to know about one operation on this node.
struct Shape {
  Collective collective;
  DType dtype;
  RedOp op;      // the op on the wire: avg travels as sum
  bool average;  // divide by the communicator size at the end
  bool widen;    // f16/bf16 reduce in f32 staging
  DType wire;    // dtype in staging and on the network
  size_t count;  // the per-rank block, as in nodecomm.h
  size_t elem;   // bytes of one element of dtype
  size_t wire_elem;
  uint32_t size;  // ranks in the communicator
  uint32_t root;
  proto::Compression compression;  // allreduce between nodes
};

Shape shape_of(const CommLayout& lay, const Operation& op);

// This node's members of the communicator: member k is the k-th in comm-rank order.
struct Members {
  const Job& job;
  const CommLayout& lay;
  const Operation& op;

  ClientSession* session(size_t k) const { return job.members[lay.members[k]]; }
  uint8_t* send(size_t k) const { return session(k)->address(op.slots[k]->desc.send_offset); }
  uint8_t* recv(size_t k) const { return session(k)->address(op.slots[k]->desc.recv_offset); }
  bool alive(size_t k) const {
    const ClientSession* m = session(k);
    return m != nullptr && m->state() != ClientSession::State::kClosed;
  }
  size_t count() const { return lay.members.size(); }
  // The member that is the root, or -1 when the root lives on another node.
  int root(const Shape& s) const { return lay.member_of_rank(s.root); }
};

// Whether every member is still attached (a closed one's buffers are gone).
bool all_alive(const Members& m);

StagingPool::Buffer acquire_or_throw(StagingPool& pool, size_t bytes);
void* acquire(CollectiveContext& ctx, StagingPool::Buffer& into, size_t bytes);
void copy_out(void* dst, const void* src, size_t bytes);

// Combines the members' send buffers (count elements each, from element `from`) into dst
// in one pass: in wire format (f32 for f16/bf16) unless `final_dtype`, where f16/bf16 are
// rounded once into dtype.
void reduce_members(const Members& m, const Shape& s, void* dst, size_t count, size_t from = 0,
                    bool final_dtype = false);
// Finishes a reduction held in wire format at `src` (count elements) into `dst` in dtype:
// the average's division (in place at `src`), then f32 -> f16/bf16 rounding, each done once.
void finish_reduction(const Shape& s, void* src, void* dst, size_t count);

// allgatherv: element offset of every node-major position in the packed staging buffer (one
// more entry than positions: the total).
std::vector<size_t> packed_offsets(const CommLayout& lay, const uint64_t* counts);

// An algorithm's scratch memory, kept in `holder` (released by whoever owns it).
std::function<void*(size_t)> scratch_in(StagingPool& pool, StagingPool::Buffer* holder);

}  // namespace nodecomm::daemon::coll
