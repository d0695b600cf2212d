#include "collectives.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "client_session.hpp"
#include "reduce.hpp"

namespace nodecomm::daemon {

using proto::Collective;
using proto::DType;
using proto::RedOp;

namespace {

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
};

Shape shape_of(const Job& job, const Operation& op) {
  const proto::OpDescriptor& d = op.first();
  Shape s{};
  s.collective = static_cast<Collective>(d.collective);
  s.dtype = static_cast<DType>(d.dtype);
  const auto redop = static_cast<RedOp>(d.redop);
  s.average = redop == RedOp::kAvg;
  s.op = s.average ? RedOp::kSum : redop;
  s.widen = proto::collective_reduces(s.collective) &&
            (s.dtype == DType::kF16 || s.dtype == DType::kBF16);
  s.wire = s.widen ? DType::kF32 : s.dtype;
  s.count = d.count;
  s.elem = proto::dtype_size(s.dtype);
  s.wire_elem = proto::dtype_size(s.wire);
  s.size = job.world_size;
  s.root = d.root;
  return s;
}

uint8_t* send_of(const Job& job, const Operation& op, size_t local) {
  return job.members[local]->segment().arena() + op.slots[local]->desc.send_offset;
}
uint8_t* recv_of(const Job& job, const Operation& op, size_t local) {
  return job.members[local]->segment().arena() + op.slots[local]->desc.recv_offset;
}
bool delivers_to(const Job& job, size_t local) {
  const ClientSession* m = job.members[local];
  return m != nullptr && m->state() != ClientSession::State::kClosed;
}
bool root_is_local(const Job& job, const Shape& s) {
  return s.root >= job.world_offset && s.root < job.world_offset + job.local_size;
}
size_t root_local(const Job& job, const Shape& s) {
  return s.root - job.world_offset;
}

void* acquire(CollectiveContext& ctx, StagingPool::Buffer& into, size_t bytes) {
  into = ctx.staging.acquire(std::max<size_t>(bytes, 1));
  return into.data;
}

// Combines the members' send buffers (count elements each) into dst in one pass.
void reduce_members(const Job& job, const Operation& op, const Shape& s, void* dst, size_t count) {
  if (count == 0) return;
  std::vector<const void*> srcs;
  srcs.reserve(op.slots.size());
  for (size_t local = 0; local < op.slots.size(); ++local) srcs.push_back(send_of(job, op, local));
  if (s.widen) {
    reduce_widen(s.dtype, s.op, static_cast<float*>(dst), srcs.data(), srcs.size(), count);
  } else {
    reduce(s.dtype, s.op, dst, srcs.data(), srcs.size(), count);
  }
}

// Finishes a reduction held in wire format at `src` (count elements) into `dst` in dtype:
// the average's division, then f32 → f16/bf16 rounding, each done once.
void finish_reduction(const Shape& s, void* src, void* dst, size_t count) {
  if (count == 0) return;
  if (s.average) divide_by(s.wire, src, count, s.size);
  if (s.widen) {
    narrow_from_f32(s.dtype, dst, static_cast<const float*>(src), count);
  } else if (dst != src) {
    std::memcpy(dst, src, count * s.elem);
  }
}

void copy_out(void* dst, const void* src, size_t bytes) {
  if (dst != src && bytes > 0) std::memcpy(dst, src, bytes);
}

// Per-node byte counts and displacements for blocks of `per_rank_bytes` per rank.
void node_blocks(const Job& job, size_t per_rank_bytes, std::vector<int>& bytes,
                 std::vector<int>& displs) {
  bytes.clear();
  displs.clear();
  for (size_t n = 0; n < job.node_sizes.size(); ++n) {
    bytes.push_back(static_cast<int>(job.node_sizes[n] * per_rank_bytes));
    displs.push_back(static_cast<int>(job.node_offsets[n] * per_rank_bytes));
  }
}

}  // namespace

bool stage_in(CollectiveContext& ctx, Operation& op) {
  const Job& job = ctx.job;
  const Shape s = shape_of(job, op);
  const size_t block = s.count * s.elem;
  const uint32_t local = job.local_size;
  switch (s.collective) {
    case Collective::kAllreduce:
      if (job.node_count == 1 && !(s.widen && s.average)) {
        // Reduce straight into rank 0's receive buffer, then copy: no staging at all.
        uint8_t* result = recv_of(job, op, 0);
        reduce_members(job, op, s, result, s.count);
        if (s.average && s.count > 0) divide_by(s.dtype, result, s.count, s.size);
        for (size_t k = 1; k < local; ++k) {
          if (delivers_to(job, k)) copy_out(recv_of(job, op, k), result, block);
        }
        return true;
      }
      reduce_members(job, op, s, acquire(ctx, op.staging, s.count * s.wire_elem), s.count);
      return false;
    case Collective::kReduce:
      reduce_members(job, op, s, acquire(ctx, op.staging, s.count * s.wire_elem), s.count);
      return false;
    case Collective::kReduceScatter:
      reduce_members(job, op, s, acquire(ctx, op.staging, s.count * s.size * s.wire_elem),
                     s.count * s.size);
      return false;
    case Collective::kBroadcast: {
      void* staging = acquire(ctx, op.staging, block);
      if (root_is_local(job, s)) std::memcpy(staging, send_of(job, op, root_local(job, s)), block);
      return false;
    }
    case Collective::kScatter: {
      void* staging = acquire(ctx, op.staging, block * s.size);
      if (root_is_local(job, s)) {
        std::memcpy(staging, send_of(job, op, root_local(job, s)), block * s.size);
      }
      return false;
    }
    case Collective::kAllgather:
    case Collective::kGather: {
      auto* staging = static_cast<uint8_t*>(acquire(ctx, op.staging, block * s.size));
      for (size_t k = 0; k < local; ++k) {
        std::memcpy(staging + (job.world_offset + k) * block, send_of(job, op, k), block);
      }
      return false;
    }
    case Collective::kAlltoall: {
      // Pack by destination node m, then source rank i here, then destination rank j in m:
      // node m receives from this node one run ordered [i][j].
      auto* packed = static_cast<uint8_t*>(acquire(ctx, op.staging, block * s.size * local));
      for (size_t m = 0; m < job.node_sizes.size(); ++m) {
        uint8_t* run = packed + size_t{local} * job.node_offsets[m] * block;
        for (size_t i = 0; i < local; ++i) {
          const uint8_t* src = send_of(job, op, i) + size_t{job.node_offsets[m]} * block;
          std::memcpy(run + i * job.node_sizes[m] * block, src, job.node_sizes[m] * block);
        }
      }
      return false;
    }
    case Collective::kBarrier:
      return false;
    default:
      return false;
  }
}

TransportHandle start_network(CollectiveContext& ctx, Operation& op) {
  const Job& job = ctx.job;
  const Shape s = shape_of(job, op);
  const size_t block = s.count * s.elem;
  const uint32_t root_node = job.node_of(s.root);
  Transport& t = ctx.transport;
  std::vector<int> bytes;
  std::vector<int> displs;
  switch (s.collective) {
    case Collective::kAllreduce:
      return t.start_allreduce(op.staging.data, s.count, s.wire, s.op);
    case Collective::kReduce:
      return t.start_reduce(op.staging.data, s.count, s.wire, s.op, root_node);
    case Collective::kReduceScatter: {
      std::vector<int> counts;
      for (uint32_t n : job.node_sizes) counts.push_back(static_cast<int>(n * s.count));
      return t.start_reduce_scatter(op.staging.data, std::move(counts), s.wire, s.op);
    }
    case Collective::kBroadcast:
      return t.start_broadcast(op.staging.data, block, root_node);
    case Collective::kAllgather:
      node_blocks(job, block, bytes, displs);
      return t.start_allgatherv(op.staging.data, std::move(bytes), std::move(displs));
    case Collective::kGather:
      node_blocks(job, block, bytes, displs);
      return t.start_gatherv(op.staging.data, std::move(bytes), std::move(displs), root_node);
    case Collective::kScatter:
      node_blocks(job, block, bytes, displs);
      return t.start_scatterv(op.staging.data, std::move(bytes), std::move(displs), root_node);
    case Collective::kAlltoall: {
      // To node m: this node's L ranks x m's L_m ranks blocks; from node m: L_m x L blocks.
      std::vector<int> rbytes;
      std::vector<int> rdispls;
      node_blocks(job, block * job.local_size, bytes, displs);
      rbytes = bytes;
      rdispls = displs;
      void* recv = acquire(ctx, op.staging2, block * s.size * job.local_size);
      return t.start_alltoallv(op.staging.data, std::move(bytes), std::move(displs), recv,
                               std::move(rbytes), std::move(rdispls));
    }
    case Collective::kBarrier:
      return t.start_barrier();
    default:
      throw TransportError("no inter-node step for this collective");
  }
}

void stage_out(CollectiveContext& ctx, Operation& op) {
  const Job& job = ctx.job;
  const Shape s = shape_of(job, op);
  const size_t block = s.count * s.elem;
  const uint32_t local = job.local_size;
  auto* staging = static_cast<uint8_t*>(op.staging.data);
  switch (s.collective) {
    case Collective::kAllreduce: {
      // Round once into rank 0's buffer, then copy the final bytes to everyone else.
      uint8_t* first = recv_of(job, op, 0);
      finish_reduction(s, staging, first, s.count);
      for (size_t k = 1; k < local; ++k) {
        if (delivers_to(job, k)) copy_out(recv_of(job, op, k), first, block);
      }
      break;
    }
    case Collective::kReduce:
      if (root_is_local(job, s) && delivers_to(job, root_local(job, s))) {
        finish_reduction(s, staging, recv_of(job, op, root_local(job, s)), s.count);
      }
      break;
    case Collective::kReduceScatter: {
      // After the network step this node's blocks start at staging[0]; on one node the
      // staging holds every block and this node's start at 0 too.
      for (size_t k = 0; k < local; ++k) {
        if (!delivers_to(job, k)) continue;
        finish_reduction(s, staging + k * s.count * s.wire_elem, recv_of(job, op, k), s.count);
      }
      break;
    }
    case Collective::kBroadcast:
      for (size_t k = 0; k < local; ++k) {
        if (delivers_to(job, k)) copy_out(recv_of(job, op, k), staging, block);
      }
      break;
    case Collective::kAllgather:
      for (size_t k = 0; k < local; ++k) {
        if (delivers_to(job, k)) copy_out(recv_of(job, op, k), staging, block * s.size);
      }
      break;
    case Collective::kGather:
      if (root_is_local(job, s) && delivers_to(job, root_local(job, s))) {
        copy_out(recv_of(job, op, root_local(job, s)), staging, block * s.size);
      }
      break;
    case Collective::kScatter:
      for (size_t k = 0; k < local; ++k) {
        if (delivers_to(job, k)) {
          copy_out(recv_of(job, op, k), staging + (job.world_offset + k) * block, block);
        }
      }
      break;
    case Collective::kAlltoall: {
      // From node m a run ordered [source i in m][destination j here]; one node: the packed
      // buffer already is that run.
      const auto* runs =
          op.staging2.data != nullptr ? static_cast<uint8_t*>(op.staging2.data) : staging;
      for (size_t m = 0; m < job.node_sizes.size(); ++m) {
        const uint8_t* run = runs + size_t{job.node_offsets[m]} * local * block;
        for (size_t i = 0; i < job.node_sizes[m]; ++i) {
          for (size_t j = 0; j < local; ++j) {
            if (!delivers_to(job, j)) continue;
            std::memcpy(recv_of(job, op, j) + (job.node_offsets[m] + i) * block,
                        run + (i * local + j) * block, block);
          }
        }
      }
      break;
    }
    default:
      break;
  }
  release_staging(ctx, op);
}

void release_staging(CollectiveContext& ctx, Operation& op) {
  ctx.staging.release(op.staging);
  ctx.staging.release(op.staging2);
  op.staging = {};
  op.staging2 = {};
}

}  // namespace nodecomm::daemon
