#include "algorithms/allreduce_algorithms.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "algorithms/algorithm_tally.hpp"
#include "algorithms/recursive_doubling.hpp"
#include "algorithms/slice_slots.hpp"
#include "kernels/reduce.hpp"
#include "kernels/wire_codec.hpp"
#include "net/transport.hpp"

namespace nodecomm::daemon {

AlgorithmTally& algorithm_tally() {
  static AlgorithmTally tally;
  return tally;
}

AllreduceAlgorithmKind choose_allreduce(const AlgorithmTuning& tuning, size_t bytes, uint32_t nodes,
                                        bool link_loaded) {
  if (tuning.allreduce != AllreduceAlgorithmKind::kAuto) return tuning.allreduce;
  // The switch point is where the two cost the same on an idle link. On a loaded one every
  // recursive-doubling step, a whole buffer to a partner and a wait for the partner's, queues
  // behind what is already there, where the ring's slices stream along with it: the BERT-large
  // step of tools/scale-model (84 KB gradients, 4 and 8 nodes at 1 Gbit/s) took 470-544 ms
  // with recursive doubling for them and 367-446 ms with the ring (2026-12-06).
  // On two nodes both algorithms make the same single exchange; the ring also pipelines it.
  const bool loaded_ring = link_loaded && nodes <= kLoadedRingMaxNodes;
  if (!loaded_ring && nodes > 2 && bytes <= allreduce_switch_bytes(tuning, nodes)) {
    return AllreduceAlgorithmKind::kRecursiveDoubling;
  }
  return AllreduceAlgorithmKind::kRing;
}

namespace {

// Ring allreduce, cut into `slices` independent rings: slice j of the ring covers part j of
// every one of the N blocks. Up to `depth` slices run at once, each through 2(N-1) steps:
// reduce-scatter steps k < N-1 send block (r-k) and add block (r-k-1) from the left
// neighbour into place; allgather steps pass the finished blocks on around the ring.
class RingAllreduce final : public AllreduceAlgorithm {
 public:
  RingAllreduce(PointToPoint& net, int tag_base, const AllreduceSpec& spec,
                const AllreduceHooks& hooks, const AlgorithmTuning& tuning)
      : net_(net),
        tag_base_(tag_base),
        spec_(spec),
        hooks_(hooks),
        nodes_(net.size()),
        rank_(net.rank()),
        elem_(proto::dtype_size(spec.dtype)),
        base_(static_cast<uint8_t*>(spec.buffer)) {
    if (nodes_ == 0 || rank_ >= nodes_) {
      throw TransportError(fmt::format("ring: rank {} of {} nodes", rank_, nodes_));
    }
    const size_t per_block = spec.count / nodes_;
    const size_t extra = spec.count % nodes_;
    size_t first = 0;
    for (uint32_t b = 0; b < nodes_; ++b) {
      const size_t count = per_block + (b < extra ? 1 : 0);
      blocks_.push_back({first, count});
      first += count;
    }
    const size_t largest_block_bytes = blocks_[0].count * elem_;
    const size_t chunk = std::max<size_t>(tuning.chunk_bytes, 1);
    slices_ = std::clamp<size_t>((largest_block_bytes + chunk - 1) / chunk, 1, kTagsPerOperation);
    algorithm_tally().count_ring(slices_);
    const size_t slice_elems = (blocks_[0].count + slices_ - 1) / slices_;
    lanes_ = std::max<uint32_t>(std::min(tuning.endpoints, net.lanes()), 1);
    right_ = (rank_ + 1) % nodes_;
    left_ = (rank_ + nodes_ - 1) % nodes_;
    slots_.resize(std::clamp<size_t>(tuning.pipeline_depth, 1, slices_));
    compressed_ = spec.wire != proto::Compression::kNone;
    if (compressed_ && spec.dtype != proto::DType::kF32) {
      throw TransportError("ring: wire compression needs f32 data");
    }
    // Per slot: the incoming message, and (compressed) the encoded outgoing one.
    const size_t in_bytes = compressed_ ? wire_bytes(spec.wire, slice_elems) : slice_elems * elem_;
    const size_t out_bytes = compressed_ ? in_bytes : 0;
    if (nodes_ > 1 && slice_elems > 0) {
      const size_t per_slot = in_bytes + out_bytes;
      auto* scratch = static_cast<uint8_t*>(hooks.scratch(slots_.size() * per_slot));
      for (size_t s = 0; s < slots_.size(); ++s) {
        slots_[s].tmp = scratch + s * per_slot;
        slots_[s].out = compressed_ ? slots_[s].tmp + in_bytes : nullptr;
      }
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
    uint8_t* out = nullptr;  // compressed: the encoded outgoing part
  };

  uint32_t block_at(int64_t offset) const {
    const int64_t n = std::max<int64_t>(nodes_, 1);  // never 0 (constructor), said for the analyzer
    return static_cast<uint32_t>(((static_cast<int64_t>(rank_) + offset) % n + n) % n);
  }
  Range part(uint32_t block, size_t slice) const {
    const Range& b = blocks_[block];
    const size_t lo = b.count * slice / slices_;
    const size_t hi = b.count * (slice + 1) / slices_;
    return {b.first + lo, hi - lo};
  }
  uint8_t* at(const Range& r) const { return base_ + r.first * elem_; }

  void begin(Slot& slot, size_t slice) {
    slot.active = true;
    slot.slice = slice;
    slot.step = 0;
    for (uint32_t b = 0; b < nodes_; ++b) {
      const Range r = part(b, slice);
      if (r.count > 0) hooks_.prepare(r.first, r.count);
    }
    if (nodes_ == 1) {
      const Range r = part(0, slice);
      if (r.count > 0) hooks_.done(r.first, r.count);
    }
    post(slot);
  }

  bool reducing(const Slot& slot) const { return slot.step + 1 < nodes_; }
  uint32_t send_block(const Slot& slot) const {
    const int64_t k = slot.step;
    return reducing(slot) ? block_at(-k) : block_at(1 - (k - (nodes_ - 1)));
  }
  uint32_t recv_block(const Slot& slot) const {
    const int64_t k = slot.step;
    return reducing(slot) ? block_at(-k - 1) : block_at(-(k - (nodes_ - 1)));
  }

  // Posts the slot's current step, or retires the slot after its last one.
  void post(Slot& slot) {
    if (slot.step == 2 * (nodes_ - 1)) {
      slot.active = false;
      ++finished_;
      return;
    }
    const uint32_t lane = static_cast<uint32_t>(slot.slice % lanes_);
    const int tag = tag_base_ + static_cast<int>(slot.slice);
    // Both neighbours compute the same ranges, so empty parts are skipped on both sides.
    const Range out = part(send_block(slot), slot.slice);
    const Range in = part(recv_block(slot), slot.slice);
    if (compressed_) {
      if (out.count > 0) {
        wire_encode(spec_.wire, reinterpret_cast<const float*>(at(out)), out.count, slot.out);
        slot.send = net_.isend(lane, right_, tag, slot.out, wire_bytes(spec_.wire, out.count));
      }
      if (in.count > 0) {
        slot.recv = net_.irecv(lane, left_, tag, slot.tmp, wire_bytes(spec_.wire, in.count));
      }
      return;
    }
    if (out.count > 0) slot.send = net_.isend(lane, right_, tag, at(out), out.count * elem_);
    if (in.count > 0) {
      void* into = reducing(slot) ? slot.tmp : at(in);
      slot.recv = net_.irecv(lane, left_, tag, into, in.count * elem_);
    }
  }

  // True when the slot moved on (and may move again or take a new slice).
  bool advance(Slot& slot) {
    if (slot.send != 0 && net_.done(slot.send)) slot.send = 0;
    if (slot.recv != 0 && net_.done(slot.recv)) slot.recv = 0;
    if (slot.send != 0 || slot.recv != 0) return false;
    const Range in = part(recv_block(slot), slot.slice);
    auto* values = reinterpret_cast<float*>(at(in));
    if (reducing(slot)) {
      if (in.count > 0 && compressed_) {
        wire_decode_accumulate(spec_.wire, spec_.op, slot.tmp, in.count, values);
      } else if (in.count > 0) {
        accumulate(spec_.dtype, spec_.op, at(in), slot.tmp, in.count);
      }
      // After the last reduce-scatter step this node holds block r+1 finished.
      if (slot.step + 2 == nodes_ && in.count > 0) {
        // The others get this block through the wire format; keep exactly what they get.
        if (compressed_) wire_round_trip(spec_.wire, values, in.count);
        hooks_.done(in.first, in.count);
      }
    } else if (in.count > 0) {
      if (compressed_) wire_decode(spec_.wire, slot.tmp, in.count, values);
      hooks_.done(in.first, in.count);
    }
    ++slot.step;
    post(slot);
    return true;
  }

  PointToPoint& net_;
  int tag_base_;
  AllreduceSpec spec_;
  AllreduceHooks hooks_;
  uint32_t nodes_;
  uint32_t rank_;
  size_t elem_;
  uint8_t* base_;
  std::vector<Range> blocks_;
  size_t slices_ = 1;
  uint32_t lanes_ = 1;
  uint32_t right_ = 0;  // neighbours in the ring
  uint32_t left_ = 0;
  std::vector<Slot> slots_;
  size_t next_slice_ = 0;
  size_t finished_ = 0;
  bool compressed_ = false;
};

// Recursive doubling (recursive_doubling.hpp), the whole buffer in each message. Every node
// combines buffer = buffer op partner's buffer; since op is commutative, both partners compute
// the same bits and every node ends identical.
class RecursiveDoublingAllreduce final : public AllreduceAlgorithm {
 public:
  RecursiveDoublingAllreduce(PointToPoint& net, int tag_base, const AllreduceSpec& spec,
                             const AllreduceHooks& hooks)
      : net_(net),
        spec_(spec),
        hooks_(hooks),
        bytes_(spec.count * proto::dtype_size(spec.dtype)),
        walk_(recursive_doubling_steps(net.rank(), net.size(), tag_base)) {
    algorithm_tally().count_rd();
    if (spec.count > 0) {
      hooks.prepare(0, spec.count);
      tmp_ = hooks.scratch(bytes_);
    }
  }

  bool progress() override {
    if (spec_.count == 0 || delivered_) return true;
    const auto post = [this](const DoublingStep& s, P2pRequest& send, P2pRequest& recv) {
      if (s.kind == DoublingStep::Kind::kSend || s.kind == DoublingStep::Kind::kExchange) {
        send = net_.isend(0, s.peer, s.tag, spec_.buffer, bytes_);
      }
      if (s.kind != DoublingStep::Kind::kSend) {
        void* into = s.kind == DoublingStep::Kind::kReceive ? spec_.buffer : tmp_;
        recv = net_.irecv(0, s.peer, s.tag, into, bytes_);
      }
    };
    const auto combine = [this](const DoublingStep&) {
      accumulate(spec_.dtype, spec_.op, spec_.buffer, tmp_, spec_.count);
    };
    if (!walk_.advance(net_, post, combine)) return false;
    delivered_ = true;
    hooks_.done(0, spec_.count);
    return true;
  }

 private:
  PointToPoint& net_;
  AllreduceSpec spec_;
  AllreduceHooks hooks_;
  size_t bytes_;
  void* tmp_ = nullptr;
  DoublingWalk walk_;
  bool delivered_ = false;
};

class RecordExchange final : public AllreduceAlgorithm {
 public:
  RecordExchange(PointToPoint& net, int tag_base, void* records, size_t bytes, size_t send_bytes)
      : net_(net) {
    auto* base = static_cast<uint8_t*>(records);
    const uint32_t me = net.rank();
    for (uint32_t peer = 0; peer < net.size(); ++peer) {
      if (peer == me) continue;
      pending_.push_back(net.irecv(0, peer, tag_base, base + peer * bytes, bytes));
      pending_.push_back(net.isend(0, peer, tag_base, base + me * bytes, send_bytes));
    }
  }
  bool progress() override {
    std::erase_if(pending_, [this](P2pRequest r) { return net_.done(r); });
    return pending_.empty();
  }

 private:
  PointToPoint& net_;
  std::vector<P2pRequest> pending_;
};

}  // namespace

std::unique_ptr<AllreduceAlgorithm> make_ring_allreduce(PointToPoint& net, int tag_base,
                                                        const AllreduceSpec& spec,
                                                        const AllreduceHooks& hooks,
                                                        const AlgorithmTuning& tuning) {
  check_tags(net, tag_base);
  return std::make_unique<RingAllreduce>(net, tag_base, spec, hooks, tuning);
}

std::unique_ptr<AllreduceAlgorithm> make_recursive_doubling_allreduce(PointToPoint& net,
                                                                      int tag_base,
                                                                      const AllreduceSpec& spec,
                                                                      const AllreduceHooks& hooks) {
  check_tags(net, tag_base);
  return std::make_unique<RecursiveDoublingAllreduce>(net, tag_base, spec, hooks);
}

std::unique_ptr<AllreduceAlgorithm> make_record_exchange(PointToPoint& net, int tag_base,
                                                         void* records, size_t bytes,
                                                         size_t send_bytes) {
  check_tags(net, tag_base);
  if (send_bytes > bytes) {
    throw TransportError(
        fmt::format("record exchange: {} bytes to send from a {}-byte record", send_bytes, bytes));
  }
  return std::make_unique<RecordExchange>(net, tag_base, records, bytes, send_bytes);
}

}  // namespace nodecomm::daemon
