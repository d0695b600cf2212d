#include "conductor/served_job.hpp"

#include <algorithm>
#include <utility>

namespace nodecomm::daemon {

ServedJob::ServedJob(std::unique_ptr<Job> job, Transport& group, std::unique_ptr<Transport> owned,
                     const DaemonConfig& config, StagingLedger& ledger, EngineObserver* observer)
    : owned_(std::move(owned)),
      transport_(&group),
      staging_(-1, config.staging_cache_bytes,
               {config.max_staging_bytes, config.max_staging_per_job_bytes}, &ledger),
      observer_(observer),
      engine_(std::make_unique<Engine>(*transport_, staging_)),
      job_(std::move(job)) {
  configure(config);
  engine_->set_algorithm_in_effect(config.tuning);
  engine_->set_observer(observer_);
}

void ServedJob::adopt_group(std::unique_ptr<Transport> group, const DaemonConfig& config) {
  engine_.reset();  // it refers to the old group
  owned_ = std::move(group);
  transport_ = owned_.get();
  engine_ = std::make_unique<Engine>(*transport_, staging_);
  configure(config);
  engine_->set_algorithm_in_effect(config.tuning);
  engine_->set_observer(observer_);
}

size_t ServedJob::nominal_window() const {
  const SchedulerTuning tuning = with_job_overrides(engine_->scheduler_tuning(), job_->requested);
  size_t window = 0;
  for (const auto& [id, comm] : job_->comms) {
    const size_t nodes = comm->layout().node_count;
    if (nodes > 1) window = std::max(window, comm->schedule.window(tuning, nodes));
  }
  return window;
}

size_t ServedJob::bytes_on_network() const {
  size_t bytes = 0;
  for (const auto& [id, comm] : job_->comms) bytes += comm->schedule.bytes_in_flight.value();
  return bytes;
}

uint64_t ServedJob::bytes_completed() const {
  uint64_t bytes = 0;
  for (const auto& [id, comm] : job_->comms) bytes += comm->schedule.completed_bytes;
  return bytes;
}

void ServedJob::configure(const DaemonConfig& config) {
  engine_->set_scheduler_tuning(config.sched);
  engine_->set_limits(config.limits);
  engine_->set_algorithm_tuning(config.tuning);
}

}  // namespace nodecomm::daemon
