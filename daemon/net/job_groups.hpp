// Service daemons (one per node, started independently, not by one mpirun) have no common world:
// each multi-node job gets a group of its own daemons, formed when the job needs it. The MPI
// implementation (daemon/mpi/job_groups_mpi.cpp) forms it through Open MPI's rendezvous server
// (ompi-server); docs/ARCHITECTURE.md, "Service daemons and job groups", has the mechanism, its
// threads, failures and limits.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "net/transport.hpp"

namespace nodecomm::daemon {

// Daemons not launched together (the service) form one group per multi-node job on demand.
class JobGroupFormer {
 public:
  virtual ~JobGroupFormer() = default;
  // Starts forming the group named `key` (unique across the cluster while the job runs; the
  // caller builds it from the job's owner uid and name), in which this daemon is node `node`
  // of `nodes` (2 <= nodes). Returns an id for poll/cancel. Never blocks.
  virtual uint64_t start(const std::string& key, uint32_t node, uint32_t nodes) = 0;
  // The job's transport once formed (its kAllNodes is exactly the job's daemons, ranked by
  // node), nullptr while forming. Throws TransportError naming the key and what failed; the id
  // is forgotten once this returned a transport or threw.
  virtual std::unique_ptr<Transport> poll(uint64_t id) = 0;
  // Gives up a formation (the job's attach deadline passed, or its ranks left). Never blocks;
  // the formation's other daemons fail theirs with an error naming this one, unless every
  // daemon had already committed to the group (then they get it, and find this daemon gone
  // through their liveness checks).
  virtual void cancel(uint64_t id) = 0;
  // Looks after the groups this daemon left: what their peers still send in them is received
  // and dropped until they fall quiet, then they are freed (daemon/mpi/comm_retirement.hpp).
  // Called regularly by the daemon's loop. Never blocks.
  virtual RetiredComms tend(uint64_t now_ns) = 0;
};

// An MPI singleton joined to the rendezvous server whose URI is in `uri_file` (ompi-server -r).
// Initialises MPI (once per process), so call it before anything else starts threads that
// read the environment. Throws TransportError, naming the file, if the file is missing or
// unreadable or its server does not answer: MPI_Init would crash then.
std::unique_ptr<JobGroupFormer> make_mpi_job_groups(int* argc, char*** argv, uint32_t lanes,
                                                    const std::string& uri_file);

}  // namespace nodecomm::daemon
