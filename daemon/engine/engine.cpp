#include "engine/engine.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

#include "config/log.hpp"
#include "engine/collectives.hpp"
#include "engine/comm_split.hpp"
#include "engine/count_agreement.hpp"
#include "engine/observer.hpp"
#include "engine/op_check.hpp"
#include "engine/submission_decode.hpp"
#include "nodecomm/ipc/clock.hpp"
#include "nodecomm/ipc/fixed_text.hpp"
#include "nodecomm/ipc/validate.hpp"
#include "session/client_session.hpp"

namespace nodecomm::daemon {

using proto::Status;

namespace {
constexpr size_t kDrainBatch = 64;  // submissions taken from one client per pass

std::string who(const Job& job, const ClientSession& member) {
  return fmt::format("rank {} (node {}, local rank {}, pid {})", member.world_rank, job.node_index,
                     member.local_rank, member.cred().pid);
}

}  // namespace

size_t Engine::poll(Job& job, uint64_t now_ns) {
  transport_.begin_pass();
  staging_.set_owner(job.serial);  // a new job never sees staging another one used
  job.residuals.set_limits(limits_.max_feedback_tensors, limits_.max_feedback_bytes);
  size_t work = 0;
  if (now_ns - last_stall_check_ns_ >= 1'000'000'000ull) {
    last_stall_check_ns_ = now_ns;
    check_stalls(job, now_ns);
  }
  for (ClientSession* member : job.members) {
    if (member != nullptr && member->state() == ClientSession::State::kJoined) {
      work += drain(job, *member, now_ns);
    }
  }
  for (auto it = job.comms.begin(); it != job.comms.end();) {
    Communicator& comm = *it->second;
    work += progress(job, comm);
    if (comm.freed && comm.ops().empty()) {
      if (comm.layout().node_comm != kAllNodes) transport_.free_group(comm.layout().node_comm);
      it = job.comms.erase(it);
    } else {
      ++it;
    }
  }
  for (ClientSession* member : job.members) {
    if (member != nullptr) work += member->flush();
  }
  return work;
}

size_t Engine::drain(Job& job, ClientSession& member, uint64_t now) {
  size_t taken = 0;
  // Backpressure: a client that does not read its completions gets no more work taken from
  // its ring, so its submissions fail with NC_ERR_QUEUE_FULL instead of growing the daemon.
  if (member.backlog() >= member.segment().complete_capacity()) return 0;
  proto::OpDescriptor desc;
  while (taken < kDrainBatch && member.violation.empty()) {
    const ipc::RingResult r = member.submissions().try_pop(desc);
    if (r == ipc::RingResult::kEmpty) break;
    if (r == ipc::RingResult::kCorrupt) {
      member.violation = fmt::format(
          "{}: submission ring position is impossible (consumed {}, capacity {}); the producer "
          "position ran ahead or backwards",
          who(job, member), member.submissions().position(), member.segment().submit_capacity());
      break;
    }
    ++taken;
    accept(job, member, desc, now);
  }
  return taken;
}

void Engine::accept(Job& job, ClientSession& member, const proto::OpDescriptor& desc,
                    uint64_t now) {
  Communicator* found = job.find_comm(desc.comm_id);
  const int k = found != nullptr ? found->layout().member_of_local(member.local_rank) : -1;
  if (found == nullptr || found->freed || k < 0) {
    fail_one(member, desc, Status::kInvalidArgument,
             fmt::format("{} {} seq {}: communicator {} does not exist here (never created, "
                         "already freed, or this rank is not a member)",
                         who(job, member), describe_submission(desc), desc.seq, desc.comm_id));
    return;
  }
  Communicator& comm = *found;
  uint64_t& expected = member.next_seq.try_emplace(comm.id(), 1).first->second;
  if (desc.seq != expected) {
    member.violation = fmt::format("{}: submitted seq {} on comm {}, expected seq {}",
                                   who(job, member), desc.seq, comm.id(), expected);
    return;
  }
  ++expected;
  const uint32_t comm_rank = comm.layout().member_ranks[static_cast<size_t>(k)];
  ipc::ValidationLimits limits{member.segment().arena_bytes(), limits_.max_count,
                               comm.layout().size, comm_rank};
  limits.region_bytes = member.regions().sizes();
  limits.region_count = member.regions().count();
  Submission submission{desc, now, {}};
  const ipc::Verdict verdict = decode_submission(
      desc, limits, submission.aux, [&](uint64_t offset, void* out, size_t bytes) {
        std::memcpy(out, member.segment().arena() + offset, bytes);
      });
  if (!verdict.ok()) {
    // The other members cannot complete this sequence number without this rank, so the
    // communicator fails for all of them, naming the culprit.
    const std::string text = fmt::format("{} {} seq {}: {}", who(job, member),
                                         describe_submission(desc), desc.seq, verdict.message);
    fail_one(member, desc, verdict.status, text);
    comm.poison(Status::kPeerLost, "invalid operation from " + text);
    notices_.push_back(
        {member.world_rank, Status::kInvalidArgument, "invalid operation from " + text});
    // A descriptor no correct client writes: its memory cannot be trusted any more.
    if (!verdict.over_limit) member.violation = "invalid descriptor: " + text;
    return;
  }
  if (comm.poisoned()) {
    fail_one(member, desc, comm.poison_status(),
             fmt::format("{} seq {} not run: {}", describe_submission(desc), desc.seq,
                         comm.poison_reason()));
    return;
  }
  if (member.in_flight >= limits_.max_in_flight) {
    // Filing it would let a rank that posts far ahead of its peers grow the daemon without
    // bound. Its sequence number is consumed, so the peers could never complete it: the
    // communicator fails for everyone, as after an invalid operation (NCCL likewise leaves a
    // communicator unusable after an error).
    const std::string text = fmt::format(
        "{} {} seq {} on comm {}: {} operations of this rank are already in flight in "
        "nodecommd, the limit (--max-in-flight {}); it posted too far ahead of its peers",
        who(job, member), describe_submission(desc), desc.seq, comm.id(), member.in_flight,
        limits_.max_in_flight);
    fail_one(member, desc, Status::kQueueFull, text);
    comm.poison(Status::kQueueFull, text);
    notices_.push_back({member.world_rank, Status::kQueueFull, text});
    return;
  }
  ++member.in_flight;  // until Engine::complete delivers it
  Operation& op = comm.add(static_cast<uint32_t>(k), submission);
  if (op.arrived < comm.local_size()) return;
  std::string text;
  if (const std::string diff = describe_disagreement(op, comm.layout()); !diff.empty()) {
    text = fmt::format("mismatched collective on comm {} {}", comm.id(), diff);
  } else if (const std::string counts = local_counts_disagreement(op, comm.layout());
             !counts.empty()) {
    // What each rank sends must be what its peers expect, before any data moves.
    text = fmt::format("mismatched counts on comm {}: {}", comm.id(), counts);
  }
  if (!text.empty()) {
    complete(job, comm, op, Status::kMismatch, text);
    comm.poison(Status::kMismatch, text);
    notices_.push_back({job.world_rank_of(comm.layout().members[0]), Status::kMismatch, text});
    return;
  }
  op.phase = Operation::Phase::kReady;
  reserve_staging(job, comm, op);
}

std::string Engine::local_counts_disagreement(const Operation& op, const CommLayout& lay) {
  const auto collective = static_cast<proto::Collective>(op.first().collective);
  if (proto::aux_entries(collective, lay.size) == 0) return {};
  std::vector<MemberCounts> members;
  for (size_t k = 0; k < op.slots.size(); ++k) {
    members.push_back({lay.member_ranks[k], op.slots[k]->desc.count, op.slots[k]->aux.data()});
  }
  return local_count_disagreement(collective, op.seq, lay.size, members);
}

void Engine::reserve_staging(Job& job, Communicator& comm, Operation& op) {
  const size_t bytes = staging_bytes(comm.layout(), op);
  if (bytes == 0) return;
  op.staging_reserved_bytes = bytes;
  const std::string why = staging_.reserve(bytes);
  if (why.empty()) {
    op.staging_held = true;
    return;
  }
  op.staging_refused = fmt::format(
      "out of staging memory: {} seq {} on comm {} ({} on node {}) "
      "needs {} bytes; {}",
      describe_submission(op.first()), op.seq, comm.id(), local_ranks(comm.layout()),
      job.node_index, bytes, why);
  // On one node the operation fails here and now. Between nodes it goes on to the agreement
  // with the refusal in its summary, and every node fails it alike (cross_node_refusal).
  if (comm.layout().node_count == 1) complete(job, comm, op, Status::kNoMemory, op.staging_refused);
}

std::string Engine::local_ranks(const CommLayout& lay) {
  return fmt::format("{} {}", lay.member_ranks.size() == 1 ? "rank" : "ranks",
                     fmt::join(lay.member_ranks, ","));
}

void Engine::fail_no_memory(Job& job, Communicator& comm, Operation& op, const std::string& what) {
  CollectiveContext ctx{job, comm, staging_, transport_};
  release_staging(ctx, op);
  const std::string text =
      fmt::format("out of staging memory: {} seq {} on comm {} ({} on node {}): {}",
                  describe_submission(op.first()), op.seq, comm.id(), local_ranks(comm.layout()),
                  job.node_index, what);
  complete(job, comm, op, Status::kNoMemory, text);
  if (comm.layout().node_count > 1) {
    // The other nodes agreed to run it and may already be in its transfer: the communicator
    // cannot pair up later operations any more, here or there.
    comm.poison(Status::kNoMemory, text);
    notices_.push_back({job.world_rank_of(comm.layout().members[0]), Status::kNoMemory, text});
  }
}

size_t Engine::progress(Job& job, Communicator& comm) {
  if (comm.layout().node_count > 1) {
    const SchedulerTuning tuning = with_job_overrides(sched_, job.requested);
    if (tuning.negotiated()) {
      OrderingPolicy& policy = negotiated_order_;
      return policy.progress(job, comm, tuning);
    }
  }
  OrderingPolicy& policy = sequence_order_;  // it takes no tuning
  return policy.progress(job, comm, sched_);
}

void Engine::start(Job& job, Communicator& comm, Operation& op) {
  CollectiveContext ctx{job, comm, staging_, transport_};
  const auto collective = static_cast<proto::Collective>(op.first().collective);
  if (collective == proto::Collective::kCommFree) {
    comm.freed = true;
    if (const size_t n = job.residuals.drop_comm(comm.id()); n > 0) {
      NC_LOG(kDebug, "job {}: comm {} freed with {} int8 error-feedback residual(s)", job.name,
             comm.id(), n);
    }
    complete(job, comm, op, Status::kOk, {});
    return;
  }
  if (collective == proto::Collective::kCommSplit) {
    // Two network steps: exchange the records, then create the daemons' groups.
    split_stage_in(ctx, op);
    const bool exchange = comm.layout().node_count > 1;
    op.split_step = exchange ? 1 : 2;
    op.handle = exchange ? split_start_network(ctx, op) : split_start_groups(ctx, op);
    op.phase = Operation::Phase::kInterNode;
    op.on_network = in_flight_.acquire();
    return;
  }
  if (stage_in(ctx, op)) {
    complete(job, comm, op, Status::kOk, {});
    return;
  }
  if (comm.layout().node_count == 1) {
    finish(job, comm, op);
    return;
  }
  op.handle = start_network(ctx, op);
  op.phase = Operation::Phase::kInterNode;
  op.on_network = in_flight_.acquire();
}

void Engine::finish(Job& job, Communicator& comm, Operation& op) {
  CollectiveContext ctx{job, comm, staging_, transport_};
  if (static_cast<proto::Collective>(op.first().collective) == proto::Collective::kCommSplit) {
    if (op.split_step == 1) {
      op.split_step = 2;
      op.handle = split_start_groups(ctx, op);
      return;  // still on the network: op keeps its on_network token
    }
    split_finish(ctx, op, op.handle);
  } else {
    stage_out(ctx, op);
  }
  if (op.member_lost_midway) {
    // The poison names the member and why it was lost (Engine::member_lost).
    const std::string why = comm.poisoned() ? ": " + comm.poison_reason() : std::string();
    complete(job, comm, op, Status::kPeerLost,
             fmt::format("{} seq {} cannot complete: a member of comm {} was lost while its "
                         "buffers were in use{}",
                         describe_submission(op.first()), op.seq, comm.id(), why));
    return;
  }
  complete(job, comm, op, Status::kOk, {});
}

void Engine::fail_between_nodes(Job& job, Communicator& comm, Operation& op, const char* why) {
  CollectiveContext ctx{job, comm, staging_, transport_};
  release_staging(ctx, op);
  const std::string text = fmt::format("{} seq {} failed between nodes: {}",
                                       describe_submission(op.first()), op.seq, why);
  complete(job, comm, op, Status::kPeerLost, text);
  comm.poison(Status::kPeerLost, text);
}

void Engine::complete(Job& job, Communicator& comm, Operation& op, Status status,
                      const std::string& message) {
  const uint64_t now = ipc::monotonic_ns();
  const CommLayout& lay = comm.layout();
  for (size_t k = 0; k < op.slots.size(); ++k) {
    ClientSession* member = job.members[lay.members[k]];
    if (!op.slots[k] || member == nullptr) continue;
    if (member->in_flight > 0) --member->in_flight;
    proto::Completion c{};
    c.correlation_id = op.slots[k]->desc.correlation_id;
    c.seq = op.seq;
    c.status = static_cast<int32_t>(status);
    c.comm_id = op.slots[k]->desc.comm_id;
    c.elapsed_ns = now - op.last_arrival_ns;
    c.new_comm_id = proto::kNoComm;
    if (k < op.split_results.size()) {
      c.new_comm_id = op.split_results[k].comm;
      c.new_comm_rank = op.split_results[k].rank;
      c.new_comm_size = op.split_results[k].size;
    }
    ipc::copy_text(c.message, message);
    member->complete(c);
  }
  if (op.staging_held) {
    staging_.unreserve(op.staging_reserved_bytes);
    op.staging_held = false;
  }
  if (observer_ != nullptr) observer_->op_completed(job, comm, op, status, now);
  if (status != Status::kOk) {
    NC_LOG(kWarn, "job {}: {} seq {} on comm {} failed: {}", job.name,
           describe_submission(op.first()), op.seq, comm.id(), message);
  }
  // Done: whatever of it was on the network no longer keeps the engine polling.
  op.on_network.release();
  op.phase = Operation::Phase::kDone;
}

void Engine::fail_one(ClientSession& member, const proto::OpDescriptor& desc, Status status,
                      const std::string& message) {
  proto::Completion c{};
  c.correlation_id = desc.correlation_id;
  c.seq = desc.seq;
  c.status = static_cast<int32_t>(status);
  c.comm_id = desc.comm_id;
  c.new_comm_id = proto::kNoComm;
  ipc::copy_text(c.message, message);
  member.complete(c);
  NC_LOG(kWarn, "client {} (pid {}): {}", member.id(), member.cred().pid, message);
}

void Engine::member_lost(Job& job, ClientSession& lost, const std::string& why) {
  const std::string reason = fmt::format("{} was lost: {}", who(job, lost), why);
  // A rank that finalized has finished every operation it posted: nothing to tell the others.
  if (why != "called finalize") notices_.push_back({lost.world_rank, Status::kPeerLost, reason});
  fail_all(job, Status::kPeerLost, reason, [&](const Communicator& comm, uint32_t id) {
    return comm.layout().member_of_local(lost.local_rank) >= 0 || id == 0;
  });
}

void Engine::remote_failure(Job& job, uint32_t rank, Status status, const std::string& text) {
  fail_all(job, status, text, [rank](const Communicator& comm, uint32_t id) {
    const auto& ranks = comm.layout().world_rank_of;
    return id == 0 || std::find(ranks.begin(), ranks.end(), rank) != ranks.end();
  });
}

void Engine::node_lost(Job& job, const std::string& text) {
  for (auto& [id, comm] : job.comms) {
    if (comm->layout().node_count == 1) continue;  // only this node's ranks: unaffected
    comm->poison(Status::kPeerLost, text);
    // Transfers with the lost node never finish. Their buffers stay with the engine, because
    // the transport may still write into them, and their members get the error now.
    for (OrderingPolicy* policy : policies()) policy->node_lost(*comm);
    auto& ops = comm->ops();
    for (auto it = ops.begin(); it != ops.end();) {
      Operation& op = it->second;
      const bool on_network = op.phase == Operation::Phase::kInterNode || op.check != 0;
      // Completing it gives up its on_network token.
      if (op.phase != Operation::Phase::kDone) {
        complete(job, *comm, op, Status::kPeerLost,
                 fmt::format("{} seq {} cannot complete: {}", describe_submission(op.first()),
                             op.seq, text));
      }
      if (on_network) {
        abandoned_ops_.push_back(std::move(op));
        it = ops.erase(it);
      } else {
        ++it;
      }
    }
  }
}

void Engine::fail_all(Job& job, Status status, const std::string& reason,
                      const std::function<bool(const Communicator&, uint32_t)>& affected) {
  for (auto& [id, comm] : job.comms) {
    if (!affected(*comm, id)) continue;
    comm->poison(status, reason);
    for (auto& [seq, op] : comm->ops()) {
      // Even one whose summary exchange is in flight: the node that failed first may never
      // enter that exchange (its ranks' operation failed before it could).
      if (op.phase == Operation::Phase::kGathering || op.phase == Operation::Phase::kReady) {
        for (OrderingPolicy* policy : policies()) policy->abandon(op);
        complete(job, *comm, op, status,
                 fmt::format("{} seq {} cannot complete: {}", describe_submission(op.first()), seq,
                             reason));
      }
    }
  }
}

std::string Engine::stall_report(const Job& job, Communicator& comm, const Operation& op,
                                 uint64_t now) const {
  const CommLayout& lay = comm.layout();
  std::vector<uint32_t> have;
  std::vector<uint32_t> missing;
  for (size_t k = 0; k < op.slots.size(); ++k) {
    (op.slots[k] ? have : missing).push_back(lay.member_ranks[k]);
  }
  std::string text = fmt::format("job {} comm {} seq {} ({}) has waited {:.0f} s: ", job.name,
                                 comm.id(), op.seq, describe_submission(op.first()),
                                 static_cast<double>(now - op.first_arrival_ns) / 1e9);
  if (!missing.empty()) {
    return text + fmt::format("submitted by ranks {}, not yet by ranks {} on this node",
                              fmt::join(have, ","), fmt::join(missing, ","));
  }
  if (op.phase == Operation::Phase::kInterNode) {
    return text + "every rank here submitted it; its transfer between nodes has not finished";
  }
  // Ready here: which nodes had not offered it at the last scheduling round.
  std::vector<uint32_t> behind;
  const auto& ready = comm.schedule.ready_by_node;
  for (size_t n = 0; n < ready.size(); ++n) {
    if (ready[n].count(op.seq) == 0) behind.push_back(static_cast<uint32_t>(n));
  }
  if (!behind.empty()) {
    return text + fmt::format(
                      "every rank here submitted it; node(s) {} of the communicator had not at "
                      "the last scheduling round",
                      fmt::join(behind, ","));
  }
  return text + "every rank here submitted it; waiting for the other nodes";
}

void Engine::check_stalls(Job& job, uint64_t now) {
  const uint64_t stall_ns = uint64_t{limits_.stall_sec} * 1'000'000'000ull;
  const uint64_t timeout_ns = uint64_t{limits_.op_timeout_sec} * 1'000'000'000ull;
  for (auto& [id, comm] : job.comms) {
    for (auto& [seq, op] : comm->ops()) {
      if (op.phase == Operation::Phase::kDone || op.slots.empty()) continue;
      const uint64_t age = now - op.first_arrival_ns;
      if (limits_.op_timeout_sec > 0 && age >= timeout_ns &&
          op.phase != Operation::Phase::kInterNode) {
        const std::string text =
            fmt::format("operation timeout ({} s, --op-timeout-sec): {}", limits_.op_timeout_sec,
                        stall_report(job, *comm, op, now));
        for (OrderingPolicy* policy : policies()) policy->abandon(op);
        complete(job, *comm, op, Status::kTimeout, text);
        comm->poison(Status::kTimeout, text);
        notices_.push_back({job.world_rank_of(comm->layout().members[0]), Status::kTimeout, text});
        continue;
      }
      if (limits_.stall_sec > 0 && age >= stall_ns && !op.stall_reported) {
        op.stall_reported = true;
        if (observer_ != nullptr) observer_->stall_reported();
        NC_LOG(kWarn, "stall: {}", stall_report(job, *comm, op, now));
      }
    }
  }
}

}  // namespace nodecomm::daemon
