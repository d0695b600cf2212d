// The engine: drains running jobs' submission rings, matches operations, reduces the node's
// buffers, drives the inter-node part through the Transport, and delivers results.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/inter_node.hpp"
#include "config/tuning.hpp"
#include "engine/in_flight.hpp"
#include "engine/job.hpp"
#include "engine/ordering.hpp"
#include "engine/staging.hpp"
#include "net/transport.hpp"
#include "nodecomm/ipc/clock.hpp"

namespace nodecomm::daemon {

class ClientSession;
class EngineObserver;

class Engine {
 public:
  Engine(Transport& transport, StagingPool& staging, EngineLimits limits = {})
      : transport_(transport), staging_(staging), limits_(limits) {}
  // Its ordering policies hold a reference to it: it stays where it was made.
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Inter-node operations started and not yet complete (the daemon polls hard while any are).
  size_t network_in_flight() const { return transport_.in_flight(); }

  // Priorities, fusion and chunking for operations that span nodes (schedule.hpp); a job's
  // own overrides (NODECOMM_PRIORITY_POLICY, ...) apply on top.
  void set_scheduler_tuning(const SchedulerTuning& tuning) { sched_ = tuning; }
  void set_limits(const EngineLimits& limits) { limits_ = limits; }
  const SchedulerTuning& scheduler_tuning() const { return sched_; }
  const EngineLimits& limits() const { return limits_; }
  // Its share of the link when other jobs use it too (Daemon::share_links): the bytes each
  // multi-node communicator of the job may have on the network, and the chunk they move in,
  // the same for every job sharing the link (the transport interleaves jobs message by
  // message, so equal chunks make the windows' ratio the bytes' ratio). Zeros: the
  // communicator's own (CommSchedule::window, chunk). Every node's round takes the least room
  // of all, so a job moves at the pace of its most shared node.
  struct LinkShare {
    size_t window = 0;
    size_t chunk = 0;
  };
  void set_link_share(LinkShare share) { link_share_ = share; }
  // This daemon's inter-node algorithm settings. Node 0's are sent with every scheduling
  // round and every daemon applies them to its transport before starting the round's units,
  // so a runtime change (nodecommctl set chunk-size) reaches all nodes at the same point. A
  // job in sequence order has no rounds: it keeps the settings it started with until it ends.
  void set_algorithm_tuning(const AlgorithmTuning& tuning) { algorithm_ = tuning; }
  const AlgorithmTuning& algorithm_tuning() const { return algorithm_; }
  // The algorithm parameters in effect for operations started from now on: the configured
  // ones, or in a multi-node job what its scheduling rounds agreed (node 0's).
  void set_algorithm_in_effect(const AlgorithmTuning& tuning) { transport_.set_tuning(tuning); }
  const AlgorithmTuning& algorithm_in_effect() const { return transport_.tuning(); }
  // Who is told what the engine does (the counters segment); null: nobody.
  void set_observer(EngineObserver* observer) { observer_ = observer; }

  // One pass over a running job: new submissions, then progress. Returns work done. `now`: the
  // caller's clock for this pass (the daemon reads it once per pass for all its jobs).
  size_t poll(Job& job, uint64_t now);
  size_t poll(Job& job) { return poll(job, ipc::monotonic_ns()); }
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
  // `now`: the pass's clock, read once by poll (a clock read costs 40 ns on some virtual
  // machines, and a spinning daemon drains every member on every pass).
  size_t drain(Job& job, ClientSession& member, uint64_t now);
  void accept(Job& job, ClientSession& member, const proto::OpDescriptor& desc, uint64_t now);
  // Ordering (ordering.hpp): one pass over comm by its policy, sequence order or the
  // negotiated scheduler, from the job's tuning (SchedulerTuning::negotiated).
  size_t progress(Job& job, Communicator& comm);
  // Stall reports and operation timeouts, at most once a second.
  void check_stalls(Job& job, uint64_t now);
  std::string stall_report(const Job& job, Communicator& comm, const Operation& op,
                           uint64_t now) const;
  // Poisons every communicator `affected` picks and fails what has not reached the network.
  void fail_all(Job& job, proto::Status status, const std::string& reason,
                const std::function<bool(const Communicator&, uint32_t)>& affected);
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

  // The inter-node operations: algorithm choice and the point-to-point algorithms over the
  // transport (algorithms/inter_node.hpp).
  InterNode transport_;
  StagingPool& staging_;
  EngineLimits limits_;
  SchedulerTuning sched_;
  LinkShare link_share_;
  AlgorithmTuning algorithm_;
  EngineObserver* observer_ = nullptr;
  // Every transfer, summary exchange and round on the network holds one token of this
  // (in_flight.hpp), moved along with the work and dropped with it.
  InFlightCounter in_flight_;
  std::vector<FailureNotice> notices_;
  // What was on the network with a lost node: kept, never reused, since the transport may
  // still write into it.
  std::deque<Operation> abandoned_ops_;
  uint64_t last_stall_check_ns_ = 0;
  // The two ordering policies reach into the engine (start, finish, complete, the transport,
  // the in-flight count); both are kept, as a communicator may hold state of either.
  friend class SequenceOrder;
  friend class NegotiatedOrder;
  SequenceOrder sequence_order_{*this};
  NegotiatedOrder negotiated_order_{*this};
  std::array<OrderingPolicy*, 2> policies() { return {&sequence_order_, &negotiated_order_}; }
};

}  // namespace nodecomm::daemon
