#include "observe/counters.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <utility>

#include "config/log.hpp"
#include "engine/job.hpp"
#include "engine/schedule.hpp"
#include "net/transport.hpp"
#include "nodecomm/ipc/byte_size.hpp"
#include "nodecomm/ipc/clock.hpp"
#include "nodecomm/ipc/fixed_text.hpp"
#include "nodecomm/ipc/named_shm.hpp"
#include "nodecomm/ipc/runtime_paths.hpp"
#include "session/client_session.hpp"

#ifndef NODECOMM_VERSION_TEXT
#define NODECOMM_VERSION_TEXT "0.1.0"
#endif

namespace nodecomm::daemon {

using proto::counter_add;
using proto::counter_store;

namespace {

proto::CountersClientState counters_state(ClientSession::State state) {
  using S = ClientSession::State;
  using C = proto::CountersClientState;
  switch (state) {
    case S::kHello:
      return C::kHello;
    case S::kBacking:
      return C::kBacking;
    case S::kMapping:
      return C::kMapping;
    case S::kJoined:
      return C::kJoined;
    case S::kClosed:
      return C::kClosed;
  }
  return C::kClosed;
}

constexpr uint64_t kSnapshotNs = 100'000'000;  // jobs, clients and operations tables
constexpr uint64_t kBusbwNs = 1'000'000'000;   // busbw interval

const char* log_level_name(LogLevel level) {
  static constexpr const char* kNames[] = {"error", "warn", "info", "debug"};
  return kNames[static_cast<int>(level)];
}

uint64_t op_bytes(const proto::OpDescriptor& d) {
  const auto dtype = static_cast<proto::DType>(d.dtype);
  return d.dtype < static_cast<uint8_t>(proto::DType::kCount) ? d.count * proto::dtype_size(dtype)
                                                              : 0;
}

template <size_t N>
void copy_name(char (&dst)[N], const char (&name)[proto::kTensorNameBytes]) {
  ipc::copy_text(dst, ipc::bounded_text(name));
}
}  // namespace

namespace {
// The pid recorded in an existing counters segment `name` if that process still runs, else 0.
pid_t live_owner(const std::string& name) {
  ipc::NamedShm existing;
  if (!existing.open_readonly(name).empty()) return 0;
  proto::CountersHeader header{};
  proto::DaemonInfo info{};
  const bool read = existing.size() >= offsetof(proto::CountersSegment, daemon) + sizeof(info);
  if (read) {
    std::memcpy(&header, existing.data(), sizeof(header));
    std::memcpy(
        &info,
        static_cast<const uint8_t*>(existing.data()) + offsetof(proto::CountersSegment, daemon),
        sizeof(info));
  }
  if (!read || header.magic != proto::kCountersMagic) return 0;
  const auto pid = static_cast<pid_t>(info.pid);
  return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM) ? pid : 0;
}
}  // namespace

void CountersPublisher::open(const DaemonConfig& config, const Transport& transport,
                             const std::string& runtime_dir, const std::string& socket_path) {
  instance_ = config.instance;
  const std::string name = ipc::counters_shm_name(config.instance);
  // The instance lock covers one runtime directory; a daemon of the same instance name under
  // another runtime base (another user's) may own this name. Never take it from a live one.
  if (const pid_t owner = live_owner(name); owner > 0 && owner != ::getpid()) {
    NC_LOG(kWarn,
           "no counters segment (nodecommctl will not see this daemon): /dev/shm{} belongs to "
           "running pid {}, a daemon of the same instance name under another runtime directory",
           name, owner);
    return;
  }
  if (const std::string error =
          shm_.create(name, sizeof(proto::CountersSegment), reader_group_id(config.admin_group));
      !error.empty()) {
    NC_LOG(kWarn, "no counters segment (nodecommctl will not see this daemon): {}", error);
    return;
  }
  jobs_scratch_ = std::make_unique<proto::JobsSection>();
  clients_scratch_ = std::make_unique<proto::ClientsSection>();
  ops_scratch_ = std::make_unique<proto::OpsSection>();
  params_scratch_ = std::make_unique<proto::ParamsSection>();
  auto* seg = static_cast<proto::CountersSegment*>(shm_.data());  // zero-filled by ftruncate
  proto::CountersHeader& h = seg->header;
  h.magic = proto::kCountersMagic;
  h.header_bytes = sizeof(proto::CountersHeader);
  h.segment_bytes = sizeof(proto::CountersSegment);
  h.collectives = proto::kCounterCollectives;
  h.latency_buckets = proto::kLatencyBuckets;
  h.client_slots = proto::kCounterClients;
  h.op_slots = proto::kCounterOps;
  h.param_slots = proto::kCounterParams;
  h.job_slots = proto::kCounterJobs;
  proto::DaemonInfo& d = seg->daemon;
  d.pid = static_cast<uint64_t>(::getpid());
  d.uid = ::geteuid();
  d.start_realtime_ns = realtime_ns();
  d.start_monotonic_ns = ipc::monotonic_ns();
  d.node_index = transport.node_index();
  d.node_count = transport.node_count();
  d.lanes = transport.lanes();
  ipc::copy_text(d.instance, config.instance);
  ipc::copy_text(d.transport, transport.name());
  ipc::copy_text(d.version, NODECOMM_VERSION_TEXT);
  ipc::copy_text(d.runtime_dir, runtime_dir);
  ipc::copy_text(d.socket_path, socket_path);
  seg_ = seg;
  publish_params(config, false);
  // release: everything above is visible to a reader that sees the version (acquire).
  std::atomic_ref<uint32_t>(h.layout_version)
      .store(proto::kCountersLayoutVersion, std::memory_order_release);
  NC_LOG(kDebug, "counters: /dev/shm{} ({} bytes)", name, sizeof(proto::CountersSegment));
}

void CountersPublisher::op_completed(const Job& job, Communicator& comm, const Operation& op,
                                     proto::Status status, uint64_t now_ns) {
  if (!active()) return;
  const proto::OpDescriptor& d = op.first();
  const uint32_t c = std::min<uint32_t>(d.collective, proto::kCounterCollectives - 1);
  const uint64_t bytes = op_bytes(d);
  const uint64_t latency =
      op.first_arrival_ns != 0 && now_ns > op.first_arrival_ns ? now_ns - op.first_arrival_ns : 0;
  proto::CollectiveCounters& cc = seg_->collectives[c];
  proto::Totals& t = seg_->totals;
  JobTally& tally = tallies_[job.serial];
  count_formed(job, tally);
  ++tally.ops_completed;
  counter_add(cc.ops, 1);
  counter_add(t.ops_completed, 1);
  if (status == proto::Status::kOk) {
    tally.bytes_completed += bytes;
    counter_add(cc.bytes, bytes);
    counter_add(t.bytes_completed, bytes);
    const uint32_t n = comm.layout().size;
    if (d.collective == static_cast<uint16_t>(proto::Collective::kAllreduce) && n > 1) {
      interval_bus_bytes_ += static_cast<double>(bytes) * 2.0 * (n - 1) / n;
    }
  } else {
    ++tally.ops_failed;
    counter_add(cc.errors, 1);
    counter_add(t.ops_failed, 1);
    if (status == proto::Status::kTimeout) counter_add(t.op_timeouts, 1);
  }
  counter_add(cc.latency_sum_ns, latency);
  counter_add(cc.latency_buckets[proto::latency_bucket(latency)], 1);
  const CommLayout& lay = comm.layout();
  for (size_t k = 0; k < op.slots.size() && k < lay.members.size(); ++k) {
    const ClientSession* member = job.members[lay.members[k]];
    if (op.slots[k] && member != nullptr) ++completed_by_client_[member->id()];
  }
  if (trace_.recording()) {
    proto::TraceEvent e{};
    e.begin_ns = op.first_arrival_ns;
    e.end_ns = now_ns;
    e.seq = op.seq;
    e.bytes = bytes;
    e.comm = comm.id();
    e.collective = d.collective;
    e.kind = static_cast<uint8_t>(proto::TraceKind::kOperation);
    e.status = static_cast<uint8_t>(static_cast<int32_t>(status));
    e.ops = 1;
    copy_name(e.name, d.name);
    trace_.record(e, job.serial, job.name);
  }
}

void CountersPublisher::unit_started(const Job& job, const Communicator& comm,
                                     const ScheduledUnit& unit, uint64_t now_ns) {
  (void)comm;
  if (!active()) return;
  proto::Totals& t = seg_->totals;
  counter_add(t.sched_units, 1);
  counter_add(t.sched_unit_bytes, unit.bytes);
  if (unit.kind == ScheduledUnit::Kind::kChunk) counter_add(t.sched_chunks, 1);
  if (unit.kind == ScheduledUnit::Kind::kFused) counter_add(t.sched_fused, 1);
  trace_.unit_started(job.serial, unit.handle, now_ns);
}

void CountersPublisher::unit_finished(const Job& job, Communicator& comm, const ScheduledUnit& unit,
                                      uint64_t now_ns) {
  if (!active() || !trace_.recording()) return;
  const uint64_t begin = trace_.take_unit_begin(job.serial, unit.handle);
  if (begin == 0 || unit.seqs.empty()) return;
  proto::TraceEvent e{};
  e.begin_ns = begin;
  e.end_ns = now_ns;
  e.seq = unit.seqs[0];
  e.bytes = unit.bytes;
  e.first = unit.first;
  e.comm = comm.id();
  e.ops = static_cast<uint32_t>(unit.seqs.size());
  switch (unit.kind) {
    case ScheduledUnit::Kind::kChunk:
      e.kind = static_cast<uint8_t>(proto::TraceKind::kChunk);
      break;
    case ScheduledUnit::Kind::kFused:
      e.kind = static_cast<uint8_t>(proto::TraceKind::kFused);
      break;
    default:
      e.kind = static_cast<uint8_t>(proto::TraceKind::kWhole);
      break;
  }
  if (const auto it = comm.ops().find(unit.seqs[0]); it != comm.ops().end()) {
    e.collective = it->second.first().collective;
    copy_name(e.name, it->second.first().name);
  }
  trace_.record(e, job.serial, job.name);
}

void CountersPublisher::round_started() {
  if (active()) counter_add(seg_->totals.sched_rounds, 1);
}

void CountersPublisher::eager_completed() {
  if (active()) counter_add(seg_->totals.sched_eager, 1);
}

void CountersPublisher::stall_reported() {
  if (active()) counter_add(seg_->totals.stalls_reported, 1);
}

void CountersPublisher::retired_comms(const RetiredComms& retired) {
  if (!active()) return;
  counter_store(seg_->totals.comms_retired, retired.retired);
  counter_store(seg_->totals.late_messages_dropped, retired.late_dropped);
}

void CountersPublisher::client_accepted() {
  if (active()) counter_add(seg_->totals.clients_accepted, 1);
}

void CountersPublisher::admin_request(bool refused) {
  if (!active()) return;
  counter_add(seg_->totals.admin_requests, 1);
  if (refused) counter_add(seg_->totals.admin_refused, 1);
}

void CountersPublisher::publish_params(const DaemonConfig& config, bool changed) {
  config_ = config;
  if (!active()) return;
  const AlgorithmTuning& agreed = in_effect_ != nullptr ? *in_effect_ : config.tuning;
  agreed_ = agreed;
  proto::ParamsSection& p = *params_scratch_;
  p = proto::ParamsSection{};
  const auto add = [&](const char* key, const std::string& value, int64_t number) {
    if (p.count >= proto::kCounterParams) return;
    proto::ParamEntry& e = p.entries[p.count++];
    ipc::copy_text(e.key, key);
    ipc::copy_text(e.value, value);
    e.number = number;
  };
  const auto bytes = [&](const char* key, uint64_t value) {
    add(key, ipc::format_byte_size(value), static_cast<int64_t>(value));
  };
  const auto num = [&](const char* key, uint64_t value) {
    add(key, std::to_string(value), static_cast<int64_t>(value));
  };
  const auto text = [&](const char* key, const std::string& value) { add(key, value, -1); };
  const SchedulerTuning& s = config.sched;
  const AlgorithmTuning& a = config.tuning;
  // Settable at run time (nodecommctl set), in the order of --print-config.
  text("log-level", log_level_name(config.log_level));
  text("allreduce-algorithm", algorithm_name(a.allreduce));
  text("collective-algorithm", collective_algorithm_name(a.collectives));
  const auto small = [&](const char* key, size_t value) {
    if (value == kAutoSmallBytes) {
      text(key, "auto");
    } else {
      bytes(key, value);
    }
  };
  small("small-bytes", a.small_bytes);
  bytes("latency-bytes", a.latency_bytes);
  bytes("chunk-size", a.chunk_bytes);
  num("pipeline-depth", a.pipeline_depth);
  num("endpoints", a.endpoints);
  text("idle", config.idle);
  num("net-park-min-us", config.net_park_min_us);
  num("net-park-max-us", config.net_park_max_us);
  num("stall-sec", config.limits.stall_sec);
  num("op-timeout-sec", config.limits.op_timeout_sec);
  text("priority-policy", std::string(proto::priority_policy_name(s.policy)));
  text("fusion", s.fusion ? "on" : "off");
  bytes("fusion-threshold", s.fusion_threshold_bytes);
  num("fusion-cycle-us", s.fusion_cycle_us);
  if (s.chunk_bytes == 0)
    text("sched-chunk-size", "auto");
  else
    bytes("sched-chunk-size", s.chunk_bytes);
  if (s.window_bytes == 0)
    text("sched-window", "auto");
  else
    bytes("sched-window", s.window_bytes);
  num("sched-target-us", s.target_delay_us);
  num("sched-hold-us", s.hold_us);
  num("sched-hold-max-nodes", s.hold_max_nodes);
  num("sched-hold-stream-us", s.hold_stream_us);
  num("sched-urgent-target-us", s.urgent_target_us);
  num("sched-eager-bytes", s.eager_bytes);
  num("sched-gather-nodes", s.gather_nodes);
  // What the transport runs with now. In a multi-node job node 0's values, agreed at every
  // scheduling round (admin.cpp), so they may differ from this daemon's own setting.
  text("agreed-allreduce-algorithm", algorithm_name(agreed.allreduce));
  text("agreed-collective-algorithm", collective_algorithm_name(agreed.collectives));
  small("agreed-small-bytes", agreed.small_bytes);
  bytes("agreed-latency-bytes", agreed.latency_bytes);
  bytes("agreed-chunk-size", agreed.chunk_bytes);
  num("agreed-endpoints", agreed.endpoints);
  // Fixed at start (a restart changes them).
  text("instance", config.instance);
  text("transport", config.transport);
  num("lanes", config.lanes);
  text("cores", config.cores);
  num("max-clients", config.max_clients);
  num("ring-capacity", config.ring_capacity);
  bytes("default-arena", config.default_arena_bytes);
  bytes("max-arena", config.max_arena_bytes);
  bytes("staging-cache", config.staging_cache_bytes);
  text("log-format", config.log_format);
  text("admin-group", config.admin_group);
  if (changed) ++generation_;
  p.generation = generation_;
  proto::seqlock_write(seg_->params, p);
  if (changed) counter_add(seg_->totals.settings_changed, 1);
}

void CountersPublisher::housekeeping(uint64_t now_ns, uint64_t last_progress_ns,
                                     std::span<const Job* const> jobs, const ClientMap& clients,
                                     uint32_t stall_sec) {
  if (!active()) return;
  proto::Liveness& l = seg_->liveness;
  const uint64_t real = realtime_ns();
  counter_add(l.heartbeat, 1);
  counter_store(l.heartbeat_monotonic_ns, now_ns);
  counter_store(l.heartbeat_realtime_ns, real);
  if (last_progress_ns != 0) {
    counter_store(l.last_progress_monotonic_ns, last_progress_ns);
    counter_store(l.last_progress_realtime_ns, real - std::min(real, now_ns - last_progress_ns));
  }
  if (now_ns - last_snapshot_ns_ < kSnapshotNs) return;
  last_snapshot_ns_ = now_ns;
  const AlgorithmTuning& t = in_effect_ != nullptr ? *in_effect_ : config_.tuning;
  if (t.chunk_bytes != agreed_.chunk_bytes || t.small_bytes != agreed_.small_bytes ||
      t.latency_bytes != agreed_.latency_bytes || t.allreduce != agreed_.allreduce ||
      t.endpoints != agreed_.endpoints) {
    publish_params(config_, false);  // a scheduling round adopted node 0's values
  }
  snapshot(now_ns, jobs, clients, stall_sec);
}

void CountersPublisher::count_formed(const Job& job, JobTally& tally) {
  if (tally.formed || job.state != Job::State::kRunning) return;
  tally.formed = true;
  counter_add(seg_->totals.jobs_formed, 1);
}

void CountersPublisher::snapshot(uint64_t now_ns, std::span<const Job* const> jobs,
                                 const ClientMap& clients, uint32_t stall_sec) {
  proto::Totals& t = seg_->totals;
  AlgorithmTally& tally = algorithm_tally();
  // relaxed: independent statistics (AlgorithmTally).
  counter_store(t.ring_allreduces, tally.ring_allreduces.load(std::memory_order_relaxed));
  counter_store(t.ring_slices, tally.ring_slices.load(std::memory_order_relaxed));
  counter_store(t.rd_allreduces, tally.rd_allreduces.load(std::memory_order_relaxed));
  counter_store(t.trace_events, trace_.count());
  counter_store(t.tracing, trace_.recording() ? 1 : 0);
  // The oldest job first; a job's tally goes with it.
  listed_.assign(jobs.begin(), jobs.end());
  std::erase(listed_, nullptr);
  std::sort(listed_.begin(), listed_.end(),
            [](const Job* a, const Job* b) { return a->serial < b->serial; });
  const uint64_t real = realtime_ns();
  std::map<uint64_t, JobTally> kept;
  for (const Job* job : listed_) {
    JobTally& entry = kept[job->serial];
    if (const auto it = tallies_.find(job->serial); it != tallies_.end()) entry = it->second;
    if (entry.started_realtime_ns == 0) entry.started_realtime_ns = real;
    count_formed(*job, entry);
  }
  tallies_ = std::move(kept);
  uint64_t units = 0;
  uint64_t unit_bytes = 0;
  std::vector<LiveOp> live;
  std::vector<size_t> in_flight(listed_.size(), 0);
  for (size_t j = 0; j < listed_.size(); ++j) {
    for (const auto& [id, comm] : listed_[j]->comms) {
      units += comm->schedule.units.size();
      unit_bytes += comm->schedule.bytes_in_flight.value();
      for (const auto& [seq, op] : comm->ops()) {
        if (op.phase != Operation::Phase::kDone && !op.slots.empty()) {
          live.push_back({j, comm.get(), &op});
          ++in_flight[j];
        }
      }
    }
  }
  counter_store(t.units_in_flight, units);
  counter_store(t.bytes_in_flight, unit_bytes);
  update_busbw(now_ns);
  ++snapshot_;
  if (listed_.size() > proto::kCounterJobs) {
    // Only the listed jobs have slots; the others' clients and operations say job 0.
    listed_.resize(proto::kCounterJobs);
  }
  publish_jobs(in_flight);
  publish_clients(now_ns, clients);
  publish_ops(now_ns, live, stall_sec);
  counter_store(seg_->liveness.snapshot_monotonic_ns, now_ns);
}

uint32_t CountersPublisher::job_slot(const Job* job) const {
  if (job == nullptr) return 0;
  const auto it = std::find(listed_.begin(), listed_.end(), job);
  return it == listed_.end() ? 0 : static_cast<uint32_t>(it - listed_.begin()) + 1;
}

void CountersPublisher::update_busbw(uint64_t now_ns) {
  if (interval_start_ns_ == 0) {
    interval_start_ns_ = now_ns;
    return;
  }
  const uint64_t elapsed = now_ns - interval_start_ns_;
  if (elapsed < kBusbwNs) return;
  const double bps = interval_bus_bytes_ * 1e9 / static_cast<double>(elapsed);
  busbw_ewma_ = busbw_ewma_ == 0 ? bps : 0.75 * busbw_ewma_ + 0.25 * bps;
  counter_store(seg_->totals.busbw_last_bps, static_cast<uint64_t>(bps));
  counter_store(seg_->totals.busbw_ewma_bps, static_cast<uint64_t>(busbw_ewma_));
  counter_store(seg_->totals.busbw_interval_ns, elapsed);
  interval_bus_bytes_ = 0;
  interval_start_ns_ = now_ns;
}

void CountersPublisher::publish_jobs(const std::vector<size_t>& in_flight) {
  proto::JobsSection& s = *jobs_scratch_;
  s.snapshot = snapshot_;
  s.count = 0;
  s.total = static_cast<uint32_t>(tallies_.size());
  for (size_t j = 0; j < listed_.size(); ++j) {
    const Job& job = *listed_[j];
    const JobTally& tally = tallies_[job.serial];
    proto::JobSlot& slot = s.slots[s.count++];
    slot = proto::JobSlot{};
    slot.serial = job.serial;
    ipc::copy_text(slot.name, job.name);
    slot.state = static_cast<uint32_t>(job.state) + 1;  // CountersJobState: kNone is 0
    slot.local_size = job.local_size;
    slot.attached = job.attached;
    slot.world_size = job.world_size;
    slot.world_offset = job.world_offset;
    slot.node_index = job.node_index;
    slot.node_count = job.node_count;
    slot.communicators = static_cast<uint32_t>(job.comms.size());
    slot.owner_uid = proto::kNoOwner;
    slot.ops_in_flight = static_cast<uint32_t>(in_flight[j]);
    slot.started_realtime_ns = tally.started_realtime_ns;
    for (const ClientSession* member : job.members) {  // by local rank: rank 0's first
      if (member == nullptr) continue;
      if (slot.owner_uid == proto::kNoOwner) slot.owner_uid = member->cred().uid;
      uint64_t posted = 0;
      for (const auto& [comm, next] : member->next_seq) posted += next - 1;
      slot.ops_posted = std::max(slot.ops_posted, posted);
    }
    slot.ops_completed = tally.ops_completed;
    slot.ops_failed = tally.ops_failed;
    slot.bytes_completed = tally.bytes_completed;
    ipc::copy_text(slot.failure, job.failure);
  }
  proto::seqlock_write(seg_->jobs, s);
}

void CountersPublisher::publish_clients(uint64_t now_ns, const ClientMap& clients) {
  proto::ClientsSection& s = *clients_scratch_;
  s.snapshot = snapshot_;
  s.count = 0;
  s.total = static_cast<uint32_t>(clients.size());
  uint64_t submission_backlog = 0;
  uint64_t completion_backlog = 0;
  std::map<uint32_t, uint64_t> seen;
  for (const auto& [id, client] : clients) {
    ClientSession& c = *client;
    const auto first = connected_ns_.find(id);
    seen[id] = first == connected_ns_.end() ? now_ns : first->second;
    // Last seen: when its submission position last moved (the library writes no heartbeat).
    ClientActivity& act = activity_[id];
    const uint64_t position = c.has_segment() ? c.submissions().position() : 0;
    if (act.seen_ns == 0 || position != act.position) act.seen_ns = now_ns;
    act.position = position;
    uint64_t pending = 0;
    uint64_t heartbeat = 0;
    if (c.has_segment() && c.state() == ClientSession::State::kJoined) {
      // Shared words the client writes: read once (relaxed, a display value) and clamped,
      // never trusted.
      const uint64_t tail = proto::counter_load(c.segment().submit_ring().tail.value);
      const uint64_t head = c.submissions().position();
      pending = tail >= head ? std::min<uint64_t>(tail - head, c.segment().submit_capacity()) : 0;
      heartbeat = proto::counter_load(c.segment().doorbells().client_heartbeat_ns);
    }
    submission_backlog += pending;
    completion_backlog += c.backlog();
    if (s.count == proto::kCounterClients) continue;
    proto::ClientSlot& slot = s.slots[s.count++];
    slot = proto::ClientSlot{};
    slot.client_id = id;
    slot.state = static_cast<uint32_t>(counters_state(c.state()));
    slot.local_rank = c.local_rank;
    slot.world_rank = c.world_rank;
    slot.pid = static_cast<uint32_t>(c.cred().pid);
    slot.uid = c.cred().uid;
    slot.gid = c.cred().gid;
    slot.job = job_slot(c.job);
    slot.connected_monotonic_ns = seen[id];
    slot.heartbeat_monotonic_ns = heartbeat;
    slot.last_seen_monotonic_ns = act.seen_ns;
    for (const auto& [comm, next] : c.next_seq) slot.ops_submitted += next - 1;
    const auto done = completed_by_client_.find(id);
    slot.ops_completed = done == completed_by_client_.end() ? 0 : done->second;
    slot.submission_backlog = pending;
    slot.completion_backlog = c.backlog();
  }
  std::erase_if(activity_, [&](const auto& entry) { return seen.count(entry.first) == 0; });
  std::erase_if(completed_by_client_,
                [&](const auto& entry) { return seen.count(entry.first) == 0; });
  connected_ns_ = std::move(seen);
  counter_store(seg_->totals.clients, clients.size());
  counter_store(seg_->totals.submission_backlog, submission_backlog);
  counter_store(seg_->totals.completion_backlog, completion_backlog);
  proto::seqlock_write(seg_->clients, s);
}

void CountersPublisher::publish_ops(uint64_t now_ns, std::vector<LiveOp>& live,
                                    uint32_t stall_sec) {
  proto::OpsSection& s = *ops_scratch_;
  s.snapshot = snapshot_;
  s.count = 0;
  s.total = static_cast<uint32_t>(live.size());
  const size_t listed = std::min<size_t>(live.size(), proto::kCounterOps);
  // The oldest first, whichever job: they are the ones somebody is waiting for.
  std::partial_sort(live.begin(), live.begin() + static_cast<std::ptrdiff_t>(listed), live.end(),
                    [](const LiveOp& a, const LiveOp& b) {
                      return a.op->first_arrival_ns < b.op->first_arrival_ns;
                    });
  const uint64_t stall_ns = uint64_t{stall_sec} * 1'000'000'000ull;
  for (size_t i = 0; i < listed; ++i) {
    Communicator& comm = *live[i].comm;
    const Operation& op = *live[i].op;
    const CommLayout& lay = comm.layout();
    const proto::OpDescriptor& d = op.first();
    proto::OpSlot& slot = s.slots[s.count++];
    slot = proto::OpSlot{};
    slot.seq = op.seq;
    slot.bytes = op_bytes(d);
    slot.first_arrival_ns = op.first_arrival_ns;
    slot.comm = comm.id();
    slot.collective = d.collective;
    slot.dtype = d.dtype;
    slot.phase = static_cast<uint8_t>(op.phase);
    slot.arrived = op.arrived;
    slot.local_members = comm.local_size();
    slot.job = live[i].job < listed_.size() ? static_cast<uint32_t>(live[i].job) + 1 : 0;
    slot.stalled = op.stall_reported || (stall_sec > 0 && now_ns > op.first_arrival_ns &&
                                         now_ns - op.first_arrival_ns >= stall_ns)
                       ? 1
                       : 0;
    for (size_t k = 0; k < op.slots.size() && k < lay.members.size(); ++k) {
      if (op.slots[k]) continue;
      if (slot.missing_count < proto::kMissingListed) {
        const uint32_t comm_rank = lay.member_ranks[k];
        slot.missing_local_ranks[slot.missing_count] = lay.members[k];
        slot.missing_world_ranks[slot.missing_count] =
            comm_rank < lay.world_rank_of.size() ? lay.world_rank_of[comm_rank] : comm_rank;
      }
      ++slot.missing_count;
    }
    if (op.phase == Operation::Phase::kReady) {
      const auto& ready = comm.schedule.ready_by_node;
      for (size_t n = 0; n < ready.size(); ++n) {
        if (ready[n].count(op.seq) != 0) continue;
        if (slot.late_node_count < proto::kMissingListed) {
          slot.late_nodes[slot.late_node_count] = static_cast<uint32_t>(n);
        }
        ++slot.late_node_count;
      }
    }
    copy_name(slot.name, d.name);
  }
  counter_store(seg_->totals.ops_in_flight, live.size());
  proto::seqlock_write(seg_->ops, s);
}

}  // namespace nodecomm::daemon
