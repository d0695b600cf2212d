#include "algorithms/collective_algorithms.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "algorithms/slice_slots.hpp"
#include "kernels/reduce.hpp"
#include "net/transport.hpp"

namespace nodecomm::daemon {

bool choose_pipelined(const AlgorithmTuning& tuning, size_t bytes, uint32_t nodes) {
  if (tuning.collectives != CollectiveAlgorithmKind::kAuto) {
    return tuning.collectives == CollectiveAlgorithmKind::kPipelined;
  }
  // Small buffers on three nodes or more: the native trees take log2(N) latencies where the
  // ring and the chain take N-1, and bandwidth does not matter yet. On two nodes every
  // algorithm is one exchange, and ours pipeline it.
  return nodes <= 2 || bytes > collective_switch_bytes(tuning);
}

namespace {

// Slices for a largest piece of `bytes`: about one --chunk-size each, at least one, at most
// one tag each.
size_t slice_count(size_t bytes, const AlgorithmTuning& tuning) {
  const size_t chunk = std::max<size_t>(tuning.chunk_bytes, 1);
  return std::clamp<size_t>((bytes + chunk - 1) / chunk, 1, kTagsPerOperation);
}

// The chain fills its pipeline over N-1 hops, one slice time per hop. At least
// kFillSlicesPerHop slices per hop keep that fill near 2.5 % of the transfer, down to slices of
// kMinFillSliceBytes, below which per-message costs would eat the gain. On 4 nodes at 1 Gbit/s
// this took a 16 MiB broadcast from 0.76-0.79 to 0.88 of the link and a 32 MiB one from 0.85 to
// 0.91 (docs/PERFORMANCE.md). Every daemon knows the bytes, the node count and the agreed
// chunk, so all cut the same slices.
size_t chain_slice_count(size_t bytes, const AlgorithmTuning& tuning, uint32_t nodes) {
  constexpr size_t kFillSlicesPerHop = 40;
  constexpr size_t kMinFillSliceBytes = size_t{64} << 10;
  const size_t for_fill =
      std::min(kFillSlicesPerHop * std::max<uint32_t>(nodes, 1) - kFillSlicesPerHop,
               bytes / kMinFillSliceBytes);
  return std::clamp<size_t>(std::max(slice_count(bytes, tuning), for_fill), 1, kTagsPerOperation);
}

// Part `slice` of `slices` of a range: both ends of a message compute the same parts.
Range part_of(const Range& r, size_t slice, size_t slices) {
  const size_t lo = r.count * slice / slices;
  const size_t hi = r.count * (slice + 1) / slices;
  return {r.first + lo, hi - lo};
}

// One half of the ring allreduce on blocks of any sizes, cut into slices that each make their
// own little ring with their own tag, as RingAllreduce does. Reduce-scatter step k sends block
// r-k-1 to the right and adds block r-k-2 from the left into place, so that after N-1 steps
// node r holds block r finished (the allreduce's shift by one, so that every node ends with its
// own block). Allgather step k passes block r-k on and receives block r-k-1 in place.
// A step moves on only when both its messages completed, so no range is written while a send
// may still read it.
class RingPhase final : public AllreduceAlgorithm {
 public:
  RingPhase(PointToPoint& net, int tag_base, const BlocksSpec& spec, const AllreduceHooks& hooks,
            const AlgorithmTuning& tuning, bool reduce)
      : net_(net),
        tag_base_(tag_base),
        spec_(spec),
        hooks_(hooks),
        nodes_(net.size()),
        rank_(net.rank()),
        elem_(proto::dtype_size(spec.dtype)),
        base_(static_cast<uint8_t*>(spec.buffer)),
        reduce_(reduce) {
    if (nodes_ == 0 || rank_ >= nodes_ || spec.counts.size() != nodes_) {
      throw TransportError(fmt::format("ring {}: rank {} of {} nodes, {} blocks",
                                       reduce ? "reduce-scatter" : "allgather", rank_, nodes_,
                                       spec.counts.size()));
    }
    size_t first = 0;
    size_t largest = 0;
    for (const size_t count : spec.counts) {
      blocks_.push_back({first, count});
      first += count;
      largest = std::max(largest, count);
    }
    slices_ = slice_count(largest * elem_, tuning);
    lanes_ = std::max<uint32_t>(std::min(tuning.endpoints, net.lanes()), 1);
    right_ = (rank_ + 1) % nodes_;
    left_ = (rank_ + nodes_ - 1) % nodes_;
    slots_.resize(std::clamp<size_t>(tuning.pipeline_depth, 1, slices_));
    // Reduce-scatter receives into per-slot scratch and accumulates; allgather in place.
    const size_t slice_elems = (largest + slices_ - 1) / slices_;
    if (reduce_ && nodes_ > 1 && slice_elems > 0) {
      auto* scratch = static_cast<uint8_t*>(hooks.scratch(slots_.size() * slice_elems * elem_));
      for (size_t s = 0; s < slots_.size(); ++s) slots_[s].tmp = scratch + s * slice_elems * elem_;
    }
  }

  bool progress() override {
    drive_slices(
        slots_, next_slice_, slices_, [this](Slot& slot, size_t slice) { begin(slot, slice); },
        [this](Slot& slot) { return advance(slot); });
    return finished_ == slices_;
  }

 private:
  struct Slot {
    bool active = false;
    size_t slice = 0;
    uint32_t step = 0;
    P2pRequest send = 0;  // 0: none outstanding
    P2pRequest recv = 0;
    uint8_t* tmp = nullptr;
  };

  uint32_t block_at(int64_t offset) const {
    const int64_t n = std::max<int64_t>(nodes_, 1);  // never 0 (constructor), said for the analyzer
    return static_cast<uint32_t>(((static_cast<int64_t>(rank_) + offset) % n + n) % n);
  }
  Range part(uint32_t block, size_t slice) const { return part_of(blocks_[block], slice, slices_); }
  uint8_t* at(const Range& r) const { return base_ + r.first * elem_; }
  uint32_t send_block(const Slot& slot) const {
    return block_at(reduce_ ? -int64_t{slot.step} - 1 : -int64_t{slot.step});
  }
  uint32_t recv_block(const Slot& slot) const {
    return block_at(reduce_ ? -int64_t{slot.step} - 2 : -int64_t{slot.step} - 1);
  }

  void begin(Slot& slot, size_t slice) {
    slot.active = true;
    slot.slice = slice;
    slot.step = 0;
    const Range own = part(rank_, slice);
    if (reduce_) {
      for (uint32_t b = 0; b < nodes_; ++b) {
        const Range r = part(b, slice);
        if (r.count > 0) hooks_.prepare(r.first, r.count);
      }
      if (nodes_ == 1 && own.count > 0) hooks_.done(own.first, own.count);
    } else if (own.count > 0) {
      // This node's block is final as soon as it is here.
      hooks_.prepare(own.first, own.count);
      hooks_.done(own.first, own.count);
    }
    post(slot);
  }

  // Posts the slot's current step, or retires the slot after its last one.
  void post(Slot& slot) {
    if (slot.step + 1 >= nodes_) {
      slot.active = false;
      ++finished_;
      return;
    }
    const uint32_t lane = static_cast<uint32_t>(slot.slice % lanes_);
    const int tag = tag_base_ + static_cast<int>(slot.slice);
    // Both neighbours compute the same ranges, so empty parts are skipped on both sides.
    const Range out = part(send_block(slot), slot.slice);
    const Range in = part(recv_block(slot), slot.slice);
    if (out.count > 0) slot.send = net_.isend(lane, right_, tag, at(out), out.count * elem_);
    if (in.count > 0) {
      slot.recv = net_.irecv(lane, left_, tag, reduce_ ? slot.tmp : at(in), in.count * elem_);
    }
  }

  // True when the slot moved on (and may move again or take a new slice).
  bool advance(Slot& slot) {
    if (slot.send != 0 && net_.done(slot.send)) slot.send = 0;
    if (slot.recv != 0 && net_.done(slot.recv)) slot.recv = 0;
    if (slot.send != 0 || slot.recv != 0) return false;
    const Range in = part(recv_block(slot), slot.slice);
    if (in.count > 0) {
      if (reduce_) {
        accumulate(spec_.dtype, spec_.op, at(in), slot.tmp, in.count);
        // The last step's block is this node's own, now finished.
        if (slot.step + 2 == nodes_) hooks_.done(in.first, in.count);
      } else {
        hooks_.done(in.first, in.count);
      }
    }
    ++slot.step;
    post(slot);
    return true;
  }

  PointToPoint& net_;
  int tag_base_;
  BlocksSpec spec_;
  AllreduceHooks hooks_;
  uint32_t nodes_;
  uint32_t rank_;
  size_t elem_;
  uint8_t* base_;
  bool reduce_;
  std::vector<Range> blocks_;
  size_t slices_ = 1;
  uint32_t lanes_ = 1;
  uint32_t right_ = 0;  // neighbours in the ring
  uint32_t left_ = 0;
  std::vector<Slot> slots_;
  size_t next_slice_ = 0;
  size_t finished_ = 0;
};

// A chain through every node of the group, in rank order from the node after `first` (mod N):
// broadcast starts it at the root, reduce ends it there. Each slice goes down the chain on its
// own tag: a node receives it from its predecessor (reduce: into scratch, then added to its own
// contribution), then sends it to its successor. Up to --pipeline-depth slices are at some
// step at once, so a node forwards one slice while the next arrives and every link is busy
// once the pipeline is full.
class Chain final : public AllreduceAlgorithm {
 public:
  Chain(PointToPoint& net, int tag_base, const RootedSpec& spec, const AllreduceHooks& hooks,
        const AlgorithmTuning& tuning, bool reduce)
      : net_(net),
        tag_base_(tag_base),
        spec_(spec),
        hooks_(hooks),
        elem_(proto::dtype_size(spec.dtype)),
        base_(static_cast<uint8_t*>(spec.buffer)),
        reduce_(reduce) {
    const uint32_t n = net.size();
    const uint32_t r = net.rank();
    if (n == 0 || r >= n || spec.root >= n) {
      throw TransportError(fmt::format("chain {}: rank {} of {} nodes, root {}",
                                       reduce ? "reduce" : "broadcast", r, n, spec.root));
    }
    // Broadcast: the root is position 0. Reduce: the root is the last, position N-1.
    const uint32_t position = (r + n - spec.root - (reduce ? 1 : 0)) % n;
    has_prev_ = position > 0;
    has_next_ = position + 1 < n;
    prev_ = (r + n - 1) % n;
    next_ = (r + 1) % n;
    at_root_ = r == spec.root;
    slices_ = std::min(spec.count, chain_slice_count(spec.count * elem_, tuning, n));  // none empty
    lanes_ = std::max<uint32_t>(std::min(tuning.endpoints, net.lanes()), 1);
    slots_.resize(std::clamp<size_t>(tuning.pipeline_depth, 1, std::max<size_t>(slices_, 1)));
    const size_t slice_elems = slices_ == 0 ? 0 : (spec.count + slices_ - 1) / slices_;
    if (reduce_ && has_prev_ && slice_elems > 0) {
      auto* scratch = static_cast<uint8_t*>(hooks.scratch(slots_.size() * slice_elems * elem_));
      for (size_t s = 0; s < slots_.size(); ++s) slots_[s].tmp = scratch + s * slice_elems * elem_;
    }
  }

  bool progress() override {
    drive_slices(
        slots_, next_slice_, slices_, [this](Slot& slot, size_t slice) { begin(slot, slice); },
        [this](Slot& slot) { return advance(slot); });
    return finished_ == slices_;
  }

 private:
  enum class Step : uint8_t { kReceiving, kSending };
  struct Slot {
    bool active = false;
    size_t slice = 0;
    Step step = Step::kReceiving;
    P2pRequest request = 0;  // 0: none outstanding
    uint8_t* tmp = nullptr;
  };

  Range slice_range(size_t slice) const { return part_of({0, spec_.count}, slice, slices_); }
  uint8_t* at(const Range& r) const { return base_ + r.first * elem_; }
  uint32_t lane(const Slot& slot) const { return static_cast<uint32_t>(slot.slice % lanes_); }
  int tag(const Slot& slot) const { return tag_base_ + static_cast<int>(slot.slice); }

  void begin(Slot& slot, size_t slice) {
    slot.active = true;
    slot.slice = slice;
    slot.step = Step::kReceiving;
    const Range r = slice_range(slice);
    if (reduce_ || at_root_) hooks_.prepare(r.first, r.count);
    if (has_prev_) {
      void* into = reduce_ ? slot.tmp : at(r);
      slot.request = net_.irecv(lane(slot), prev_, tag(slot), into, r.count * elem_);
    } else {
      received(slot);
    }
  }

  // The slice holds what this node passes on: delivered where it is final, then sent.
  void received(Slot& slot) {
    const Range r = slice_range(slot.slice);
    if (reduce_ && has_prev_) accumulate(spec_.dtype, spec_.op, at(r), slot.tmp, r.count);
    if (!reduce_ || at_root_) hooks_.done(r.first, r.count);
    slot.step = Step::kSending;
    if (has_next_) {
      slot.request = net_.isend(lane(slot), next_, tag(slot), at(r), r.count * elem_);
    } else {
      retire(slot);
    }
  }

  void retire(Slot& slot) {
    slot.active = false;
    ++finished_;
  }

  // True when the slot moved on (and may move again or take a new slice).
  bool advance(Slot& slot) {
    if (!net_.done(slot.request)) return false;
    slot.request = 0;
    if (slot.step == Step::kReceiving) {
      received(slot);
    } else {
      retire(slot);
    }
    return true;
  }

  PointToPoint& net_;
  int tag_base_;
  RootedSpec spec_;
  AllreduceHooks hooks_;
  size_t elem_;
  uint8_t* base_;
  bool reduce_;
  bool has_prev_ = false;
  bool has_next_ = false;
  bool at_root_ = false;
  uint32_t prev_ = 0;
  uint32_t next_ = 0;
  size_t slices_ = 0;
  uint32_t lanes_ = 1;
  std::vector<Slot> slots_;
  size_t next_slice_ = 0;
  size_t finished_ = 0;
};

}  // namespace

std::unique_ptr<AllreduceAlgorithm> make_ring_reduce_scatter(PointToPoint& net, int tag_base,
                                                             const BlocksSpec& spec,
                                                             const AllreduceHooks& hooks,
                                                             const AlgorithmTuning& tuning) {
  check_tags(net, tag_base);
  return std::make_unique<RingPhase>(net, tag_base, spec, hooks, tuning, /*reduce=*/true);
}

std::unique_ptr<AllreduceAlgorithm> make_ring_allgather(PointToPoint& net, int tag_base,
                                                        const BlocksSpec& spec,
                                                        const AllreduceHooks& hooks,
                                                        const AlgorithmTuning& tuning) {
  check_tags(net, tag_base);
  return std::make_unique<RingPhase>(net, tag_base, spec, hooks, tuning, /*reduce=*/false);
}

std::unique_ptr<AllreduceAlgorithm> make_chain_broadcast(PointToPoint& net, int tag_base,
                                                         const RootedSpec& spec,
                                                         const AllreduceHooks& hooks,
                                                         const AlgorithmTuning& tuning) {
  check_tags(net, tag_base);
  return std::make_unique<Chain>(net, tag_base, spec, hooks, tuning, /*reduce=*/false);
}

std::unique_ptr<AllreduceAlgorithm> make_chain_reduce(PointToPoint& net, int tag_base,
                                                      const RootedSpec& spec,
                                                      const AllreduceHooks& hooks,
                                                      const AlgorithmTuning& tuning) {
  check_tags(net, tag_base);
  return std::make_unique<Chain>(net, tag_base, spec, hooks, tuning, /*reduce=*/true);
}

}  // namespace nodecomm::daemon
