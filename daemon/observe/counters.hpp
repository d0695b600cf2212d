// The daemon's side of the counters segment (proto/counters.hpp): creates
// /dev/shm/nodecomm.<instance>.counters, counts what the engines do through one-line hooks
// (one publisher watches every job's engine; each hook names its job), and rewrites the
// snapshot sections (jobs, clients, operations in flight) from the housekeeping pass.
// Everything runs on the daemon's single thread; the segment has one writer. If the segment cannot
// be created the daemon serves on without it (a warning says why) and every hook is a no-op.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "algorithms/algorithm_tally.hpp"
#include "config/config.hpp"
#include "engine/observer.hpp"
#include "nodecomm/proto/counters.hpp"
#include "nodecomm/proto/types.hpp"
#include "observe/trace.hpp"

namespace nodecomm::daemon {

class ClientSession;
class Communicator;
class Job;
class Transport;
struct RetiredComms;
struct Operation;
struct ScheduledUnit;

class CountersPublisher final : public EngineObserver {
 public:
  using ClientMap = std::map<uint32_t, std::unique_ptr<ClientSession>>;

  // Creates the segment and publishes it (layout version last). Logs a warning and stays
  // inactive on failure.
  void open(const DaemonConfig& config, const Transport& transport, const std::string& runtime_dir,
            const std::string& socket_path);
  // The algorithm tuning in effect (Engine::algorithm_in_effect), shown beside the configured
  // one; without it the configured one is shown.
  void watch_algorithm(const AlgorithmTuning* in_effect) { in_effect_ = in_effect; }
  bool active() const { return seg_ != nullptr; }
  const std::string& shm_name() const { return shm_.name(); }

  // Engine hooks.
  void op_completed(const Job& job, Communicator& comm, const Operation& op, proto::Status status,
                    uint64_t now_ns) override;
  void unit_started(const Job& job, const Communicator& comm, const ScheduledUnit& unit,
                    uint64_t now_ns) override;
  void unit_finished(const Job& job, Communicator& comm, const ScheduledUnit& unit,
                     uint64_t now_ns) override;
  void round_started() override;
  void eager_completed() override;
  void stall_reported() override;
  // Daemon hooks.
  void client_accepted();
  // The groups this daemon left (Transport::tend, JobGroupFormer::tend).
  void retired_comms(const RetiredComms& retired);
  void admin_request(bool refused);
  // The settings table: after start and after every accepted `set` (`changed`).
  void publish_params(const DaemonConfig& config, bool changed);
  // Liveness on every call; the snapshot sections and busbw at most every 100 ms. `jobs`:
  // every job the daemon serves, in any order.
  void housekeeping(uint64_t now_ns, uint64_t last_progress_ns, std::span<const Job* const> jobs,
                    const ClientMap& clients, uint32_t stall_sec);

  TraceRecorder& trace() { return trace_; }

 private:
  // An operation in flight, and its job's place in `listed_`.
  struct LiveOp {
    size_t job;
    Communicator* comm;
    const Operation* op;
  };
  // What the publisher keeps of a job between snapshots, by serial.
  struct JobTally {
    uint64_t ops_completed = 0;
    uint64_t ops_failed = 0;
    uint64_t bytes_completed = 0;
    uint64_t started_realtime_ns = 0;
    bool formed = false;  // counted in Totals::jobs_formed
  };

  void snapshot(uint64_t now_ns, std::span<const Job* const> jobs, const ClientMap& clients,
                uint32_t stall_sec);
  void count_formed(const Job& job, JobTally& tally);
  void publish_jobs(const std::vector<size_t>& in_flight);
  void publish_clients(uint64_t now_ns, const ClientMap& clients);
  void publish_ops(uint64_t now_ns, std::vector<LiveOp>& live, uint32_t stall_sec);
  // The slot of `job` in the jobs section + 1; 0 when it is not listed (or null).
  uint32_t job_slot(const Job* job) const;
  void update_busbw(uint64_t now_ns);

  ipc::NamedShm shm_;
  proto::CountersSegment* seg_ = nullptr;
  TraceRecorder trace_;
  std::string instance_;
  uint64_t last_snapshot_ns_ = 0;
  DaemonConfig config_;     // as last published
  AlgorithmTuning agreed_;  // the tuning in effect as last published
  const AlgorithmTuning* in_effect_ = nullptr;
  uint64_t generation_ = 0;
  uint64_t snapshot_ = 0;  // JobsSection::snapshot
  std::map<uint64_t, JobTally> tallies_;
  // The jobs of the last snapshot, oldest first: slot i of the jobs section is listed_[i].
  std::vector<const Job*> listed_;
  // Completions per client id, and when each client was first seen.
  std::map<uint32_t, uint64_t> completed_by_client_;
  std::map<uint32_t, uint64_t> connected_ns_;
  struct ClientActivity {
    uint64_t position = 0;
    uint64_t seen_ns = 0;
  };
  std::map<uint32_t, ClientActivity> activity_;
  // busbw: bus bytes (bytes x 2(n-1)/n) of allreduces completed since the interval began.
  double interval_bus_bytes_ = 0;
  uint64_t interval_start_ns_ = 0;
  double busbw_ewma_ = 0;
  // Private copies of the seqlocked sections, rewritten then copied out whole.
  std::unique_ptr<proto::JobsSection> jobs_scratch_;
  std::unique_ptr<proto::ClientsSection> clients_scratch_;
  std::unique_ptr<proto::OpsSection> ops_scratch_;
  std::unique_ptr<proto::ParamsSection> params_scratch_;
};

}  // namespace nodecomm::daemon
