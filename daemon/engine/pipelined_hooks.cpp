#include "engine/pipelined_hooks.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/collective_shape.hpp"
#include "net/transport.hpp"

namespace nodecomm::daemon {

using namespace coll;  // NOLINT(google-build-using-namespace): this file is its other half

namespace {

bool overlap(const uint8_t* a, size_t a_bytes, const uint8_t* b, size_t b_bytes) {
  return a_bytes > 0 && b_bytes > 0 && a < b + b_bytes && b < a + a_bytes;
}

// The parts of [first, first + n) that fall in each of the consecutive runs that start at
// `starts` (ascending; starts.back() is the end of the last run): f(run, lo, hi).
template <typename F>
void for_each_run(const std::vector<size_t>& starts, size_t first, size_t n, F&& f) {
  if (n == 0 || starts.size() < 2) return;
  auto it = std::upper_bound(starts.begin(), starts.end(), first);
  size_t run = static_cast<size_t>(it - starts.begin()) - 1;
  for (size_t lo = first; lo < first + n && run + 1 < starts.size(); ++run) {
    const size_t hi = std::min(first + n, starts[run + 1]);
    if (hi > lo) f(run, lo, hi);
    lo = std::max(lo, hi);
  }
}

// What one collective does with a range; `Ops` captures only pointers that outlive the
// operation's transfer (the job, the communicator's layout, the operation).
struct Ops {
  std::function<void(size_t, size_t)> prepare;
  std::function<void(size_t, size_t)> done;
  std::function<void()> prepare_all;  // the node's whole contribution
  bool eager = false;                 // inputs and outputs overlap: prepare_all first
};

// reduce_scatter: staging holds every rank's block of `count` wire elements at its node-major
// position; this node's members' blocks are its run. The finished run is divided (avg) in
// place: the ring never sends a node its own block again.
Ops reduce_scatter_ops(const Job* job, const CommLayout* lay, Operation* op, const Shape& s,
                       uint8_t* staging) {
  Ops o;
  o.prepare = [=](size_t first, size_t n) {
    const Members m{*job, *lay, *op};
    if (s.count == 0) return;
    // Position p holds rank rank_at[p]'s block: element e of it is element
    // rank * count + (e - p * count) of every member's send buffer.
    for (size_t lo = first; lo < first + n;) {
      const size_t p = lo / s.count;
      const size_t hi = std::min(first + n, (p + 1) * s.count);
      const size_t from = size_t{lay->rank_at[p]} * s.count + (lo - p * s.count);
      reduce_members(m, s, staging + lo * s.wire_elem, hi - lo, from);
      lo = hi;
    }
  };
  o.done = [=](size_t first, size_t n) {
    const Members m{*job, *lay, *op};
    if (s.count == 0) return;
    const size_t own = lay->first_position();
    for (size_t lo = first; lo < first + n;) {
      const size_t p = lo / s.count;
      const size_t hi = std::min(first + n, (p + 1) * s.count);
      const size_t k = p - own;
      if (k < m.count()) {
        finish_reduction(s, staging + lo * s.wire_elem, m.recv(k) + (lo - p * s.count) * s.elem,
                         hi - lo);
      }
      lo = hi;
    }
  };
  o.prepare_all = [prepare = o.prepare, s] { prepare(0, s.count * s.size); };
  // In place as nodecomm.h defines it (recv = send + rank * count) is safe range by range: a
  // range is delivered only onto the very elements it was reduced from.
  const Members m{*job, *lay, *op};
  for (size_t k = 0; k < m.count(); ++k) {
    const uint8_t* send = m.send(k);
    uint8_t* recv = m.recv(k);
    const size_t block = s.count * s.elem;
    if (overlap(send, block * s.size, recv, block) &&
        recv != send + size_t{lay->member_ranks[k]} * block) {
      o.eager = true;
    }
  }
  return o;
}

// allgather(v): staging holds every rank's run of bytes, packed in node-major order
// (`starts` in bytes, one more entry than positions); displacements where each member wants
// rank r's run: `displ(k, r)` elements.
Ops allgather_ops(const Job* job, const CommLayout* lay, Operation* op, const Shape& s,
                  uint8_t* staging, std::shared_ptr<const std::vector<size_t>> starts,
                  std::function<size_t(size_t, uint32_t)> displ) {
  Ops o;
  const size_t own_first = lay->first_position();
  o.prepare = [=](size_t first, size_t n) {
    const Members m{*job, *lay, *op};
    for_each_run(*starts, first, n, [&](size_t p, size_t lo, size_t hi) {
      const size_t k = p - own_first;
      if (k < m.count()) std::memcpy(staging + lo, m.send(k) + (lo - (*starts)[p]), hi - lo);
    });
  };
  o.done = [=](size_t first, size_t n) {
    const Members m{*job, *lay, *op};
    for_each_run(*starts, first, n, [&](size_t p, size_t lo, size_t hi) {
      const uint32_t rank = lay->rank_at[p];
      for (size_t k = 0; k < m.count(); ++k) {
        copy_out(m.recv(k) + displ(k, rank) * s.elem + (lo - (*starts)[p]), staging + lo, hi - lo);
      }
    });
  };
  o.prepare_all = [=, prepare = o.prepare] {
    const size_t lo = (*starts)[own_first];
    const size_t hi = (*starts)[own_first + lay->node_sizes[lay->node_index]];
    prepare(lo, hi - lo);
  };
  const Members m{*job, *lay, *op};
  for (size_t k = 0; k < m.count(); ++k) {
    const size_t p = own_first + k;
    size_t extent = 0;  // bytes of the receive buffer the results reach
    for (uint32_t r = 0; r < s.size; ++r) {
      const size_t run = (*starts)[lay->position[r] + 1] - (*starts)[lay->position[r]];
      if (run > 0) extent = std::max(extent, displ(k, r) * s.elem + run);
    }
    if (overlap(m.send(k), (*starts)[p + 1] - (*starts)[p], m.recv(k), extent)) o.eager = true;
  }
  return o;
}

// broadcast: bytes of the root's buffer; on the root's node it is the contribution.
Ops broadcast_ops(const Job* job, const CommLayout* lay, Operation* op, const Shape& s,
                  uint8_t* staging) {
  Ops o;
  const int root = lay->member_of_rank(s.root);
  o.prepare = [=](size_t first, size_t n) {
    const Members m{*job, *lay, *op};
    if (root >= 0) std::memcpy(staging + first, m.send(root) + first, n);
  };
  o.done = [=](size_t first, size_t n) {
    const Members m{*job, *lay, *op};
    for (size_t k = 0; k < m.count(); ++k) copy_out(m.recv(k) + first, staging + first, n);
  };
  o.prepare_all = [prepare = o.prepare, s] { prepare(0, s.count * s.elem); };
  if (root >= 0) {
    const Members m{*job, *lay, *op};
    const size_t block = s.count * s.elem;
    // send == recv (in place) is safe: a range is delivered onto the bytes it came from.
    o.eager = overlap(m.send(root), block, m.recv(root), block) && m.send(root) != m.recv(root);
  }
  return o;
}

// reduce: `count` wire elements; only the root's receive buffer gets the result, divided
// (avg) in place in staging: the chain ends at the root.
Ops reduce_ops(const Job* job, const CommLayout* lay, Operation* op, const Shape& s,
               uint8_t* staging) {
  Ops o;
  const int root = lay->member_of_rank(s.root);
  o.prepare = [=](size_t first, size_t n) {
    reduce_members(Members{*job, *lay, *op}, s, staging + first * s.wire_elem, n, first);
  };
  o.done = [=](size_t first, size_t n) {
    const Members m{*job, *lay, *op};
    if (root < 0) return;
    finish_reduction(s, staging + first * s.wire_elem, m.recv(root) + first * s.elem, n);
  };
  o.prepare_all = [prepare = o.prepare, s] { prepare(0, s.count); };
  if (root >= 0) {
    const Members m{*job, *lay, *op};
    const size_t block = s.count * s.elem;
    // recv == send (in place) is safe: a range is delivered onto the elements it came from.
    o.eager = overlap(m.send(root), block, m.recv(root), block) && m.send(root) != m.recv(root);
  }
  return o;
}

}  // namespace

AllreduceHooks pipelined_hooks(CollectiveContext& ctx, Operation& op) {
  const Job* job = &ctx.job;
  const CommLayout* lay = &ctx.comm.layout();
  Operation* operation = &op;
  const Shape s = shape_of(*lay, op);
  auto* staging = static_cast<uint8_t*>(op.staging.data);
  Ops o;
  switch (s.collective) {
    case Collective::kReduceScatter:
      o = reduce_scatter_ops(job, lay, operation, s, staging);
      break;
    case Collective::kAllgather: {
      auto starts = std::make_shared<std::vector<size_t>>(lay->size + 1);
      for (uint32_t p = 0; p <= lay->size; ++p) (*starts)[p] = p * s.count * s.elem;
      const size_t count = s.count;
      o = allgather_ops(job, lay, operation, s, staging, starts,
                        [count](size_t, uint32_t rank) { return rank * count; });
      break;
    }
    case Collective::kAllgatherv: {
      std::vector<size_t> off = packed_offsets(*lay, op.slots[0]->aux.data());
      for (size_t& v : off) v *= s.elem;
      auto starts = std::make_shared<const std::vector<size_t>>(std::move(off));
      const uint32_t size = s.size;
      o = allgather_ops(job, lay, operation, s, staging, starts,
                        [operation, size](size_t k, uint32_t rank) {
                          return static_cast<size_t>(operation->slots[k]->aux[size + rank]);
                        });
      break;
    }
    case Collective::kBroadcast:
      o = broadcast_ops(job, lay, operation, s, staging);
      break;
    case Collective::kReduce:
      o = reduce_ops(job, lay, operation, s, staging);
      break;
    default:
      throw TransportError("no pipelined hooks for this collective");
  }
  // A member gone mid-way: its buffers are unmapped, so nothing more is read or written for
  // anyone, and the operation fails instead of delivering a partial result.
  const auto usable = [job, lay, operation] {
    if (all_alive(Members{*job, *lay, *operation})) return true;
    operation->member_lost_midway = true;
    return false;
  };
  if (o.eager && usable()) o.prepare_all();
  AllreduceHooks hooks;
  if (o.eager) {
    hooks.prepare = [](size_t, size_t) {};
  } else {
    hooks.prepare = [usable, prepare = std::move(o.prepare)](size_t first, size_t n) {
      if (n > 0 && usable()) prepare(first, n);
    };
  }
  hooks.done = [usable, done = std::move(o.done)](size_t first, size_t n) {
    if (n > 0 && usable()) done(first, n);
  };
  hooks.scratch = scratch_in(ctx.staging, &op.staging2);
  return hooks;
}

}  // namespace nodecomm::daemon
