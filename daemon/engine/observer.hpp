// What the engine reports as it works, to whoever watches: the counters segment
// (observe/counters.hpp) implements it, tests may count with their own. The engine calls it
// and never knows who listens, so observation sits above the engine, not inside it.
#pragma once

#include <cstdint>

#include "nodecomm/proto/types.hpp"

namespace nodecomm::daemon {

class Communicator;
class Job;
struct Operation;
struct ScheduledUnit;

class EngineObserver {
 public:
  virtual ~EngineObserver() = default;
  // An operation completed (with `status`) for every member of `comm` on this node.
  virtual void op_completed(const Job& job, Communicator& comm, const Operation& op,
                            proto::Status status, uint64_t now_ns) = 0;
  // A scheduled transfer of `job` went on the network, and finished.
  virtual void unit_started(const Job& job, const Communicator& comm, const ScheduledUnit& unit,
                            uint64_t now_ns) = 0;
  virtual void unit_finished(const Job& job, Communicator& comm, const ScheduledUnit& unit,
                             uint64_t now_ns) = 0;
  // A scheduling round began.
  virtual void round_started() = 0;
  // A small allreduce completed inside a round, every node's part carried in the records.
  virtual void eager_completed() = 0;
  // An operation waited past the stall limit and was reported in the log.
  virtual void stall_reported() = 0;
};

}  // namespace nodecomm::daemon
