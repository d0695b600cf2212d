// comm_split: a collective over the parent communicator that creates the children.
//
// Each node contributes a record (color, key, parent rank) per member; the daemons exchange
// them over the parent's daemons (allgatherv), and every daemon then derives the same
// groups: per color, ranks ordered by (key, parent rank), as MPI_Comm_split does. A daemon
// that hosts members of a color joins that color's group of daemons: for each color in
// ascending order every daemon of the parent calls split_group, so the blocking creations
// always match up.
#pragma once

#include "engine/collectives.hpp"

namespace nodecomm::daemon {

void split_stage_in(CollectiveContext& ctx, Operation& op);
TransportHandle split_start_network(CollectiveContext& ctx, Operation& op);
// With every record in op.staging: starts creating the daemons' groups, one per color.
TransportHandle split_start_groups(CollectiveContext& ctx, Operation& op);
// Once those exist: creates the new communicators in ctx.job and fills op.split_results.
void split_finish(CollectiveContext& ctx, Operation& op, TransportHandle groups);

}  // namespace nodecomm::daemon
