// Issue 18 point 4 and issue 20 point 4: which units a daemon holds for a more urgent operation
// (daemon/engine/urgency.cpp), and that communicators over more than --sched-hold-max-nodes
// nodes never hold: beyond it, the model puts the holds' cost above a tenth of a step.
#include "engine/urgency.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "config/tuning.hpp"
#include "engine/job.hpp"

namespace nodecomm::daemon {
namespace {

constexpr uint64_t kNow = 1'000'000'000;

// A communicator of one local rank on `nodes` nodes with a priority-0 allreduce (seq 1), two
// chunks of it on the network, and a priority-5 one (seq 2), ready here; `urgent_started` puts a
// chunk of the urgent one on the network too.
Communicator comm_with_urgent(uint32_t nodes, bool urgent_started) {
  CommLayout layout;
  layout.size = nodes;
  layout.node_count = nodes;
  layout.members = {0};
  Communicator comm(0, layout);
  for (const auto& [seq, priority] : {std::pair<uint64_t, int32_t>{1, 0}, {2, 5}}) {
    Submission s{};
    s.desc.seq = seq;
    s.desc.count = 1024;
    s.desc.priority = priority;
    s.desc.collective = static_cast<uint16_t>(proto::Collective::kAllreduce);
    s.submitted_ns = kNow;
    Operation& op = comm.add(0, s);
    op.phase = seq == 1 ? Operation::Phase::kInterNode : Operation::Phase::kReady;
    op.scheduled_elems = seq == 1 || urgent_started ? 1024 : 0;
  }
  // Two chunks of the less urgent one: one is held even while the oldest goes on.
  std::vector<uint64_t> started = {1, 1};
  if (urgent_started) started.push_back(2);
  for (const uint64_t seq : started) {
    ScheduledUnit& unit = comm.schedule.units.emplace_back();
    unit.kind = ScheduledUnit::Kind::kChunk;
    unit.seqs = {seq};
  }
  return comm;
}

SchedulerTuning direct() {
  SchedulerTuning t;
  t.policy = proto::PriorityPolicy::kDirect;
  return t;
}

TEST(Urgency, HoldsTheLessUrgentUnitsOnceTheUrgentIsOnTheNetwork) {
  Communicator comm = comm_with_urgent(4, true);
  EXPECT_EQ(units_to_hold(comm, direct(), kNow), (std::vector<bool>{true, true, false}));
}

TEST(Urgency, TheOldestLessUrgentUnitGoesOnUntilThen) {
  Communicator comm = comm_with_urgent(4, false);
  EXPECT_EQ(units_to_hold(comm, direct(), kNow), (std::vector<bool>{false, true}));
}

TEST(Urgency, NoHoldBeyondHoldMaxNodes) {
  const SchedulerTuning t = direct();
  ASSERT_EQ(t.hold_max_nodes, kHoldMaxNodes);
  Communicator at = comm_with_urgent(kHoldMaxNodes, true);
  EXPECT_FALSE(units_to_hold(at, t, kNow).empty());
  Communicator beyond = comm_with_urgent(kHoldMaxNodes + 1, true);
  EXPECT_TRUE(units_to_hold(beyond, t, kNow).empty());
  SchedulerTuning off = t;
  off.hold_max_nodes = 0;
  Communicator two = comm_with_urgent(2, true);
  EXPECT_TRUE(units_to_hold(two, off, kNow).empty());
}

// A training step's gradients: each arrives more urgent than the last while the daemon still
// holds for the one before. No hold until hold_stream_us passes without a newer one, then one
// for the most urgent; an urgent operation that finds no hold under way is held for at once.
TEST(Urgency, AStreamOfRisingUrgenciesHoldsOnlyAfterItsLastArrival) {
  const SchedulerTuning t = direct();
  const uint64_t stream_ns = uint64_t{t.hold_stream_us} * 1000;
  Communicator comm = comm_with_urgent(4, true);
  ASSERT_FALSE(units_to_hold(comm, t, kNow).empty());  // the first one alone: held for at once
  comm.schedule.record_holds(true, kNow);
  Submission s{};
  s.desc.seq = 3;
  s.desc.count = 1024;
  s.desc.priority = 9;
  s.desc.collective = static_cast<uint16_t>(proto::Collective::kAllreduce);
  s.submitted_ns = kNow;
  comm.add(0, s).phase = Operation::Phase::kReady;
  const uint64_t arrival = kNow + 1000;
  EXPECT_TRUE(units_to_hold(comm, t, arrival).empty());  // a stream: the first hold ends
  comm.schedule.record_holds(false, arrival);
  EXPECT_TRUE(units_to_hold(comm, t, arrival + stream_ns - 1).empty());
  // No newer arrival for hold_stream_us: hold for the most urgent (still within hold_us).
  EXPECT_FALSE(units_to_hold(comm, t, arrival + stream_ns).empty());

  SchedulerTuning every = t;
  every.hold_stream_us = 0;
  Communicator old = comm_with_urgent(4, true);
  ASSERT_FALSE(units_to_hold(old, every, kNow).empty());
  old.schedule.record_holds(true, kNow);
  old.add(0, s).phase = Operation::Phase::kReady;
  EXPECT_FALSE(units_to_hold(old, every, arrival).empty());
}

TEST(Urgency, NothingIsHeldWithoutPriorities) {
  SchedulerTuning none;
  none.policy = proto::PriorityPolicy::kNone;
  Communicator comm = comm_with_urgent(4, true);
  EXPECT_TRUE(units_to_hold(comm, none, kNow).empty());
}

}  // namespace
}  // namespace nodecomm::daemon
