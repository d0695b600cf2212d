#include "engine/collective_shape.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "kernels/reduce.hpp"

namespace nodecomm::daemon::coll {

Shape shape_of(const CommLayout& lay, const Operation& op) {
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
  s.size = lay.size;
  s.root = d.root;
  s.compression = static_cast<proto::Compression>(d.compression);
  return s;
}

StagingPool::Buffer acquire_or_throw(StagingPool& pool, size_t bytes) {
  try {
    return pool.acquire(std::max<size_t>(bytes, 1));
  } catch (const std::bad_alloc&) {
    throw StagingExhausted(fmt::format("cannot allocate {} bytes of staging memory", bytes));
  }
}

void* acquire(CollectiveContext& ctx, StagingPool::Buffer& into, size_t bytes) {
  into = acquire_or_throw(ctx.staging, bytes);
  return into.data;
}

void copy_out(void* dst, const void* src, size_t bytes) {
  if (dst != src && bytes > 0) std::memcpy(dst, src, bytes);
}

// Combines the members' send buffers (count elements each, from element `from`) into dst
// in one pass: in wire format (f32 for f16/bf16) unless `final_dtype`, where f16/bf16 are
// rounded once into dtype.
void reduce_members(const Members& m, const Shape& s, void* dst, size_t count, size_t from,
                    bool final_dtype) {
  if (count == 0) return;
  std::vector<const void*> srcs;
  srcs.reserve(m.count());
  for (size_t k = 0; k < m.count(); ++k) srcs.push_back(m.send(k) + from * s.elem);
  if (s.widen && !final_dtype) {
    reduce_widen(s.dtype, s.op, static_cast<float*>(dst), srcs.data(), srcs.size(), count);
  } else {
    reduce(s.dtype, s.op, dst, srcs.data(), srcs.size(), count);
  }
}

// Finishes a reduction held in wire format at `src` (count elements) into `dst` in dtype:
// the average's division, then f32 -> f16/bf16 rounding, each done once.
void finish_reduction(const Shape& s, void* src, void* dst, size_t count) {
  if (count == 0) return;
  if (s.average) divide_by(s.wire, src, count, s.size);
  if (s.widen) {
    narrow_from_f32(s.dtype, dst, static_cast<const float*>(src), count);
  } else {
    copy_out(dst, src, count * s.elem);
  }
}

bool all_alive(const Members& m) {
  for (size_t k = 0; k < m.count(); ++k) {
    if (!m.alive(k)) return false;
  }
  return true;
}

// allgatherv: element offset of every node-major position in the packed staging buffer (one
// more entry than positions: the total).
std::vector<size_t> packed_offsets(const CommLayout& lay, const uint64_t* counts) {
  std::vector<size_t> off(lay.size + 1, 0);
  for (uint32_t p = 0; p < lay.size; ++p) off[p + 1] = off[p] + counts[lay.rank_at[p]];
  return off;
}

// An algorithm's scratch memory, kept in `holder` (released by whoever owns it).
std::function<void*(size_t)> scratch_in(StagingPool& pool, StagingPool::Buffer* holder) {
  return [&pool, holder](size_t bytes) {
    pool.release(*holder);
    *holder = {};
    *holder = acquire_or_throw(pool, bytes);
    return holder->data;
  };
}

}  // namespace nodecomm::daemon::coll
