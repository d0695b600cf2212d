#include "engine/urgency.hpp"

#include <algorithm>
#include <optional>

#include "engine/schedule.hpp"

namespace nodecomm::daemon {
namespace {

// How urgent `op` is under `policy`: what `direct` and `lifo` order by; nothing under `none`.
std::optional<int64_t> urgency(const Operation& op, proto::PriorityPolicy policy) {
  if (policy == proto::PriorityPolicy::kDirect) return op.first().priority;
  if (policy == proto::PriorityPolicy::kLifo) return static_cast<int64_t>(op.seq);
  return std::nullopt;
}

void raise(std::optional<int64_t>& most, std::optional<int64_t> u) {
  if (u && (!most || *u > *most)) most = u;
}

// The urgency of the most urgent operation posted here that is not finished, for hold_us after
// it became ready here: one no round has handed out yet may be posted much later elsewhere,
// and one that has waited that long is part of a backlog drained in priority order, where
// holding for each in turn would pay every operation's message steps one after another.
std::optional<int64_t> most_urgent(Communicator& comm, const SchedulerTuning& tuning,
                                   uint64_t now) {
  std::optional<int64_t> most;
  for (const auto& [seq, op] : comm.ops()) {
    if (is_comm_management(op)) continue;
    if (op.phase != Operation::Phase::kReady && op.phase != Operation::Phase::kInterNode) continue;
    if (now > op.last_arrival_ns + uint64_t{tuning.hold_us} * 1000) {
      continue;
    }
    raise(most, urgency(op, tuning.policy));
  }
  return most;
}

// A unit's urgency: its most urgent operation's.
std::optional<int64_t> urgency(Communicator& comm, const ScheduledUnit& unit,
                               proto::PriorityPolicy policy) {
  std::optional<int64_t> most;
  for (const uint64_t seq : unit.seqs) {
    const auto found = comm.ops().find(seq);
    if (found != comm.ops().end()) raise(most, urgency(found->second, policy));
  }
  return most;
}

}  // namespace

std::vector<bool> units_to_hold(Communicator& comm, const SchedulerTuning& tuning, uint64_t now) {
  if (tuning.hold_us == 0 || comm.poisoned() || comm.layout().node_count > tuning.hold_max_nodes) {
    return {};
  }
  const std::optional<int64_t> urgent = most_urgent(comm, tuning, now);
  CommSchedule& sched = comm.schedule;
  // A newer, more urgent operation while holding (or within a stream) supersedes the hold
  // before the links have drained for it: in a stream no hold pays for the links it idles.
  const bool rising = urgent && sched.urgent_seen && *urgent > *sched.urgent_seen;
  if (tuning.hold_stream_us != 0 && rising && (sched.holding || now < sched.stream_until_ns)) {
    sched.stream_until_ns = now + uint64_t{tuning.hold_stream_us} * 1000;
  }
  sched.urgent_seen = urgent;
  if (!urgent || now < sched.stream_until_ns) return {};
  const auto& units = sched.units;
  std::vector<bool> less_urgent(units.size(), false);
  // Until the urgent operation has a unit on the network, the oldest less urgent unit keeps
  // going: it keeps the links busy while the urgent operation's round is out, and its
  // completion leaves the window room for that round. (Held units stay in the window: a round
  // for every urgent arrival regardless of room would cut the fused transfers of a stream of
  // operations into one round each, which cost a training step 10 %.) Then it is held too, so
  // nothing less urgent joins the links ahead of the urgent transfer's steps.
  bool urgent_on_network = false;
  bool any = false;
  for (size_t k = 0; k < units.size(); ++k) {
    const std::optional<int64_t> u = urgency(comm, units[k], tuning.policy);
    if (u && *u >= *urgent) urgent_on_network = true;
    // Whole units may be the transport's own collectives, which it must keep polling.
    less_urgent[k] = u && *u < *urgent && units[k].kind != ScheduledUnit::Kind::kWhole;
    any = any || less_urgent[k];
  }
  if (!any) return {};
  if (!urgent_on_network) {
    for (size_t k = 0; k < units.size(); ++k) {
      if (less_urgent[k]) {
        less_urgent[k] = false;  // the oldest goes on
        break;
      }
    }
  }
  if (std::find(less_urgent.begin(), less_urgent.end(), true) == less_urgent.end()) return {};
  return less_urgent;
}

}  // namespace nodecomm::daemon
