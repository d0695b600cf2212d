// Daemons not launched together (the service) form one group per multi-node job on demand.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "net/transport.hpp"

namespace nodecomm::daemon {

class JobGroupFormer {
 public:
  virtual ~JobGroupFormer() = default;
  // Starts forming the group named `key` (unique across the cluster while the job runs; the
  // caller builds it from the job's owner uid and name), in which this daemon is node `node`
  // of `nodes` (2 <= nodes). Returns an id for poll/cancel. Never blocks.
  virtual uint64_t start(const std::string& key, uint32_t node, uint32_t nodes) = 0;
  // The job's transport once formed (its kAllNodes is exactly the job's daemons, ranked by
  // node), nullptr while forming. Throws TransportError naming the key and what failed.
  virtual std::unique_ptr<Transport> poll(uint64_t id) = 0;
  // Gives up a formation (the job's attach deadline passed, or its ranks left).
  virtual void cancel(uint64_t id) = 0;
};

// An MPI singleton joined to the rendezvous server whose URI is in `uri_file` (ompi-server -r).
std::unique_ptr<JobGroupFormer> make_mpi_job_groups(int* argc, char*** argv, uint32_t lanes,
                                                    const std::string& uri_file);

}  // namespace nodecomm::daemon
