// nodecomm-launch --service: a simulated cluster of persistent service daemons (nodecommd
// --transport service), one per simulated node, plus the rendezvous server (ompi-server) that
// their multi-node jobs form groups through. Unlike a launch's daemons they outlive the
// launcher: `up` starts them detached and records them in a state directory, `down` stops
// them and removes everything, and `nodecomm-launch --attach` starts a job's ranks against them.
#pragma once

#include "options.hpp"
#include "service_state.hpp"

namespace nodecomm::launch {

// --service up|down|status|restart-node K. Returns the launcher's exit status.
int run_service(const Options& opts);

}  // namespace nodecomm::launch
