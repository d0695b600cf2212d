// Built only by the test daemon_layering_enforced, which expects it NOT to compile: a file of
// the engine library including the conductor, a layer above it (daemon/CMakeLists.txt).
#include "conductor/daemon.hpp"
#include "engine/engine.hpp"
