// Sequence order, the ordering policy without priorities or fusion (`--priority-policy none`
// and `--fusion off`; also every single-node communicator): each ready operation's summary is
// exchanged among the communicator's daemons and compared (op_check.hpp), then operations
// start strictly in sequence order, at most kMaxInterNodePerComm on the network at once. The
// negotiated scheduler is the other policy (engine_schedule.cpp).
#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

#include "engine/collectives.hpp"
#include "engine/engine.hpp"
#include "engine/op_check.hpp"

namespace nodecomm::daemon {

using proto::Status;

namespace {
constexpr size_t kMaxInterNodePerComm = 16;  // operations in the network at once per comm
}  // namespace

size_t Engine::progress_in_sequence(Job& job, Communicator& comm) {
  size_t work = 0;
  size_t in_network = 0;
  // Once one operation cannot start, later ones may still check their summaries but must
  // not overtake it on the network.
  bool held = false;
  auto& ops = comm.ops();
  for (auto it = ops.begin(); it != ops.end();) {
    Operation& op = it->second;
    if (op.phase == Operation::Phase::kGathering) {
      if (!comm.poisoned()) break;  // later operations must not overtake it on the network
      complete(job, comm, op, comm.poison_status(),
               fmt::format("{} seq {} not run: {}", describe_submission(op.first()), op.seq,
                           comm.poison_reason()));
    }
    try {
      if (op.phase == Operation::Phase::kReady && (op.check != 0 || !comm.poisoned())) {
        work += cross_check(job, comm, op);
      }
      if (op.phase == Operation::Phase::kReady) {
        if (comm.poisoned()) {
          if (op.check == 0) {
            complete(job, comm, op, comm.poison_status(),
                     fmt::format("{} seq {} not run: {}", describe_submission(op.first()), op.seq,
                                 comm.poison_reason()));
          }
        } else if (!held && op.cross_checked && in_network < kMaxInterNodePerComm) {
          start(job, comm, op);
          ++work;
        } else {
          held = true;
        }
      }
      if (op.phase == Operation::Phase::kInterNode) {
        if (transport_.test(op.handle)) {
          finish(job, comm, op);
          ++work;
        } else {
          ++in_network;
        }
      }
    } catch (const StagingExhausted& e) {
      fail_no_memory(job, comm, op, e.what());
    } catch (const TransportError& e) {
      fail_between_nodes(job, comm, op, e.what());
    }
    // Nothing overtakes a split or free: the communicators it makes or drops must exist
    // identically on every daemon before anything else runs on them.
    const bool fence = is_comm_management(op) && op.phase != Operation::Phase::kDone;
    if (op.phase == Operation::Phase::kDone) {
      it = ops.erase(it);
    } else {
      ++it;
    }
    if (fence) break;
  }
  return work;
}

size_t Engine::cross_check(Job& job, Communicator& comm, Operation& op) {
  const CommLayout& lay = comm.layout();
  if (op.cross_checked) return 0;
  if (lay.node_count == 1) {
    op.cross_checked = true;
    return 0;
  }
  if (op.check == 0) {
    op.check_records.assign(lay.node_count, OpSummary{});
    op.check_records[lay.node_index] = summarize(op, lay);
    op.check = transport_.start_exchange(lay.node_comm, op.check_records.data(), sizeof(OpSummary));
    op.on_network = in_flight_.acquire();
  }
  bool done = false;
  try {
    done = transport_.test(op.check);
  } catch (const TransportError& e) {
    op.on_network.release();
    op.check = 0;
    comm.poison(Status::kPeerLost, fmt::format("{} seq {} failed between nodes: {}",
                                               describe_submission(op.first()), op.seq, e.what()));
    return 1;
  }
  if (!done) return 0;
  op.on_network.release();
  op.check = 0;
  const std::vector<std::optional<OpSummary>> by_node(op.check_records.begin(),
                                                      op.check_records.end());
  const std::string disagreement = cross_node_disagreement(comm.id(), op.seq, by_node, lay, &op);
  if (disagreement.empty()) {
    op.cross_checked = true;
    // A node that cannot stage it: it fails everywhere alike, and nothing else does.
    if (const std::string refused = cross_node_refusal(comm.id(), op.seq, by_node, lay);
        !refused.empty()) {
      complete(job, comm, op, Status::kNoMemory,
               op.staging_refused.empty() ? refused : op.staging_refused);
    }
  } else {
    comm.poison(Status::kMismatch, disagreement);
  }
  op.check_records.clear();
  return 1;
}

void Engine::abandon_check(Operation& op) {
  if (op.check == 0) return;
  op.on_network.release();  // nothing waits for it any more
  op.check = 0;
  // Moving the vector keeps its heap buffer, the one the transport was given.
  abandoned_checks_.push_back(std::move(op.check_records));
  op.check_records.clear();
}

}  // namespace nodecomm::daemon
