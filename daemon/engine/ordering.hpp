// Ordering: every daemon must start a communicator's inter-node work in the same order. One
// interface, two policies: sequence order (each operation's summary exchanged and compared, then
// started strictly in sequence; engine_sequence.cpp) and the negotiated scheduler (rounds:
// priorities, fusion, chunking; engine_schedule.cpp). Both compare summaries with op_check.hpp
// before data moves, and both hold an InFlightToken for everything they put on the network.
//
// The Engine picks one per pass over a communicator: a communicator that spans nodes is
// negotiated when the job's SchedulerTuning says so (SchedulerTuning::negotiated), every other
// one runs in sequence order. The tuning can change at runtime (nodecommctl set), so a
// communicator may still hold state of the other policy: the failure hooks below go to both.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "config/tuning.hpp"
#include "engine/job.hpp"
#include "engine/schedule.hpp"
#include "engine/wire_formats.hpp"

namespace nodecomm::daemon {

class Engine;

class OrderingPolicy {
 public:
  virtual ~OrderingPolicy() = default;
  // One pass over comm's operations: start, poll and finish what this policy orders. Returns
  // work done.
  virtual size_t progress(Job& job, Communicator& comm, const SchedulerTuning& tuning) = 0;
  // A node is gone: what this policy has on the network for comm and no operation owns (rounds,
  // units) is given up. Its records and buffers are kept, as the transport may still write into
  // them, and it no longer counts as work.
  virtual void node_lost(Communicator& comm) = 0;
  // op fails on a failed communicator before reaching the network: an agreement exchange of it
  // is given up, as another node may never join it (its ranks failed first).
  virtual void abandon(Operation& op) = 0;
};

// Sequence order, without priorities or fusion (`--priority-policy none` and `--fusion off`;
// also every single-node communicator).
class SequenceOrder final : public OrderingPolicy {
 public:
  explicit SequenceOrder(Engine& engine) : engine_(engine) {}
  size_t progress(Job& job, Communicator& comm, const SchedulerTuning& tuning) override;
  // Its exchanges belong to operations, which Engine::node_lost keeps whole.
  void node_lost(Communicator&) override {}
  void abandon(Operation& op) override;

 private:
  // Every node's summary of `op` is exchanged and compared before its transfer starts
  // (op_check.hpp); a disagreement poisons the communicator everywhere.
  size_t cross_check(Job& job, Communicator& comm, Operation& op);

  // Start, finish, completion and failure paths, the transport and the in-flight count
  // (Engine befriends this class).
  Engine& engine_;
  // Summary exchanges given up: kept, never reused, since the transport may still write there.
  std::deque<std::vector<OpSummary>> abandoned_checks_;
};

// The negotiated scheduler (schedule.hpp): rounds, priorities, chunking and fusion.
class NegotiatedOrder final : public OrderingPolicy {
 public:
  explicit NegotiatedOrder(Engine& engine) : engine_(engine) {}
  size_t progress(Job& job, Communicator& comm, const SchedulerTuning& tuning) override;
  void node_lost(Communicator& comm) override;
  // Its agreement is the communicator's round, which the other nodes run regardless.
  void abandon(Operation&) override {}

 private:
  size_t poll_units(Job& job, Communicator& comm, const SchedulerTuning& tuning);
  void start_round(Job& job, Communicator& comm, const SchedulerTuning& tuning);
  std::string round_result(Communicator& comm, RoundRecord& out);
  void apply_round(Job& job, Communicator& comm);
  // seq, which every node carried in this round's records, reduced over them (`bytes` at
  // `combined`), is delivered here.
  void complete_eager(Job& job, Communicator& comm, uint64_t seq, const uint8_t* combined,
                      uint32_t bytes);
  void start_unit(Job& job, Communicator& comm, ScheduledUnit unit);
  void unit_done(Job& job, Communicator& comm, ScheduledUnit& unit);
  void fail_unit(Job& job, Communicator& comm, ScheduledUnit& unit, const std::string& why,
                 proto::Status status = proto::Status::kPeerLost);
  bool locally_ready(const Communicator& comm, const Operation& op) const;
  // The communicator's window and chunk, or its share of the link (Engine::set_link_share).
  size_t window(const CommSchedule& sched, const SchedulerTuning& tuning, size_t nodes) const;
  size_t chunk(const CommSchedule& sched, const SchedulerTuning& tuning, size_t nodes) const;

  Engine& engine_;  // as in SequenceOrder
  // Rounds and units given up with a lost node: kept for their buffers, never reused.
  std::deque<ScheduledUnit> abandoned_units_;
  std::deque<std::vector<uint8_t>> abandoned_records_;
};

}  // namespace nodecomm::daemon
