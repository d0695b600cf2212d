// Holding for an urgent operation (issue 18 point 4; docs/ARCHITECTURE.md, "Holding for an
// urgent operation"): which of a communicator's started units the negotiated scheduler leaves
// unpolled this pass, so that what they queued on the links drains ahead of a more urgent
// operation posted here. Only when this daemon advances a unit, never the plan.
#pragma once

#include <cstdint>
#include <vector>

#include "config/tuning.hpp"
#include "engine/job.hpp"

namespace nodecomm::daemon {

// One flag per unit of comm.schedule.units, in order: true to hold it this pass. Empty when
// none is held (nothing more urgent than a unit but the one that goes on, holding off, a
// poisoned communicator, a stream of rising urgencies). Keeps the stream's state in
// comm.schedule (urgent_seen, stream_until_ns); record_holds must follow each call.
std::vector<bool> units_to_hold(Communicator& comm, const SchedulerTuning& tuning, uint64_t now);

}  // namespace nodecomm::daemon
