// One job this daemon serves, with everything that is that job's alone: its engine (operation
// tables, sequence spaces, notices, stall checks), its staging pool, the group of daemons it
// runs over and its attach deadline. Jobs share the daemon's loop, sockets, configuration and
// the staging cap (StagingLedger), nothing else: a failure in one is confined to it.
#pragma once

#include <cstdint>
#include <memory>

#include "config/config.hpp"
#include "engine/engine.hpp"
#include "engine/job.hpp"
#include "engine/staging.hpp"
#include "net/transport.hpp"

namespace nodecomm::daemon {

class EngineObserver;

class ServedJob {
 public:
  // `group`: the daemons the job runs over. `owned`: that transport, when it is the job's own
  // (a one-node job's loopback), destroyed with the job; null when it is the daemon's.
  ServedJob(std::unique_ptr<Job> job, Transport& group, std::unique_ptr<Transport> owned,
            const DaemonConfig& config, StagingLedger& ledger, EngineObserver* observer);
  // The job's own group of daemons, formed on demand (net/job_groups.hpp), replaces the one it
  // was made with. Only before the job forms: the engine is made anew over it.
  void adopt_group(std::unique_ptr<Transport> group, const DaemonConfig& config);
  ServedJob(const ServedJob&) = delete;
  ServedJob& operator=(const ServedJob&) = delete;

  Job& job() { return *job_; }
  const Job& job() const { return *job_; }
  Engine& engine() { return *engine_; }
  const Engine& engine() const { return *engine_; }
  Transport& transport() { return *transport_; }
  // The daemon's settings changed at run time (nodecommctl set): the job's engine takes them.
  void configure(const DaemonConfig& config);

  // When the attach deadline started counting (0: not yet); it counts again while the job's
  // group forms.
  uint64_t attach_since_ns = 0;
  // The formation of the job's group under way (JobGroupFormer::start), 0: none.
  uint64_t group_formation = 0;
  // Its share of the link against other jobs' (config/job_weights.hpp), set when it forms.
  uint32_t weight = 1;
  // The largest window of its multi-node communicators and the bytes they have on the
  // network now (Daemon::share_links).
  size_t nominal_window() const;
  size_t bytes_on_network() const;
  // The bytes its multi-node communicators have completed, cumulative.
  uint64_t bytes_completed() const;

 private:
  std::unique_ptr<Transport> owned_;
  Transport* transport_;
  StagingPool staging_;
  EngineObserver* observer_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Job> job_;
};

}  // namespace nodecomm::daemon
