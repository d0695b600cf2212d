// The negotiated scheduler (NegotiatedOrder, ordering.hpp): priorities, chunking and fusion
// for communicators that span nodes (see schedule.hpp for the design). Every daemon runs the
// same rounds in the same order, and from the same combined record computes the same units in
// the same order, so the transport sees identical start sequences everywhere.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <tuple>
#include <type_traits>
#include <utility>

#include "config/log.hpp"
#include "engine/collectives.hpp"
#include "engine/engine.hpp"
#include "engine/observer.hpp"
#include "engine/op_check.hpp"
#include "engine/round_record.hpp"
#include "engine/urgency.hpp"
#include "engine/wire_formats.hpp"
#include "kernels/reduce.hpp"
#include "nodecomm/ipc/clock.hpp"

namespace nodecomm::daemon {

using proto::Status;

namespace {

// Every node has announced what its ranks posted for `seq` (apply_round has compared them).
// A split or free starts only then: it takes no ready bit and moves no data through the
// rounds, so without this a node whose ranks posted something else would never be told.
bool agreed_everywhere(const CommSchedule& sched, uint64_t seq, size_t node_count) {
  const auto found = sched.announced.find(seq);
  return found != sched.announced.end() && found->second.nodes == node_count;
}

// Reduces the eager parts of the operations in `kinds` (this node's, the only ones whose
// parts survive a combination with this node's record). Captures nothing of the engine: a
// round given up with a lost node may still run.
EagerCombine eager_combiner(std::vector<std::pair<uint64_t, EagerReduction>> kinds) {
  return [kinds = std::move(kinds)](uint64_t seq, uint8_t* into, const uint8_t* other,
                                    uint32_t bytes) {
    for (const auto& [s, r] : kinds) {
      if (s != seq) continue;
      const size_t elem = proto::dtype_size(r.wire);
      if (elem == 0) return false;
      accumulate(r.wire, r.op, into, other, bytes / elem);
      return true;
    }
    return false;
  };
}

// A record in a round's buffer, read in place: the buffer holds whole records end to end, each
// 8-byte aligned, and copying them out would cost every round more than combining them does.
template <class Byte>
auto& record_at(Byte* at) {
  using Record = std::conditional_t<std::is_const_v<Byte>, const RoundRecord, RoundRecord>;
  return *std::launder(reinterpret_cast<Record*>(at));
}

// Merges the record that arrived at `incoming` (nodes [first, first + nodes) as the
// recursive doubling expects) into this node's at `record`; returns the bytes to send next.
// A malformed one is not merged but named in the record, so the round still completes and
// every node that learns of it fails the communicator (apply_round).
size_t combine_received(uint8_t* record, const uint8_t* incoming, uint32_t node_count,
                        uint32_t first, uint32_t nodes, const EagerCombine& eager,
                        uint32_t comm_id) {
  RoundRecord& mine = record_at(record);
  const RoundRecord& theirs = record_at(incoming);
  std::string problem = round_record_problem(theirs, node_count);
  if (problem.empty() && (theirs.nodes != nodes || theirs.lead_node != first)) {
    problem = fmt::format("covers {} node(s) led by node {}, expected {} from node {}",
                          theirs.nodes, theirs.lead_node, nodes, first);
  }
  if (!problem.empty()) {
    NC_LOG(kError, "scheduling round on comm {}: the record of nodes {}..{} is malformed: {}",
           comm_id, first, first + nodes - 1, problem);
    mine.malformed_node = std::min(mine.malformed_node, first);
    return round_record_bytes(mine);
  }
  auto merged = std::make_unique<RoundRecord>();  // the merge needs an output of its own
  merge_round_records(mine, theirs, *merged, eager);
  std::memcpy(record, merged.get(), sizeof(RoundRecord));
  return round_record_bytes(*merged);
}

// This node's operation for `seq`, if it is still here.
const Operation* local_op(Communicator& comm, uint64_t seq) {
  const auto found = comm.ops().find(seq);
  return found == comm.ops().end() ? nullptr : &found->second;
}

// This node's operation for `seq`, which a round's plan names; nullptr after poisoning the
// communicator when it is not here (the daemons' plans have diverged).
Operation* agreed_op(Communicator& comm, uint64_t seq) {
  const auto found = comm.ops().find(seq);
  if (found != comm.ops().end()) return &found->second;
  comm.poison(
      Status::kInternal,
      fmt::format("scheduling on comm {}: seq {} was agreed but is unknown here", comm.id(), seq));
  return nullptr;
}

bool is_allreduce(const Operation& op) {
  return static_cast<proto::Collective>(op.first().collective) == proto::Collective::kAllreduce;
}

bool is_int8(const Operation& op) {
  return static_cast<proto::Compression>(op.first().compression) == proto::Compression::kInt8;
}

// Bytes a whole non-allreduce operation puts on the network, roughly, for the round budget.
size_t whole_bytes(const Operation& op, const CommLayout& lay) {
  const auto dtype = static_cast<proto::DType>(op.first().dtype);
  return static_cast<size_t>(op.first().count) * proto::dtype_size(dtype) * lay.size;
}

}  // namespace

bool NegotiatedOrder::locally_ready(const Communicator& comm, const Operation& op) const {
  if (is_comm_management(op) || comm.schedule.fully_scheduled(op.seq)) return false;
  return op.phase == Operation::Phase::kReady ||
         (op.phase == Operation::Phase::kInterNode && op.scheduled_elems > 0);
}

size_t NegotiatedOrder::progress(Job& job, Communicator& comm, const SchedulerTuning& tuning) {
  CommSchedule& sched = comm.schedule;
  size_t work = poll_units(job, comm, tuning);
  if (sched.round != 0) {
    try {
      if (engine_.transport_.test(sched.round)) {
        sched.round = 0;
        sched.round_on_network.release();
        sched.record_round(ipc::monotonic_ns());
        apply_round(job, comm);
        ++work;
      }
    } catch (const TransportError& e) {
      sched.round = 0;
      sched.round_on_network.release();
      comm.poison(
          Status::kPeerLost,
          fmt::format("scheduling round on comm {} failed between nodes: {}", comm.id(), e.what()));
    }
  }
  auto& ops = comm.ops();
  // Operations no round will take: failures, and a split or free once everything before it
  // has left the network (nothing overtakes those, see SequenceOrder::progress).
  for (auto it = ops.begin(); it != ops.end();) {
    Operation& op = it->second;
    // After a failure no new round starts, so what is not wholly on the network fails now.
    const bool on_network = op.units_in_flight.value() > 0 || sched.fully_scheduled(op.seq) ||
                            (is_comm_management(op) && op.phase == Operation::Phase::kInterNode);
    if (comm.poisoned() && !on_network && op.phase != Operation::Phase::kDone) {
      engine_.complete(job, comm, op, comm.poison_status(),
                       fmt::format("{} seq {} not run: {}", describe_submission(op.first()), op.seq,
                                   comm.poison_reason()));
    }
    if (is_comm_management(op) && op.seq == sched.floor && sched.units.empty() &&
        sched.round == 0 && op.phase == Operation::Phase::kReady &&
        agreed_everywhere(sched, op.seq, comm.layout().node_count)) {
      engine_.start(job, comm, op);
      ++work;
    }
    if (is_comm_management(op) && op.phase == Operation::Phase::kInterNode) {
      try {
        if (engine_.transport_.test(op.handle)) {
          engine_.finish(job, comm, op);
          ++work;
        }
      } catch (const TransportError& e) {
        engine_.fail_between_nodes(job, comm, op, e.what());
      }
    }
    if (is_comm_management(op) && op.phase == Operation::Phase::kDone && op.seq == sched.floor) {
      sched.mark_scheduled(op.seq);
    }
    // A finished operation stays while a transfer still uses its buffers, and until every
    // daemon has handed it out, so that a round that names it finds it.
    if (op.phase == Operation::Phase::kDone && op.units_in_flight.value() == 0 &&
        (sched.fully_scheduled(op.seq) || !op.advertised)) {
      CollectiveContext ctx{job, comm, engine_.staging_, engine_.transport_};
      release_staging(ctx, op);
      it = ops.erase(it);
    } else {
      ++it;
    }
  }
  // A new round once at least one chunk fits in the window by the time its plan arrives.
  const size_t nodes = comm.layout().node_count;
  const size_t chunk = this->chunk(sched, tuning, nodes);
  const size_t window_now = window(sched, tuning, nodes);
  if (sched.round == 0 && !comm.poisoned() &&
      sched.bytes_in_flight.value() - sched.drained_during_round(window_now) + chunk <=
          std::max(window_now, chunk)) {
    const uint64_t now = ipc::monotonic_ns();
    const bool cycle_passed = tuning.fusion_cycle_us == 0 ||
                              now - sched.last_round_ns >= tuning.fusion_cycle_us * 1000ull;
    bool any_ready = false;
    for (auto it = ops.lower_bound(sched.floor);
         it != ops.end() && it->first < sched.floor + kWindow; ++it) {
      if (is_comm_management(it->second)) break;
      if (locally_ready(comm, it->second)) {
        any_ready = true;
        break;
      }
    }
    const auto floor_op = ops.find(sched.floor);
    const bool fence = floor_op != ops.end() && is_comm_management(floor_op->second);
    // A split or free at the floor waits for every node's announcement of it; every node
    // sees the same records, so all of them keep starting rounds until it has arrived.
    const bool fence_unconfirmed = fence && floor_op->second.phase == Operation::Phase::kReady &&
                                   !agreed_everywhere(sched, sched.floor, comm.layout().node_count);
    if (((any_ready && !fence) || fence_unconfirmed) && cycle_passed) {
      start_round(job, comm, tuning);
      ++work;
    }
  }
  return work;
}

size_t NegotiatedOrder::window(const CommSchedule& sched, const SchedulerTuning& tuning,
                               size_t nodes) const {
  const size_t share = engine_.link_share_.window;
  return share != 0 ? share : sched.window(tuning, nodes);
}

size_t NegotiatedOrder::chunk(const CommSchedule& sched, const SchedulerTuning& tuning,
                              size_t nodes) const {
  const size_t share = engine_.link_share_.chunk;
  return share != 0 ? share : sched.chunk(tuning, nodes);
}

void NegotiatedOrder::start_round(Job& job, Communicator& comm, const SchedulerTuning& tuning) {
  CommSchedule& sched = comm.schedule;
  const CommLayout& lay = comm.layout();
  auto own = std::make_unique<RoundRecord>();  // zeroed
  RoundRecord& mine = *own;
  mine.nodes = 1;
  mine.lead_node = lay.node_index;
  mine.malformed_node = kNoNode;
  mine.gather_nodes = tuning.gather_nodes;
  mine.floor_low = sched.floor;
  mine.floor_high = sched.floor;
  mine.policy = static_cast<uint32_t>(tuning.policy);
  mine.fusion = tuning.fusion ? 1 : 0;
  mine.fusion_threshold = tuning.fusion_threshold_bytes;
  mine.chunk_bytes = chunk(sched, tuning, lay.node_count);
  const size_t window = this->window(sched, tuning, lay.node_count);
  // The room the window will have when the plan arrives: the round overlaps transfers.
  const size_t staying = sched.bytes_in_flight.value() - sched.drained_during_round(window);
  mine.room = window - std::min(window, staying);
  mine.staying = staying;
  mine.algorithm = agreed_algorithm(engine_.algorithm_);
  std::vector<uint8_t> eager;  // the eager parts, placed after the announcements at the end
  std::vector<std::pair<uint64_t, EagerReduction>> eager_kinds;
  sched.announced_in_round.clear();
  if (engine_.observer_ != nullptr) engine_.observer_->round_started();
  const auto announce_op = [&](Operation& op) {
    add_announcement(mine, announce(summarize(op, lay), lay.node_index));
    op.announced = true;
    sched.announced_in_round.push_back(op.seq);
  };
  auto& ops = comm.ops();
  for (auto it = ops.lower_bound(sched.floor); it != ops.end() && it->first < sched.floor + kWindow;
       ++it) {
    Operation& op = it->second;
    if (is_comm_management(op)) {
      // Announced, never marked ready: it runs outside the rounds once all nodes agree.
      if (op.phase == Operation::Phase::kReady && !op.announced &&
          mine.announced < kAnnouncePerRound) {
        announce_op(op);
      }
      break;  // nothing overtakes a split or free
    }
    if (!locally_ready(comm, op)) continue;
    if (!op.announced) {
      if (mine.announced == kAnnouncePerRound) continue;
      announce_op(op);
    }
    const uint64_t i = it->first - sched.floor;
    mine.ready[i / 64] |= uint64_t{1} << (i % 64);
    op.advertised = true;
    // A small allreduce carries this node's part: if every node carries it in this round, it
    // completes with the round (apply_round).
    const size_t room_left = std::min(tuning.eager_bytes, kEagerBytes) - eager.size();
    const size_t bytes = op.scheduled_elems == 0 && mine.eager < kEagerOps
                             ? eager_allreduce_bytes(lay, op, room_left)
                             : 0;
    if (bytes > 0) {
      const size_t at = eager.size();
      eager.resize(at + (bytes + 7) / 8 * 8);
      CollectiveContext ctx{job, comm, engine_.staging_, engine_.transport_};
      if (eager_allreduce_part(ctx, op, eager.data() + at)) {
        mine.eager_ops[mine.eager++] = {op.seq, static_cast<uint32_t>(at),
                                        static_cast<uint32_t>(bytes)};
        eager_kinds.emplace_back(op.seq, eager_allreduce_reduction(lay, op));
      } else {
        eager.resize(at);
      }
    }
  }
  // The parts follow the announcements.
  const size_t parts_at = size_t{mine.announced} * sizeof(Announcement);
  if (!eager.empty()) std::memcpy(mine.tail + parts_at, eager.data(), eager.size());
  for (uint32_t k = 0; k < mine.eager; ++k) mine.eager_ops[k].offset += parts_at;
  sched.round_eager = eager_combiner(std::move(eager_kinds));
  const uint32_t nodes = lay.node_count;
  sched.round_combined = nodes > sched.gather_nodes;
  if (!sched.round_combined) {
    // All-to-all: one step; every node then combines the N records in node order.
    sched.round_records.assign(sizeof(RoundRecord) * nodes, 0);
    std::memcpy(sched.round_records.data() + sizeof(RoundRecord) * lay.node_index, &mine,
                sizeof(mine));
    sched.round = engine_.transport_.start_exchange(lay.node_comm, sched.round_records.data(),
                                                    sizeof(RoundRecord), round_record_bytes(mine));
  } else {
    // Recursive doubling: this node's record, and room for a peer's.
    sched.round_records.assign(2 * sizeof(RoundRecord), 0);
    uint8_t* record = sched.round_records.data();
    uint8_t* incoming = record + sizeof(RoundRecord);
    std::memcpy(record, &mine, sizeof(mine));
    RecordCombineSpec spec;
    spec.record = record;
    spec.incoming = incoming;
    spec.capacity = sizeof(RoundRecord);
    spec.send_bytes = round_record_bytes(mine);
    spec.combine = [record, incoming, nodes, eager_combine = sched.round_eager,
                    comm_id = comm.id()](uint32_t first, uint32_t count) {
      return combine_received(record, incoming, nodes, first, count, eager_combine, comm_id);
    };
    sched.round = engine_.transport_.start_combine(lay.node_comm, std::move(spec));
  }
  sched.last_round_ns = ipc::monotonic_ns();
  ++sched.rounds;
  sched.round_on_network = engine_.in_flight_.acquire();
}

// The round's records combined into `out`; empty, or why the communicator fails.
std::string NegotiatedOrder::round_result(Communicator& comm, RoundRecord& out) {
  CommSchedule& sched = comm.schedule;
  const CommLayout& lay = comm.layout();
  const uint32_t nodes = lay.node_count;
  if (sched.round_combined) {
    out = record_at(std::as_const(sched.round_records).data());
    sched.ready_by_node.clear();  // only the nodes' AND travelled
    std::string problem = round_record_problem(out, nodes);
    if (problem.empty() && out.malformed_node != kNoNode) {
      problem = fmt::format(
          "the record of node {} arrived malformed at a peer (that daemon's log names the "
          "problem)",
          out.malformed_node);
    }
    if (problem.empty() && (out.nodes != nodes || out.lead_node != 0)) {
      problem = fmt::format("it covers {} node(s) led by node {}, expected all {}", out.nodes,
                            out.lead_node, nodes);
    }
    return problem.empty() ? problem
                           : fmt::format(
                                 "scheduling round on comm {}: the combined record is "
                                 "malformed: {}",
                                 comm.id(), problem);
  }
  const auto record = [&](uint32_t n) -> const RoundRecord& {
    return record_at(std::as_const(sched.round_records).data() + n * sizeof(RoundRecord));
  };
  for (uint32_t n = 0; n < nodes; ++n) {
    std::string problem = round_record_problem(record(n), nodes);
    if (problem.empty() && (record(n).nodes != 1 || record(n).lead_node != n)) {
      problem =
          fmt::format("it covers {} node(s) led by node {}", record(n).nodes, record(n).lead_node);
    }
    if (!problem.empty()) {
      return fmt::format("scheduling round on comm {}: node {}'s record is malformed: {}",
                         comm.id(), n, problem);
    }
  }
  sched.ready_by_node.assign(nodes, {});
  for (uint32_t n = 0; n < nodes; ++n) {
    for_each_ready(record(n), [&](size_t i) { sched.ready_by_node[n].insert(sched.floor + i); });
  }
  // In node order, as every node does.
  if (nodes == 1) {
    std::memcpy(&out, &record(0), sizeof(RoundRecord));
    return {};
  }
  auto spare = std::make_unique<RoundRecord>();
  const RoundRecord* acc = &record(0);
  for (uint32_t n = 1; n < nodes; ++n) {
    // The last merge lands in `out`; the others alternate between `out` and the spare.
    RoundRecord& into = (nodes - 1 - n) % 2 == 0 ? out : *spare;
    merge_round_records(*acc, record(n), into, sched.round_eager);
    acc = &into;
  }
  return {};
}

void NegotiatedOrder::apply_round(Job& job, Communicator& comm) {
  CommSchedule& sched = comm.schedule;
  const CommLayout& lay = comm.layout();
  auto combined = std::make_unique<RoundRecord>();
  if (std::string problem = round_result(comm, *combined); !problem.empty()) {
    // With recursive doubling not every node may know: the others are told.
    engine_.notices_.push_back({job.world_rank_of(lay.members[0]), Status::kInternal, problem});
    comm.poison(Status::kInternal, problem);
    return;
  }
  const RoundRecord& all = *combined;
  if (all.floor_low != sched.floor || all.floor_high != sched.floor) {
    comm.poison(Status::kInternal,
                fmt::format("scheduling on comm {} diverged between nodes: this node is at "
                            "seq {}, the nodes between seq {} and {}",
                            comm.id(), sched.floor, all.floor_low, all.floor_high));
    return;
  }
  sched.gather_nodes = std::max<uint32_t>(all.gather_nodes, 1);
  // What the nodes announced, combined with earlier rounds' until the floor passes it.
  sched.announced.erase(sched.announced.begin(), sched.announced.lower_bound(sched.floor));
  std::set<uint64_t> announced_now;
  for (uint32_t k = 0; k < all.announced; ++k) {
    const Announcement a = announcement(all, k);
    const uint64_t seq = a.low.seq;
    auto [found, fresh] = sched.announced.try_emplace(seq, a);
    if (!fresh) found->second = merge_announcements(found->second, a);
    if (found->second.nodes > lay.node_count) {
      comm.poison(Status::kInternal,
                  fmt::format("scheduling on comm {}: seq {} announced by {} nodes, of {}",
                              comm.id(), seq, found->second.nodes, lay.node_count));
      return;
    }
    announced_now.insert(seq);
  }
  // This node's announcements that the combined record had no room for go out again.
  for (const uint64_t seq : sched.announced_in_round) {
    if (announced_now.count(seq) != 0) continue;
    if (auto op = comm.ops().find(seq); op != comm.ops().end()) op->second.announced = false;
  }
  sched.announced_in_round.clear();
  // A sequence number whose last announcement arrived in this round is compared at once,
  // ready or not (a split or free is never ready), so a mismatch fails everywhere before any
  // node acts on it. Earlier ones were compared in the round that completed them.
  for (const uint64_t seq : announced_now) {
    if (!agreed_everywhere(sched, seq, lay.node_count)) continue;
    if (std::string disagreement =
            cross_node_disagreement(comm.id(), seq, sched.announced[seq], lay, local_op(comm, seq));
        !disagreement.empty()) {
      comm.poison(Status::kMismatch, disagreement);
      return;
    }
  }
  engine_.set_algorithm_in_effect(
      with_agreed_algorithm(engine_.algorithm_in_effect(), all.algorithm));
  const auto policy = static_cast<proto::PriorityPolicy>(all.policy);
  const size_t chunk = std::max<uint64_t>(all.chunk_bytes, 1);
  // Ready on every node, and announced by every node (an announcement a combined record had no
  // room for is made again in a later round).
  std::vector<uint64_t> eligible;
  for_each_ready(all, [&](size_t i) {
    if (agreed_everywhere(sched, sched.floor + i, lay.node_count)) eligible.push_back(i);
  });
  // Nothing moves until every node's ranks are known to have posted the same operation: an
  // eligible operation's announcements were compared in the round that brought the last of
  // them (above), and a disagreement has poisoned the communicator already.
  // Agreed, but a node cannot stage it: it fails on every node alike and leaves the plan;
  // the communicator stays usable. Marked as handed out once the plan has started (marking
  // moves the floor, from which `eligible` counts).
  std::vector<uint64_t> refused_seqs;
  std::erase_if(eligible, [&](uint64_t i) {
    const uint64_t seq = sched.floor + i;
    const std::string refused = cross_node_refusal(comm.id(), seq, sched.announced[seq], lay);
    if (refused.empty()) return false;
    refused_seqs.push_back(seq);
    if (auto found = comm.ops().find(seq);
        found != comm.ops().end() && found->second.phase != Operation::Phase::kDone) {
      Operation& op = found->second;
      engine_.complete(job, comm, op, Status::kNoMemory,
                       op.staging_refused.empty() ? refused : op.staging_refused);
    }
    return true;
  });
  // Small allreduces that every node carried in this round complete now.
  std::vector<uint64_t> eager_seqs;
  std::erase_if(eligible, [&](uint64_t i) {
    const uint64_t seq = sched.floor + i;
    // Combined records keep only the parts that every node carried.
    const EagerEntry* entry = find_eager(all, seq);
    if (entry == nullptr) return false;
    eager_seqs.push_back(seq);
    complete_eager(job, comm, seq, all.tail + entry->offset, entry->bytes);
    return true;
  });
  if (comm.poisoned()) return;
  const auto priority_of = [&](uint64_t i) {
    return sched.announced[sched.floor + i].lead_priority;  // node 0's
  };
  if (policy == proto::PriorityPolicy::kDirect) {
    std::stable_sort(eligible.begin(), eligible.end(),
                     [&](uint64_t a, uint64_t b) { return priority_of(a) > priority_of(b); });
  } else if (policy == proto::PriorityPolicy::kLifo) {
    std::reverse(eligible.begin(), eligible.end());
  }
  // Hand out what every node has room for (at least one chunk), in policy order and in
  // units of at most a chunk. Small allreduces join a fused transfer with the same wire
  // format (placed where its first member falls in the order).
  const uint64_t room = all.room;
  size_t budget = std::max<size_t>(room, chunk);
  std::vector<ScheduledUnit> plan;
  using FuseKey = std::tuple<proto::DType, proto::RedOp, proto::Compression>;
  std::map<FuseKey, size_t> open_fusion;  // key -> index in plan
  std::vector<size_t> fused_bytes;        // by plan index
  for (const uint64_t i : eligible) {
    if (budget == 0) break;
    const uint64_t seq = sched.floor + i;
    Operation* agreed = agreed_op(comm, seq);
    if (agreed == nullptr) return;
    Operation& op = *agreed;
    ScheduledUnit unit;
    unit.seqs.push_back(seq);
    if (!is_allreduce(op) || is_int8(op)) {
      unit.kind = is_allreduce(op) ? ScheduledUnit::Kind::kInt8 : ScheduledUnit::Kind::kWhole;
      unit.bytes = whole_bytes(op, lay);
      budget -= std::min(budget, unit.bytes);
      plan.push_back(std::move(unit));
      fused_bytes.push_back(0);
      continue;
    }
    const AllreduceWire wire = allreduce_wire(lay, op);
    const size_t count = op.first().count;
    const size_t remaining = (count - op.scheduled_elems) * wire.elem;
    // A fused transfer is at most a chunk too, so that the next round can start while the
    // window still holds transfers (and a later high-priority operation waits behind one).
    const size_t fused_limit = std::min<size_t>(all.fusion_threshold, chunk);
    const bool fusable = all.fusion != 0 && op.scheduled_elems == 0 && remaining <= fused_limit;
    if (fusable) {
      const FuseKey key{wire.dtype, wire.op, wire.compression};
      auto open = open_fusion.find(key);
      if (open != open_fusion.end() && fused_bytes[open->second] + remaining <= fused_limit) {
        ScheduledUnit& fused = plan[open->second];
        fused.kind = ScheduledUnit::Kind::kFused;
        fused.seqs.push_back(seq);
        fused.offsets.push_back(fused.offsets.back() + fused.count);
        fused.count = count;  // elements of the last part, to place the next one
        fused.bytes += remaining;
        fused_bytes[open->second] += remaining;
        budget -= std::min(budget, remaining);
        continue;
      }
      unit.kind = ScheduledUnit::Kind::kChunk;
      unit.offsets.push_back(0);
      unit.first = 0;
      unit.count = count;
      unit.bytes = remaining;
      open_fusion[key] = plan.size();
      fused_bytes.push_back(remaining);
      budget -= std::min(budget, remaining);
      plan.push_back(std::move(unit));
      continue;
    }
    // Consecutive chunks of one operation while the budget lasts.
    size_t next = op.scheduled_elems;
    while (budget > 0 && next < count) {
      const size_t left = (count - next) * wire.elem;
      const size_t take = std::max<size_t>(std::min({left, budget, chunk}) / wire.elem, 1);
      ScheduledUnit piece;
      piece.seqs.push_back(seq);
      piece.kind = ScheduledUnit::Kind::kChunk;
      piece.first = next;
      piece.count = std::min(take, count - next);
      piece.bytes = piece.count * wire.elem;
      next += piece.count;
      budget -= std::min(budget, piece.bytes);
      plan.push_back(std::move(piece));
      fused_bytes.push_back(0);
    }
  }
  if (Log::get().enabled(LogLevel::kDebug)) {
    size_t planned_ops = 0;
    for (const ScheduledUnit& u : plan) planned_ops += u.seqs.size();
    NC_LOG(kDebug,
           "comm {} round {}: floor {}, {} ready everywhere, {} units for {} operations, "
           "room {} bytes, {} bytes in flight",
           comm.id(), sched.rounds, sched.floor, eligible.size(), plan.size(), planned_ops, room,
           sched.bytes_in_flight.value());
  }
  for (ScheduledUnit& unit : plan) {
    if (unit.kind == ScheduledUnit::Kind::kChunk && !unit.offsets.empty()) {
      unit.offsets.clear();  // a fusion candidate that found no partner: a whole-op chunk
    }
    unit.link_loaded = all.staying > 0;  // agreed: the combined record's
    start_unit(job, comm, std::move(unit));
  }
  for (const uint64_t seq : refused_seqs) sched.mark_scheduled(seq);
  for (const uint64_t seq : eager_seqs) sched.mark_scheduled(seq);
}

void NegotiatedOrder::complete_eager(Job& job, Communicator& comm, uint64_t seq,
                                     const uint8_t* combined, uint32_t bytes) {
  Operation* agreed = agreed_op(comm, seq);
  if (agreed == nullptr) return;
  Operation& op = *agreed;
  // Parts of another size than this node's are never combined (merge_round_records).
  if (const size_t expected = eager_allreduce_bytes(comm.layout(), op, kEagerBytes);
      bytes != expected) {
    comm.poison(Status::kInternal,
                fmt::format("scheduling on comm {}: the nodes carried {} bytes of seq {} in their "
                            "round records, expected {}",
                            comm.id(), bytes, seq, expected));
    return;
  }
  op.scheduled_elems = op.first().count;
  if (op.phase == Operation::Phase::kDone) return;  // failed here meanwhile: nothing to deliver
  op.phase = Operation::Phase::kInterNode;
  op.finished_elems = op.first().count;
  CollectiveContext ctx{job, comm, engine_.staging_, engine_.transport_};
  eager_allreduce_deliver(ctx, op, combined);
  if (engine_.observer_ != nullptr) engine_.observer_->eager_completed();
  engine_.finish(job, comm, op);
}

void NegotiatedOrder::start_unit(Job& job, Communicator& comm, ScheduledUnit unit) {
  CommSchedule& sched = comm.schedule;
  CollectiveContext ctx{job, comm, engine_.staging_, engine_.transport_};
  auto op_at = [&](uint64_t seq) -> Operation& { return comm.ops().at(seq); };
  // Operations already failed here still take part, on scratch data, because the other
  // daemons run this transfer too; their results are simply not delivered.
  try {
    switch (unit.kind) {
      case ScheduledUnit::Kind::kChunk: {
        Operation& op = op_at(unit.seqs[0]);
        if (!op.staged) {
          stage_in(ctx, op);
          op.staged = true;
        }
        if (op.phase == Operation::Phase::kReady) op.phase = Operation::Phase::kInterNode;
        op.scheduled_elems = unit.first + unit.count;
        if (op.scheduled_elems == op.first().count) sched.mark_scheduled(op.seq);
        unit.handle =
            start_allreduce_chunk(ctx, op, unit.first, unit.count, unit.scratch, unit.link_loaded);
        break;
      }
      case ScheduledUnit::Kind::kFused: {
        std::vector<FusedPart> parts;
        for (size_t k = 0; k < unit.seqs.size(); ++k) {
          Operation& op = op_at(unit.seqs[k]);
          if (op.phase == Operation::Phase::kReady) op.phase = Operation::Phase::kInterNode;
          op.scheduled_elems = op.first().count;
          sched.mark_scheduled(op.seq);
          parts.push_back({&op, unit.offsets[k]});
        }
        unit.handle =
            start_allreduce_fused(ctx, parts, unit.buffer, unit.scratch, unit.link_loaded);
        break;
      }
      case ScheduledUnit::Kind::kInt8:
      case ScheduledUnit::Kind::kWhole: {
        Operation& op = op_at(unit.seqs[0]);
        sched.mark_scheduled(op.seq);
        op.scheduled_elems = std::max<size_t>(op.first().count, 1);
        if (op.phase == Operation::Phase::kDone) {
          throw TransportError(fmt::format("seq {} already failed on this node", op.seq));
        }
        engine_.start(job, comm, op);  // stage_in + start_network, as without scheduling
        if (op.phase != Operation::Phase::kInterNode) return;  // finished at once
        unit.handle = op.handle;
        unit.on_network = std::move(op.on_network);  // the unit carries its transfer now
        break;
      }
    }
  } catch (const StagingExhausted& e) {
    // The other nodes run this unit: tell them, so their members fail instead of waiting.
    engine_.notices_.push_back(
        {job.world_rank_of(comm.layout().members[0]), Status::kNoMemory,
         fmt::format("out of staging memory on node {}: {}", job.node_index, e.what())});
    fail_unit(job, comm, unit, e.what(), Status::kNoMemory);
    return;
  } catch (const TransportError& e) {
    fail_unit(job, comm, unit, e.what());
    return;
  }
  unit.bytes_token = sched.bytes_in_flight.acquire(unit.bytes);
  if (!unit.on_network.held()) unit.on_network = engine_.in_flight_.acquire();
  for (const uint64_t seq : unit.seqs) {
    unit.op_tokens.push_back(comm.ops().at(seq).units_in_flight.acquire());
  }
  if (engine_.observer_ != nullptr)
    engine_.observer_->unit_started(job, comm, unit, ipc::monotonic_ns());
  sched.units.push_back(std::move(unit));
}

size_t NegotiatedOrder::poll_units(Job& job, Communicator& comm, const SchedulerTuning& tuning) {
  CommSchedule& sched = comm.schedule;
  size_t work = 0;
  // A unit not polled posts no further sends: what it has queued on the links drains, and a
  // more urgent operation's round and transfer find them empty instead of waiting behind it
  // (urgency.hpp). Its peers wait for it; they hold it too once the urgent operation is ready
  // there, and the hold ends when that completes or (not handed out) after hold_us, so nothing
  // waits forever.
  const uint64_t now = ipc::monotonic_ns();
  const std::vector<bool> hold = units_to_hold(comm, tuning, now);
  const bool held = !hold.empty();
  size_t position = 0;  // in sched.units as it was when `hold` was computed
  for (auto it = sched.units.begin(); it != sched.units.end();) {
    ScheduledUnit& unit = *it;
    if (position < hold.size() && hold[position++]) {
      ++it;
      continue;
    }
    bool finished = false;
    try {
      finished = engine_.transport_.test(unit.handle);
    } catch (const TransportError& e) {
      fail_unit(job, comm, unit, e.what());
      it = sched.units.erase(it);  // its tokens go with it
      ++work;
      continue;
    }
    if (!finished) {
      ++it;
      continue;
    }
    sched.record_completion(unit.bytes, ipc::monotonic_ns());
    unit_done(job, comm, unit);
    it = sched.units.erase(it);  // its tokens go with it
    ++work;
  }
  sched.record_holds(held, now);
  sched.adapt_urgent_target(tuning);
  return work;
}

void NegotiatedOrder::unit_done(Job& job, Communicator& comm, ScheduledUnit& unit) {
  if (engine_.observer_ != nullptr)
    engine_.observer_->unit_finished(job, comm, unit, ipc::monotonic_ns());
  engine_.staging_.release(unit.scratch);
  engine_.staging_.release(unit.buffer);
  for (size_t k = 0; k < unit.seqs.size(); ++k) {
    const uint64_t seq = unit.seqs[k];
    auto found = comm.ops().find(seq);
    if (found == comm.ops().end()) continue;
    Operation& op = found->second;
    unit.op_tokens[k].release();                        // this transfer no longer uses op's buffers
    if (op.phase == Operation::Phase::kDone) continue;  // failed here meanwhile
    if (unit.kind == ScheduledUnit::Kind::kChunk) {
      op.finished_elems += unit.count;
      if (op.finished_elems < op.first().count) continue;
    }
    engine_.finish(job, comm, op);
  }
}

void NegotiatedOrder::fail_unit(Job& job, Communicator& comm, ScheduledUnit& unit,
                                const std::string& why, Status status) {
  engine_.staging_.release(unit.scratch);
  engine_.staging_.release(unit.buffer);
  std::string text;
  for (size_t k = 0; k < unit.seqs.size(); ++k) {
    const uint64_t seq = unit.seqs[k];
    auto found = comm.ops().find(seq);
    if (found == comm.ops().end()) continue;
    Operation& op = found->second;
    // A unit that failed to start holds no tokens yet; another unit of op may still be running.
    if (k < unit.op_tokens.size()) unit.op_tokens[k].release();
    CollectiveContext ctx{job, comm, engine_.staging_, engine_.transport_};
    if (op.units_in_flight.value() == 0) release_staging(ctx, op);
    text = status == Status::kNoMemory
               ? fmt::format("out of staging memory: {} seq {} on comm {} ({} on node {}): {}",
                             describe_submission(op.first()), seq, comm.id(),
                             Engine::local_ranks(comm.layout()), job.node_index, why)
               : fmt::format("{} seq {} failed between nodes: {}", describe_submission(op.first()),
                             seq, why);
    if (op.phase != Operation::Phase::kDone) engine_.complete(job, comm, op, status, text);
  }
  if (!text.empty()) comm.poison(status, text);
}

void NegotiatedOrder::node_lost(Communicator& comm) {
  CommSchedule& sched = comm.schedule;
  if (sched.round != 0) {
    sched.round = 0;
    sched.round_on_network.release();
    abandoned_records_.push_back(std::move(sched.round_records));
  }
  for (ScheduledUnit& unit : sched.units) {
    unit.on_network.release();  // kept for its buffers only: nothing waits for it
    unit.bytes_token.release();
    abandoned_units_.push_back(std::move(unit));
  }
  sched.units.clear();
}

}  // namespace nodecomm::daemon
