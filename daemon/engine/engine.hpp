// The engine: drains running jobs' submission rings, matches operations, reduces the node's
// buffers, drives the inter-node part through the Transport, and delivers results.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "config/tuning.hpp"
#include "engine/in_flight.hpp"
#include "engine/job.hpp"
#include "engine/staging.hpp"
#include "net/transport.hpp"

namespace nodecomm::daemon {

class ClientSession;
class EngineObserver;

class Engine {
 public:
  Engine(Transport& transport, StagingPool& staging, EngineLimits limits = {})
      : transport_(transport), staging_(staging), limits_(limits) {}

  // Priorities, fusion and chunking for operations that span nodes (schedule.hpp); a job's
  // own overrides (NODECOMM_PRIORITY_POLICY, ...) apply on top.
  void set_scheduler_tuning(const SchedulerTuning& tuning) { sched_ = tuning; }
  void set_limits(const EngineLimits& limits) { limits_ = limits; }
  const SchedulerTuning& scheduler_tuning() const { return sched_; }
  const EngineLimits& limits() const { return limits_; }
  // This daemon's inter-node algorithm settings. Node 0's are sent with every scheduling
  // round and every daemon applies them to its transport before starting the round's units,
  // so a runtime change (nodecommctl set chunk-size) reaches all nodes at the same point. A
  // job in sequence order has no rounds: it keeps the settings it started with until it ends.
  void set_algorithm_tuning(const AlgorithmTuning& tuning) { algorithm_ = tuning; }
  const AlgorithmTuning& algorithm_tuning() const { return algorithm_; }
  // Who is told what the engine does (the counters segment); null: nobody.
  void set_observer(EngineObserver* observer) { observer_ = observer; }

  // One pass over a running job: new submissions, then progress. Returns work done.
  size_t poll(Job& job);
  // A member is gone: every operation still gathering fails for all remaining members and so
  // does everything they submit later. Inter-node operations already started run to the end,
  // because the other daemons are in them too.
  void member_lost(Job& job, ClientSession& lost, const std::string& why);
  // Another node's daemon reported a failure of this job (Transport::poll_notice): the world
  // and every communicator with world rank `rank` fail as after a local loss, naming what
  // the other node said.
  void remote_failure(Job& job, uint32_t rank, proto::Status status, const std::string& text);
  // Another node's daemon is gone (Transport::check_peers): every communicator that spans
  // nodes fails, operations on the network included, naming the lost node.
  void node_lost(Job& job, const std::string& text);
  // Failures found here since the last call, for the other daemons (Transport::send_notice):
  // the world rank whose communicators fail, and why.
  struct FailureNotice {
    uint32_t rank;
    proto::Status status;
    std::string text;
  };
  std::vector<FailureNotice> take_notices() { return std::exchange(notices_, {}); }
  // Transfers, summary exchanges or scheduling rounds still on the network: the daemon keeps
  // polling the job while there are any, even once its members are gone.
  bool has_inter_node_work() const { return in_flight_.value() > 0; }

 private:
  size_t drain(Job& job, ClientSession& member);
  void accept(Job& job, ClientSession& member, const proto::OpDescriptor& desc, uint64_t now);
  size_t progress(Job& job, Communicator& comm);
  // Ordering: every daemon must start a communicator's inter-node work in the same order.
  // One of two policies per pass, from the job's tuning (SchedulerTuning::negotiated): the
  // negotiated scheduler (rounds: priorities, fusion, chunking; engine_schedule.cpp), or
  // sequence order (each operation's summary exchanged and compared, then started in order;
  // progress_in_sequence). Both compare summaries with op_check.hpp before data moves, and
  // both hold an InFlightToken for everything they put on the network.
  size_t progress_in_sequence(Job& job, Communicator& comm);
  size_t progress_negotiated(Job& job, Communicator& comm, const SchedulerTuning& tuning);
  size_t poll_units(Job& job, Communicator& comm);
  void start_round(Job& job, Communicator& comm, const SchedulerTuning& tuning);
  void apply_round(Job& job, Communicator& comm);
  void start_unit(Job& job, Communicator& comm, ScheduledUnit unit);
  void unit_done(Job& job, Communicator& comm, ScheduledUnit& unit);
  void fail_unit(Job& job, Communicator& comm, ScheduledUnit& unit, const std::string& why,
                 proto::Status status = proto::Status::kPeerLost);
  // A node is gone: the round and units on the network are given up (their records and
  // buffers kept, the transport may still write into them) and no longer count as work.
  void abandon_schedule(CommSchedule& sched);
  bool locally_ready(const Communicator& comm, const Operation& op) const;
  // Stall reports and operation timeouts, at most once a second.
  void check_stalls(Job& job, uint64_t now);
  std::string stall_report(const Job& job, Communicator& comm, const Operation& op,
                           uint64_t now) const;
  // Poisons every communicator `affected` picks and fails what has not reached the network.
  void fail_all(Job& job, proto::Status status, const std::string& reason,
                const std::function<bool(const Communicator&, uint32_t)>& affected);
  // Sequence order (engine_sequence.cpp): every node's summary of `op` is exchanged and
  // compared before its transfer starts (op_check.hpp); a disagreement poisons the
  // communicator everywhere.
  size_t cross_check(Job& job, Communicator& comm, Operation& op);
  // Gives up op's summary exchange on a failed communicator: another node may never join it
  // (its ranks failed first). The records stay with the engine, as the transport may still
  // write into them; the communicator's group does no further exchanges.
  void abandon_check(Operation& op);
  // Count agreement among the node's members (count_agreement.hpp); empty if they agree.
  static std::string local_counts_disagreement(const Operation& op, const CommLayout& lay);
  // Reserves op's staging against the caps once it is ready; a refusal fails it with
  // NC_ERR_NO_MEMORY (on one node now, between nodes after the agreement, on every node).
  void reserve_staging(Job& job, Communicator& comm, Operation& op);
  // Staging could not be allocated (StagingExhausted): op fails with NC_ERR_NO_MEMORY.
  void fail_no_memory(Job& job, Communicator& comm, Operation& op, const std::string& what);
  static std::string local_ranks(const CommLayout& lay);
  void start(Job& job, Communicator& comm, Operation& op);
  void finish(Job& job, Communicator& comm, Operation& op);
  void complete(Job& job, Communicator& comm, Operation& op, proto::Status status,
                const std::string& message);
  // A transfer of `op` failed in the transport: it fails, and so does its communicator.
  void fail_between_nodes(Job& job, Communicator& comm, Operation& op, const char* why);
  void fail_one(ClientSession& member, const proto::OpDescriptor& desc, proto::Status status,
                const std::string& message);

  Transport& transport_;
  StagingPool& staging_;
  EngineLimits limits_;
  SchedulerTuning sched_;
  AlgorithmTuning algorithm_;
  EngineObserver* observer_ = nullptr;
  // Every transfer, summary exchange and round on the network holds one token of this
  // (in_flight.hpp), moved along with the work and dropped with it.
  InFlightCounter in_flight_;
  std::vector<FailureNotice> notices_;
  // What was on the network with a lost node: kept, never reused, since the transport may
  // still write into it.
  std::deque<Operation> abandoned_ops_;
  std::deque<ScheduledUnit> abandoned_units_;
  std::deque<std::vector<uint8_t>> abandoned_records_;
  std::deque<std::vector<OpSummary>> abandoned_checks_;
  uint64_t last_stall_check_ns_ = 0;
};

}  // namespace nodecomm::daemon
