// The rendezvous through which the service's daemons find each other (part of the job
// formations): Open MPI's name server (ompi-server -r URIFILE), which every daemon, an MPI
// singleton, joins at MPI_Init, and the names the formations keep in it.
//
// Names: node 0 of a formation publishes, under generation g of the job's key,
//   nodecomm:<key>#<g>              "nodes=<N>": generation g is taken (published last)
//   nodecomm:<key>#<g>:<n>          the port on which node 0 accepts node n (one per joiner:
//                                   Open MPI 4.1 mixes up concurrent connects to one port)
//   nodecomm:<key>#<g>:<n>/pong<a>  its answer to node n's ping a: node 0 is alive
//   nodecomm:<key>#<g>:<n>/go<a>    node 0 holds its creation lock and will accept node n
// and node n publishes
//   nodecomm:<key>#<g>:<n>/ping<a>  "nodes=<N>", every half exchange timeout until taken in
//   nodecomm:<key>#<g>:<n>/ack<a>   it holds its creation lock too, and connects now
//   nodecomm:<key>#<g>:<n>/busy<a>  its lock is taken (by another formation): not now
// Each daemon unpublishes its own names once the rendezvous ends. Names of a daemon that died
// stay in the server for its lifetime (it purges nothing for a killed singleton, and only
// their publisher may remove them), so nothing is ever published twice under one name, which a
// lookup would answer with either: a later formation with the same key takes the next free
// generation, a joiner's next ping the next free number. A joiner connects only to a node 0
// that answered its latest pings: Open MPI "connects" to a dead process's port if its owner
// was accepting when it died, and then blocks for good, holding a lock that every later
// connect and accept of the process needs.
#pragma once

#include <cstdint>
#include <string>

namespace nodecomm::daemon {

// Before MPI_Init: checks that `uri_file` holds an ompi-server URI whose server answers (a
// singleton's MPI_Init crashes inside its orted otherwise), and points this process's MPI at it
// (OMPI_MCA_pmix_server_uri) with a bound on connect/accept exchanges (below). Throws
// TransportError naming the file and what to start.
void join_rendezvous(const std::string& uri_file);

// How long one connect or accept waits for its other side, in seconds: Open MPI's
// pmix_base_exchange_timeout, which join_rendezvous sets to 5 unless the environment already
// does. Every formation step that waits on another daemon is bounded by it, so that a dead or
// stale node 0 costs a joiner this long instead of forever.
int exchange_timeout_s();

// "nodecomm:" and `key` with every byte outside [A-Za-z0-9._-] as %XX (so no key can reach into
// another's names), shortened with a hash past 200 bytes (a PMIx key holds 511).
std::string rendezvous_base(const std::string& key);
std::string generation_name(const std::string& base, uint32_t generation);
std::string joiner_name(const std::string& base, uint32_t generation, uint32_t node);
std::string ping_name(const std::string& base, uint32_t generation, uint32_t node,
                      uint32_t attempt);
std::string answer_name(const std::string& base, uint32_t generation, uint32_t node,
                        uint32_t attempt);
std::string go_name(const std::string& base, uint32_t generation, uint32_t node, uint32_t ping);
std::string ack_name(const std::string& base, uint32_t generation, uint32_t node, uint32_t ping,
                     bool ready);
// The id that node 0 and node `node` stamp on the messages of the link made after `ping`
// (formation_link.hpp).
uint64_t link_id(const std::string& base, uint32_t generation, uint32_t node, uint32_t ping);

// MPI_Lookup_name: false when nothing is published under `name`. Throws TransportError for any
// other failure (the server is gone), naming `node` and the key's base name.
bool lookup_name(const std::string& name, std::string& value, uint32_t node);
// MPI_Publish_name; throws TransportError naming the name and `node`.
void publish_name(const std::string& name, const std::string& value, uint32_t node);
// MPI_Unpublish_name; false on failure, which cleanup paths can only ignore.
bool unpublish_name(const std::string& name, const std::string& value);

}  // namespace nodecomm::daemon
