#include "report.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>

#include "nodecomm/ipc/byte_size.hpp"
#include "nodecomm/ipc/fixed_text.hpp"
#include "nodecomm/ipc/printable.hpp"
#include "nodecomm/proto/types.hpp"

namespace nodecomm::ctl {

namespace {

constexpr const char* kJobStates[] = {"none", "attaching", "forming", "running", "failed"};
constexpr const char* kClientStates[] = {"hello", "mapping", "joined", "closed", "backing"};
constexpr const char* kPhases[] = {"gathering", "ready", "network", "done"};

std::string collective(uint32_t c) {
  return std::string(proto::collective_name(static_cast<proto::Collective>(c)));
}

double seconds_between(uint64_t later_ns, uint64_t earlier_ns) {
  return earlier_ns == 0 || later_ns < earlier_ns
             ? 0.0
             : static_cast<double>(later_ns - earlier_ns) / 1e9;
}

const char* job_state(const proto::JobSlot& j) {
  return j.state < std::size(kJobStates) ? kJobStates[j.state] : "?";
}

// A job's owner uid as text: "-" until one of its ranks said hello.
std::string owner(const proto::JobSlot& j) {
  return j.owner_uid == proto::kNoOwner ? "-" : std::to_string(j.owner_uid);
}

Json job_json(const Snapshot& s, const proto::JobSlot& j) {
  return {{"name", ipc::printable_text(j.name)},
          {"state", job_state(j)},
          {"serial", j.serial},
          {"uid", j.owner_uid == proto::kNoOwner ? Json(nullptr) : Json(j.owner_uid)},
          {"world_size", j.world_size},
          {"node_index", j.node_index},
          {"node_count", j.node_count},
          {"local_size", j.local_size},
          {"attached", j.attached},
          {"world_offset", j.world_offset},
          {"communicators", j.communicators},
          {"ops_posted", j.ops_posted},
          {"ops_completed", j.ops_completed},
          {"ops_failed", j.ops_failed},
          {"bytes_completed", j.bytes_completed},
          {"ops_in_flight", j.ops_in_flight},
          {"age_s", seconds_between(s.now_realtime_ns, j.started_realtime_ns)},
          {"started_realtime_ns", j.started_realtime_ns},
          {"failure", ipc::printable_text(j.failure)}};
}

// The status line of one job (the format of the single job line before layout 3).
std::string job_line(const proto::JobSlot& j) {
  std::string out = fmt::format(
      "job        '{}' {}: {} ranks on {} nodes; this is node {}, ranks {}..{} ({}/{} attached), "
      "{} communicator(s), {} ops posted\n",
      ipc::printable_text(j.name), job_state(j), j.world_size, j.node_count, j.node_index,
      j.world_offset, j.world_offset + (j.local_size > 0 ? j.local_size - 1 : 0), j.attached,
      j.local_size, j.communicators, j.ops_posted);
  if (j.failure[0] != '\0') out += fmt::format("failure    {}\n", ipc::printable_text(j.failure));
  return out;
}

// A label value in the exposition format: '\\' and '"' escaped, of the printable name that
// every other output shows.
std::string label_value(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

template <size_t N>
std::vector<uint32_t> listed(const uint32_t (&values)[N], uint32_t count) {
  return {values, values + std::min<uint32_t>(count, N)};
}

// What an in-flight operation waits for, in words.
std::string waiting_for(const proto::OpSlot& op) {
  if (op.missing_count > 0) {
    return fmt::format("local ranks {} (world {}){}",
                       fmt::join(listed(op.missing_local_ranks, op.missing_count), ","),
                       fmt::join(listed(op.missing_world_ranks, op.missing_count), ","),
                       op.missing_count > proto::kMissingListed ? ", ..." : "");
  }
  if (op.late_node_count > 0) {
    return fmt::format("nodes {} of comm (not ready there)",
                       fmt::join(listed(op.late_nodes, op.late_node_count), ","));
  }
  if (op.phase == static_cast<uint8_t>(proto::CountersOpPhase::kInterNode)) return "network";
  return "scheduling";
}

// Quantile of a log2 histogram: the upper bound of the bucket that holds it, in seconds.
double histogram_quantile(const proto::CollectiveCounters& c, double q) {
  uint64_t total = 0;
  for (const uint64_t n : c.latency_buckets) total += n;
  if (total == 0) return 0;
  const double rank = q * static_cast<double>(total);
  uint64_t seen = 0;
  for (uint32_t b = 0; b < proto::kLatencyBuckets; ++b) {
    seen += c.latency_buckets[b];
    if (static_cast<double>(seen) >= rank) {
      const uint64_t limit = proto::latency_bucket_limit_us(b);
      return limit == 0 ? static_cast<double>(uint64_t{1} << 30) / 1e6 : limit / 1e6;
    }
  }
  return 0;
}

}  // namespace

std::string human_duration(double s) {
  if (s < 1e-3) return fmt::format("{:.0f} us", s * 1e6);
  if (s < 1) return fmt::format("{:.1f} ms", s * 1e3);
  if (s < 120) return fmt::format("{:.1f} s", s);
  return fmt::format("{:.0f} min", s / 60);
}

std::string daemon_state(const Snapshot& s) {
  if (!s.alive) return "not running";
  if (s.heartbeat_age_s() > 5) return "wedged";
  return "running";
}

Json list_json(const std::vector<ListedInstance>& instances) {
  Json out = Json::array();
  for (const ListedInstance& i : instances) {
    if (!i.readable) {
      out.push_back(
          {{"shm", "/dev/shm" + i.shm_name}, {"state", "unreadable"}, {"error", i.error}});
      continue;
    }
    const Snapshot& s = i.snapshot;
    out.push_back({{"instance", s.instance()},
                   {"state", daemon_state(s)},
                   {"pid", s.daemon.pid},
                   {"uid", s.daemon.uid},
                   {"node_index", s.daemon.node_index},
                   {"node_count", s.daemon.node_count},
                   {"job", s.job_name(1)},  // the oldest job
                   {"job_state", s.jobs.count == 0 ? "none" : job_state(s.jobs.slots[0])},
                   {"jobs", s.jobs.total},
                   {"clients", s.totals.clients},
                   {"runtime_dir", ipc::printable_text(s.daemon.runtime_dir)},
                   {"socket", ipc::printable_text(s.daemon.socket_path)},
                   {"shm", "/dev/shm" + i.shm_name}});
  }
  return out;
}

std::string list_text(const std::vector<ListedInstance>& instances) {
  std::string out = fmt::format("{:<28} {:<12} {:>8} {:>6} {:>7} {:<24} {}\n", "INSTANCE", "STATE",
                                "PID", "NODE", "CLIENTS", "JOB", "RUNTIME DIR");
  for (const ListedInstance& i : instances) {
    if (!i.readable) {
      out += fmt::format("{:<28} {:<12} {}\n", i.shm_name, "unreadable", i.error);
      continue;
    }
    const Snapshot& s = i.snapshot;
    // The oldest job, and how many more there are.
    std::string job = "-";
    if (const proto::JobSlot* j = s.first_job(); j != nullptr) {
      job = fmt::format("{} ({})", ipc::printable_text(j->name), job_state(*j));
      if (s.jobs.total > 1) job += fmt::format(" +{}", s.jobs.total - 1);
    }
    out += fmt::format("{:<28} {:<12} {:>8} {:>6} {:>7} {:<24} {}\n", s.instance(), daemon_state(s),
                       s.daemon.pid, fmt::format("{}/{}", s.daemon.node_index, s.daemon.node_count),
                       s.totals.clients, job, ipc::printable_text(s.daemon.runtime_dir));
  }
  return out;
}

Json params_json(const Snapshot& s) {
  Json out = Json::object();
  for (uint32_t i = 0; i < s.params.count; ++i) {
    out[ipc::printable_text(s.params.entries[i].key)] =
        ipc::printable_text(s.params.entries[i].value);
  }
  return out;
}

Json status_json(const Snapshot& s) {
  const proto::Totals& t = s.totals;
  uint64_t stalled = 0;
  for (uint32_t i = 0; i < s.ops.count; ++i) stalled += s.ops.slots[i].stalled;
  const Json jobs = jobs_json(s)["jobs"];
  return {{"instance", s.instance()},
          {"state", daemon_state(s)},
          {"pid", s.daemon.pid},
          {"uid", s.daemon.uid},
          {"version", ipc::printable_text(s.daemon.version)},
          {"node_index", s.daemon.node_index},
          {"node_count", s.daemon.node_count},
          {"transport", ipc::printable_text(s.daemon.transport)},
          {"lanes", s.daemon.lanes},
          {"runtime_dir", ipc::printable_text(s.daemon.runtime_dir)},
          {"socket", ipc::printable_text(s.daemon.socket_path)},
          {"uptime_s", seconds_between(s.now_realtime_ns, s.daemon.start_realtime_ns)},
          {"heartbeat", s.liveness.heartbeat},
          {"heartbeat_age_s", s.heartbeat_age_s()},
          {"last_progress_age_s",
           seconds_between(s.now_monotonic_ns, s.liveness.last_progress_monotonic_ns)},
          {"last_progress_realtime_ns", s.liveness.last_progress_realtime_ns},
          {"job", jobs.empty() ? Json(nullptr) : jobs[0]},  // the oldest
          {"jobs", jobs},
          {"clients", t.clients},
          {"ops_completed", t.ops_completed},
          {"ops_failed", t.ops_failed},
          {"bytes_completed", t.bytes_completed},
          {"ops_in_flight", t.ops_in_flight},
          {"ops_stalled", stalled},
          {"stalls_reported", t.stalls_reported},
          {"op_timeouts", t.op_timeouts},
          {"submission_backlog", t.submission_backlog},
          {"completion_backlog", t.completion_backlog},
          {"units_in_flight", t.units_in_flight},
          {"bytes_in_flight", t.bytes_in_flight},
          {"busbw_bps", t.busbw_last_bps},
          {"busbw_ewma_bps", t.busbw_ewma_bps},
          {"tracing", t.tracing != 0},
          {"comms_retired", t.comms_retired},
          {"late_messages_dropped", t.late_messages_dropped},
          {"settings", params_json(s)}};
}

std::string status_text(const Snapshot& s) {
  const proto::Totals& t = s.totals;
  uint64_t stalled = 0;
  for (uint32_t i = 0; i < s.ops.count; ++i) stalled += s.ops.slots[i].stalled;
  std::string out;
  out += fmt::format("instance   {} ({}, pid {}, uid {}, nodecomm {})\n", s.instance(),
                     daemon_state(s), s.daemon.pid, s.daemon.uid,
                     ipc::printable_text(s.daemon.version));
  out += fmt::format("node       {} of {}, transport {}, {} lanes\n", s.daemon.node_index,
                     s.daemon.node_count, ipc::printable_text(s.daemon.transport), s.daemon.lanes);
  out += fmt::format(
      "liveness   up {}, heartbeat {} ago, last progress {} ago\n",
      human_duration(seconds_between(s.now_realtime_ns, s.daemon.start_realtime_ns)),
      human_duration(s.heartbeat_age_s()),
      human_duration(seconds_between(s.now_monotonic_ns, s.liveness.last_progress_monotonic_ns)));
  out += fmt::format("socket     {}\n", ipc::printable_text(s.daemon.socket_path));
  if (s.jobs.count == 0) out += "job        none\n";
  for (uint32_t i = 0; i < s.jobs.count; ++i) out += job_line(s.jobs.slots[i]);  // oldest first
  if (s.jobs.total > s.jobs.count) {
    out += fmt::format("job        ... and {} more\n", s.jobs.total - s.jobs.count);
  }
  out += fmt::format("clients    {} connected\n", t.clients);
  out += fmt::format(
      "ops        {} completed ({} failed, {}), {} in flight, {} stalled; {} stall report(s), "
      "{} timeout(s)\n",
      t.ops_completed, t.ops_failed, ipc::human_bytes(static_cast<double>(t.bytes_completed)),
      t.ops_in_flight, stalled, t.stalls_reported, t.op_timeouts);
  out += fmt::format(
      "queues     submission backlog {}, completion backlog {}, {} transfer(s) on the network "
      "({})\n",
      t.submission_backlog, t.completion_backlog, t.units_in_flight,
      ipc::human_bytes(static_cast<double>(t.bytes_in_flight)));
  if (t.comms_retired != 0 || t.late_messages_dropped != 0) {
    out += fmt::format(
        "left       {} communicator(s) of groups this daemon left kept until quiet, {} late "
        "message(s) dropped\n",
        t.comms_retired, t.late_messages_dropped);
  }
  out += fmt::format("busbw      {}/s last interval, {}/s average\n",
                     ipc::human_bytes(static_cast<double>(t.busbw_last_bps)),
                     ipc::human_bytes(static_cast<double>(t.busbw_ewma_bps)));
  out += fmt::format(
      "settings   chunk-size {} (agreed {}), small-bytes {}, algorithm {}, priority-policy {}, "
      "fusion {} ({}), idle {}, stall-sec {}, op-timeout-sec {}, log-level {}\n",
      s.param("chunk-size"), s.param("agreed-chunk-size"), s.param("small-bytes"),
      s.param("allreduce-algorithm"), s.param("priority-policy"), s.param("fusion"),
      s.param("fusion-threshold"), s.param("idle"), s.param("stall-sec"), s.param("op-timeout-sec"),
      s.param("log-level"));
  out += fmt::format("tracing    {}\n", t.tracing != 0 ? "on" : "off");
  return out;
}

Json clients_json(const Snapshot& s) {
  Json list = Json::array();
  for (uint32_t i = 0; i < s.clients.count; ++i) {
    const proto::ClientSlot& c = s.clients.slots[i];
    list.push_back(
        {{"client_id", c.client_id},
         {"state", c.state < std::size(kClientStates) ? kClientStates[c.state] : "?"},
         {"in_job", c.job != 0},
         {"job", c.job != 0 ? Json(s.job_name(c.job)) : Json(nullptr)},
         {"local_rank", c.local_rank},
         {"world_rank", c.world_rank},
         {"pid", c.pid},
         {"uid", c.uid},
         {"gid", c.gid},
         {"connected_s", seconds_between(s.now_monotonic_ns, c.connected_monotonic_ns)},
         {"heartbeat_age_s",
          c.heartbeat_monotonic_ns == 0
              ? Json(nullptr)
              : Json(seconds_between(s.now_monotonic_ns, c.heartbeat_monotonic_ns))},
         {"last_seen_age_s", seconds_between(s.now_monotonic_ns, c.last_seen_monotonic_ns)},
         {"ops_submitted", c.ops_submitted},
         {"ops_completed", c.ops_completed},
         {"submission_backlog", c.submission_backlog},
         {"completion_backlog", c.completion_backlog}});
  }
  return {{"instance", s.instance()},
          {"job", s.job_name(1)},  // the oldest job; each client names its own
          {"total", s.clients.total},
          {"clients", list}};
}

std::string clients_text(const Snapshot& s) {
  std::string out = fmt::format(
      "{:>4} {:<8} {:>5} {:>5} {:>8} {:>6} {:>10} {:>10} {:>10} {:>8} {}\n", "ID", "STATE", "LOCAL",
      "WORLD", "PID", "UID", "LAST SEEN", "SUBMITTED", "COMPLETED", "BACKLOG", "JOB");
  for (uint32_t i = 0; i < s.clients.count; ++i) {
    const proto::ClientSlot& c = s.clients.slots[i];
    const proto::JobSlot* job = s.job(c.job);
    const bool member = job != nullptr;
    out += fmt::format(
        "{:>4} {:<8} {:>5} {:>5} {:>8} {:>6} {:>10} {:>10} {:>10} {:>8} {}\n", c.client_id,
        member || c.state != 0 ? (c.state < std::size(kClientStates) ? kClientStates[c.state] : "?")
                               : "admin?",
        member ? std::to_string(c.local_rank) : "-",
        member && job->state >= 3 ? std::to_string(c.world_rank) : "-", c.pid, c.uid,
        human_duration(seconds_between(
            s.now_monotonic_ns, std::max(c.heartbeat_monotonic_ns, c.last_seen_monotonic_ns))),
        c.ops_submitted, c.ops_completed, c.submission_backlog + c.completion_backlog,
        member ? ipc::printable_text(job->name) : "-");
  }
  if (s.clients.total > s.clients.count) {
    out += fmt::format("... and {} more\n", s.clients.total - s.clients.count);
  }
  return out;
}

Json ops_json(const Snapshot& s) {
  Json list = Json::array();
  for (uint32_t i = 0; i < s.ops.count; ++i) {
    const proto::OpSlot& op = s.ops.slots[i];
    list.push_back({{"job", op.job != 0 ? Json(s.job_name(op.job)) : Json(nullptr)},
                    {"comm", op.comm},
                    {"seq", op.seq},
                    {"collective", collective(op.collective)},
                    {"dtype", std::string(proto::dtype_name(static_cast<proto::DType>(op.dtype)))},
                    {"name", ipc::printable_text(op.name)},
                    {"bytes", op.bytes},
                    {"phase", op.phase < 4 ? kPhases[op.phase] : "?"},
                    {"age_s", seconds_between(s.now_monotonic_ns, op.first_arrival_ns)},
                    {"stalled", op.stalled != 0},
                    {"arrived", op.arrived},
                    {"local_members", op.local_members},
                    {"missing_local_ranks", listed(op.missing_local_ranks, op.missing_count)},
                    {"missing_world_ranks", listed(op.missing_world_ranks, op.missing_count)},
                    {"missing_count", op.missing_count},
                    {"late_nodes", listed(op.late_nodes, op.late_node_count)},
                    {"waiting_for", waiting_for(op)}});
  }
  return {{"instance", s.instance()},
          {"job", s.job_name(1)},  // the oldest job; each operation names its own
          {"total", s.ops.total},
          {"stall_sec", s.param("stall-sec")},
          {"ops", list}};
}

std::string ops_text(const Snapshot& s) {
  if (s.ops.total == 0) return "no operations in flight\n";
  std::string out =
      fmt::format("{:<12} {:>4} {:>8} {:<14} {:<16} {:>10} {:<9} {:>9} {:<7} {}\n", "JOB", "COMM",
                  "SEQ", "COLLECTIVE", "NAME", "BYTES", "PHASE", "AGE", "STALLED", "WAITING FOR");
  for (uint32_t i = 0; i < s.ops.count; ++i) {
    const proto::OpSlot& op = s.ops.slots[i];
    const std::string job = op.job != 0 ? s.job_name(op.job) : "-";
    out += fmt::format("{:<12} {:>4} {:>8} {:<14} {:<16} {:>10} {:<9} {:>9} {:<7} {}\n", job,
                       op.comm, op.seq, collective(op.collective), ipc::printable_text(op.name),
                       ipc::human_bytes(static_cast<double>(op.bytes)),
                       op.phase < 4 ? kPhases[op.phase] : "?",
                       human_duration(seconds_between(s.now_monotonic_ns, op.first_arrival_ns)),
                       op.stalled != 0 ? "yes" : "no", waiting_for(op));
  }
  if (s.ops.total > s.ops.count) {
    out += fmt::format("... and {} more (the oldest {} are listed)\n", s.ops.total - s.ops.count,
                       s.ops.count);
  }
  return out;
}

namespace {
// Totals that only grow, by JSON name, for rates and metrics.
struct CounterField {
  const char* name;
  uint64_t proto::Totals::*field;
  const char* help;
};
constexpr CounterField kCounters[] = {
    {"ops_completed", &proto::Totals::ops_completed, "Collective operations completed"},
    {"ops_failed", &proto::Totals::ops_failed, "Collective operations that failed"},
    {"bytes_completed", &proto::Totals::bytes_completed, "Bytes of successful operations"},
    {"stalls_reported", &proto::Totals::stalls_reported, "Operations older than stall-sec"},
    {"op_timeouts", &proto::Totals::op_timeouts, "Operations failed by op-timeout-sec"},
    {"sched_rounds", &proto::Totals::sched_rounds, "Scheduler negotiation rounds"},
    {"sched_units", &proto::Totals::sched_units, "Scheduled transfers started"},
    {"sched_chunks", &proto::Totals::sched_chunks, "Scheduled chunks of one allreduce"},
    {"sched_fused", &proto::Totals::sched_fused, "Fused transfers of small allreduces"},
    {"sched_eager", &proto::Totals::sched_eager,
     "Small allreduces completed inside a scheduling round"},
    {"sched_unit_bytes", &proto::Totals::sched_unit_bytes, "Bytes of scheduled transfers"},
    {"late_messages_dropped", &proto::Totals::late_messages_dropped,
     "Messages peers sent into groups this daemon had left, dropped"},
    {"ring_allreduces", &proto::Totals::ring_allreduces, "Inter-node allreduces by the ring"},
    {"ring_slices", &proto::Totals::ring_slices, "Ring slices (chunk-size pieces per block)"},
    {"rd_allreduces", &proto::Totals::rd_allreduces, "Inter-node recursive-doubling allreduces"},
    {"clients_accepted", &proto::Totals::clients_accepted, "Control connections accepted"},
    {"jobs_formed", &proto::Totals::jobs_formed, "Jobs formed"},
    {"admin_requests", &proto::Totals::admin_requests, "Admin requests (set, trace)"},
    {"admin_refused", &proto::Totals::admin_refused, "Admin requests refused"},
    {"settings_changed", &proto::Totals::settings_changed, "Settings changed at run time"},
    {"trace_events", &proto::Totals::trace_events, "Events in the current trace buffer"},
};
// Per-job series of `metrics`, besides nodecomm_job_world_size.
struct JobField {
  const char* name;
  bool counter;
  uint64_t (*value)(const proto::JobSlot&);
  const char* help;
};
constexpr JobField kJobFields[] = {
    {"job_local_ranks", false, [](const proto::JobSlot& j) -> uint64_t { return j.local_size; },
     "Local ranks of the job on this node"},
    {"job_attached_ranks", false, [](const proto::JobSlot& j) -> uint64_t { return j.attached; },
     "Local ranks of the job attached"},
    {"job_ops_posted", false, [](const proto::JobSlot& j) { return j.ops_posted; },
     "Operations posted by the job (the most any local rank has posted)"},
    {"job_ops_completed_total", true, [](const proto::JobSlot& j) { return j.ops_completed; },
     "Operations of the job completed"},
    {"job_ops_failed_total", true, [](const proto::JobSlot& j) { return j.ops_failed; },
     "Operations of the job that failed"},
    {"job_bytes_completed_total", true, [](const proto::JobSlot& j) { return j.bytes_completed; },
     "Bytes of the job's successful operations"},
    {"job_ops_in_flight", false,
     [](const proto::JobSlot& j) -> uint64_t { return j.ops_in_flight; },
     "Operations of the job submitted, not complete"},
};
constexpr CounterField kGauges[] = {
    {"clients", &proto::Totals::clients, "Connected clients"},
    {"submission_backlog", &proto::Totals::submission_backlog, "Submissions not yet taken"},
    {"completion_backlog", &proto::Totals::completion_backlog, "Completions awaiting ring room"},
    {"ops_in_flight", &proto::Totals::ops_in_flight, "Operations submitted, not complete"},
    {"units_in_flight", &proto::Totals::units_in_flight, "Scheduled transfers on the network"},
    {"bytes_in_flight", &proto::Totals::bytes_in_flight, "Bytes of transfers on the network"},
    {"busbw_bytes_per_second", &proto::Totals::busbw_last_bps,
     "Allreduce bus bandwidth, last interval"},
    {"busbw_ewma_bytes_per_second", &proto::Totals::busbw_ewma_bps,
     "Allreduce bus bandwidth, moving average"},
    {"tracing", &proto::Totals::tracing, "1 while a trace is recorded"},
    {"comms_retired", &proto::Totals::comms_retired,
     "Communicators of left groups not yet freed (still draining)"},
};
}  // namespace

Json counters_json(const Snapshot& s, const Snapshot* previous) {
  const double dt =
      previous == nullptr ? 0.0 : seconds_between(s.now_monotonic_ns, previous->now_monotonic_ns);
  Json totals = Json::object();
  Json rates = Json::object();
  for (const CounterField& f : kCounters) {
    totals[f.name] = s.totals.*f.field;
    if (dt > 0) {
      const uint64_t before = previous->totals.*f.field;
      const uint64_t now = s.totals.*f.field;
      rates[f.name] = now >= before ? static_cast<double>(now - before) / dt : 0.0;
    }
  }
  for (const CounterField& f : kGauges) totals[f.name] = s.totals.*f.field;
  Json collectives = Json::object();
  for (uint32_t c = 0; c < proto::kCounterCollectives; ++c) {
    const proto::CollectiveCounters& cc = s.collectives[c];
    if (cc.ops == 0) continue;
    collectives[collective(c)] = {
        {"ops", cc.ops},
        {"bytes", cc.bytes},
        {"errors", cc.errors},
        {"latency_sum_s", static_cast<double>(cc.latency_sum_ns) / 1e9},
        {"latency_mean_s",
         static_cast<double>(cc.latency_sum_ns) / 1e9 / static_cast<double>(cc.ops)},
        {"latency_p50_le_s", histogram_quantile(cc, 0.5)},
        {"latency_p99_le_s", histogram_quantile(cc, 0.99)},
        {"latency_buckets_us",
         std::vector<uint64_t>(std::begin(cc.latency_buckets), std::end(cc.latency_buckets))}};
  }
  Json out = {{"instance", s.instance()},
              {"time_realtime_ns", s.now_realtime_ns},
              {"totals", totals},
              {"collectives", collectives},
              {"chunk_size", s.param("chunk-size")},
              {"agreed_chunk_size", s.param("agreed-chunk-size")}};
  if (dt > 0) {
    out["interval_s"] = dt;
    out["rates_per_s"] = rates;
  }
  return out;
}

std::string counters_text(const Snapshot& s, const Snapshot* previous) {
  const double dt =
      previous == nullptr ? 0.0 : seconds_between(s.now_monotonic_ns, previous->now_monotonic_ns);
  std::string out = fmt::format("{}: chunk-size {} (agreed {})\n", s.instance(),
                                s.param("chunk-size"), s.param("agreed-chunk-size"));
  for (const CounterField& f : kCounters) {
    const uint64_t now = s.totals.*f.field;
    out += fmt::format("  {:<28} {:>16}", f.name, now);
    if (dt > 0) {
      const uint64_t before = previous->totals.*f.field;
      out += fmt::format("  {:>14.1f}/s",
                         now >= before ? static_cast<double>(now - before) / dt : 0.0);
    }
    out += "\n";
  }
  for (const CounterField& f : kGauges) {
    out += fmt::format("  {:<28} {:>16}\n", f.name, s.totals.*f.field);
  }
  out += fmt::format("  {:<14} {:>12} {:>12} {:>8} {:>10} {:>10} {:>10}\n", "COLLECTIVE", "OPS",
                     "BYTES", "ERRORS", "MEAN", "P50<=", "P99<=");
  for (uint32_t c = 0; c < proto::kCounterCollectives; ++c) {
    const proto::CollectiveCounters& cc = s.collectives[c];
    if (cc.ops == 0) continue;
    out += fmt::format(
        "  {:<14} {:>12} {:>12} {:>8} {:>10} {:>10} {:>10}\n", collective(c), cc.ops,
        ipc::human_bytes(static_cast<double>(cc.bytes)), cc.errors,
        human_duration(static_cast<double>(cc.latency_sum_ns) / 1e9 / static_cast<double>(cc.ops)),
        human_duration(histogram_quantile(cc, 0.5)), human_duration(histogram_quantile(cc, 0.99)));
  }
  return out;
}

std::string metrics_text(const std::vector<Snapshot>& snapshots) {
  std::string out;
  const auto labels = [](const Snapshot& s) {
    return fmt::format("instance=\"{}\",node=\"{}\"", s.instance(), s.daemon.node_index);
  };
  const auto family = [&](const std::string& name, const char* type, const std::string& help) {
    out += fmt::format("# HELP nodecomm_{} {}\n# TYPE nodecomm_{} {}\n", name, help, name, type);
  };
  family("up", "gauge", "1 if the daemon's process exists and its heartbeat is recent");
  for (const Snapshot& s : snapshots) {
    out += fmt::format("nodecomm_up{{{}}} {}\n", labels(s), daemon_state(s) == "running" ? 1 : 0);
  }
  family("heartbeat_age_seconds", "gauge", "Seconds since the daemon's last housekeeping pass");
  for (const Snapshot& s : snapshots) {
    out += fmt::format("nodecomm_heartbeat_age_seconds{{{}}} {:.6f}\n", labels(s),
                       s.heartbeat_age_s());
  }
  family("last_progress_timestamp_seconds", "gauge",
         "Wall-clock time of the engine's last progress");
  for (const Snapshot& s : snapshots) {
    out += fmt::format("nodecomm_last_progress_timestamp_seconds{{{}}} {:.6f}\n", labels(s),
                       static_cast<double>(s.liveness.last_progress_realtime_ns) / 1e9);
  }
  family("start_time_seconds", "gauge", "Wall-clock start time of the daemon");
  for (const Snapshot& s : snapshots) {
    out += fmt::format("nodecomm_start_time_seconds{{{}}} {:.3f}\n", labels(s),
                       static_cast<double>(s.daemon.start_realtime_ns) / 1e9);
  }
  for (const CounterField& f : kCounters) {
    family(std::string(f.name) + "_total", "counter", f.help);
    for (const Snapshot& s : snapshots) {
      out += fmt::format("nodecomm_{}_total{{{}}} {}\n", f.name, labels(s), s.totals.*f.field);
    }
  }
  for (const CounterField& f : kGauges) {
    family(f.name, "gauge", f.help);
    for (const Snapshot& s : snapshots) {
      out += fmt::format("nodecomm_{}{{{}}} {}\n", f.name, labels(s), s.totals.*f.field);
    }
  }
  // Per job, each with its own job="..." label. A daemon without a job still has a
  // nodecomm_job_world_size sample: job="" 0.
  const auto job_labels = [&](const Snapshot& s, const proto::JobSlot& j) {
    return fmt::format("{},job=\"{}\"", labels(s), label_value(ipc::printable_text(j.name)));
  };
  family("job_world_size", "gauge", "Ranks in the job (0: none)");
  for (const Snapshot& s : snapshots) {
    if (s.jobs.count == 0)
      out += fmt::format("nodecomm_job_world_size{{{},job=\"\"}} 0\n", labels(s));
    for (uint32_t i = 0; i < s.jobs.count; ++i) {
      out += fmt::format("nodecomm_job_world_size{{{}}} {}\n", job_labels(s, s.jobs.slots[i]),
                         s.jobs.slots[i].world_size);
    }
  }
  for (const JobField& f : kJobFields) {
    family(f.name, f.counter ? "counter" : "gauge", f.help);
    for (const Snapshot& s : snapshots) {
      for (uint32_t i = 0; i < s.jobs.count; ++i) {
        out += fmt::format("nodecomm_{}{{{}}} {}\n", f.name, job_labels(s, s.jobs.slots[i]),
                           f.value(s.jobs.slots[i]));
      }
    }
  }
  family("ops_stalled", "gauge", "In-flight operations older than stall-sec");
  for (const Snapshot& s : snapshots) {
    uint64_t stalled = 0;
    for (uint32_t i = 0; i < s.ops.count; ++i) stalled += s.ops.slots[i].stalled;
    out += fmt::format("nodecomm_ops_stalled{{{}}} {}\n", labels(s), stalled);
  }
  const std::pair<const char*, const char*> per_collective[] = {
      {"collective_ops_total", "Operations completed, per collective"},
      {"collective_bytes_total", "Bytes of successful operations, per collective"},
      {"collective_errors_total", "Failed operations, per collective"}};
  for (int k = 0; k < 3; ++k) {
    family(per_collective[k].first, "counter", per_collective[k].second);
    for (const Snapshot& s : snapshots) {
      for (uint32_t c = 0; c < proto::kCounterCollectives; ++c) {
        const proto::CollectiveCounters& cc = s.collectives[c];
        if (cc.ops == 0) continue;
        const uint64_t value = k == 0 ? cc.ops : k == 1 ? cc.bytes : cc.errors;
        out += fmt::format("nodecomm_{}{{{},collective=\"{}\"}} {}\n", per_collective[k].first,
                           labels(s), collective(c), value);
      }
    }
  }
  family("op_latency_seconds", "histogram",
         "First submission to completion, per collective (log2 microsecond buckets)");
  for (const Snapshot& s : snapshots) {
    for (uint32_t c = 0; c < proto::kCounterCollectives; ++c) {
      const proto::CollectiveCounters& cc = s.collectives[c];
      if (cc.ops == 0) continue;
      const std::string l = fmt::format("{},collective=\"{}\"", labels(s), collective(c));
      uint64_t cumulative = 0;
      for (uint32_t b = 0; b + 1 < proto::kLatencyBuckets; ++b) {
        cumulative += cc.latency_buckets[b];
        out +=
            fmt::format("nodecomm_op_latency_seconds_bucket{{{},le=\"{}\"}} {}\n", l,
                        static_cast<double>(proto::latency_bucket_limit_us(b)) / 1e6, cumulative);
      }
      cumulative += cc.latency_buckets[proto::kLatencyBuckets - 1];
      out +=
          fmt::format("nodecomm_op_latency_seconds_bucket{{{},le=\"+Inf\"}} {}\n", l, cumulative);
      out += fmt::format("nodecomm_op_latency_seconds_sum{{{}}} {:.9f}\n", l,
                         static_cast<double>(cc.latency_sum_ns) / 1e9);
      out += fmt::format("nodecomm_op_latency_seconds_count{{{}}} {}\n", l, cumulative);
    }
  }
  family("setting", "gauge", "Numeric runtime settings (bytes, microseconds, seconds)");
  for (const Snapshot& s : snapshots) {
    for (uint32_t i = 0; i < s.params.count; ++i) {
      const proto::ParamEntry& e = s.params.entries[i];
      if (e.number < 0) continue;
      out += fmt::format("nodecomm_setting{{{},key=\"{}\"}} {}\n", labels(s),
                         ipc::printable_text(e.key), e.number);
    }
  }
  return out;
}

Json jobs_json(const Snapshot& s) {
  Json list = Json::array();
  for (uint32_t i = 0; i < s.jobs.count; ++i) list.push_back(job_json(s, s.jobs.slots[i]));
  return {{"instance", s.instance()}, {"total", s.jobs.total}, {"jobs", list}};
}

std::string jobs_text(const Snapshot& s) {
  if (s.jobs.total == 0) return "no jobs\n";
  std::string out =
      fmt::format("{:<16} {:<10} {:>6} {:>7} {:>7} {:>6} {:>10} {:>10} {:>9}\n", "JOB", "STATE",
                  "UID", "LOCAL", "NODE", "WORLD", "POSTED", "COMPLETED", "AGE");
  for (uint32_t i = 0; i < s.jobs.count; ++i) {
    const proto::JobSlot& j = s.jobs.slots[i];
    out += fmt::format(
        "{:<16} {:<10} {:>6} {:>7} {:>7} {:>6} {:>10} {:>10} {:>9}\n", ipc::printable_text(j.name),
        job_state(j), owner(j), fmt::format("{}/{}", j.attached, j.local_size),
        fmt::format("{}/{}", j.node_index, j.node_count), j.world_size, j.ops_posted,
        j.ops_completed, human_duration(seconds_between(s.now_realtime_ns, j.started_realtime_ns)));
  }
  if (s.jobs.total > s.jobs.count) {
    out += fmt::format("... and {} more (the oldest {} are listed)\n", s.jobs.total - s.jobs.count,
                       s.jobs.count);
  }
  return out;
}

Json chrome_trace(const TraceData& trace) {
  const proto::TraceHeader& h = trace.header;
  const uint64_t origin = h.start_monotonic_ns;
  const uint32_t pid = h.node_index;
  Json events = Json::array();
  const std::string instance = ipc::printable_text(h.instance);
  events.push_back(
      {{"name", "process_name"},
       {"ph", "M"},
       {"pid", pid},
       {"args",
        {{"name", fmt::format("nodecommd {} (node {}, pid {})", instance, h.node_index, h.pid)}}}});
  // Overlapping operations go on separate rows ("lanes"), so every row nests properly:
  // operations on tids 1.., transfers on tids 1001...
  std::vector<const proto::TraceEvent*> order;
  for (const proto::TraceEvent& e : trace.events) order.push_back(&e);
  std::stable_sort(order.begin(), order.end(),
                   [](const auto* a, const auto* b) { return a->begin_ns < b->begin_ns; });
  std::vector<uint64_t> op_lanes;
  std::vector<uint64_t> unit_lanes;
  std::map<uint32_t, std::string> lane_names;
  static constexpr const char* kKinds[] = {"operation", "chunk", "fused", "whole"};
  for (const proto::TraceEvent* e : order) {
    const bool op = e->kind == static_cast<uint8_t>(proto::TraceKind::kOperation);
    std::vector<uint64_t>& lanes = op ? op_lanes : unit_lanes;
    size_t lane = 0;
    while (lane < lanes.size() && lanes[lane] > e->begin_ns) ++lane;
    if (lane == lanes.size()) lanes.push_back(0);
    lanes[lane] = std::max(e->end_ns, e->begin_ns + 1);
    const uint32_t tid = static_cast<uint32_t>(lane) + (op ? 1 : 1001);
    lane_names.emplace(tid, fmt::format("{} {}", op ? "operations" : "transfers", lane));
    const double ts = e->begin_ns >= origin ? static_cast<double>(e->begin_ns - origin) / 1e3
                                            : -static_cast<double>(origin - e->begin_ns) / 1e3;
    const double dur =
        e->end_ns > e->begin_ns ? static_cast<double>(e->end_ns - e->begin_ns) / 1e3 : 0.0;
    const std::string name = ipc::printable_text(e->name);
    const std::string title =
        op ? fmt::format("{} {}", collective(e->collective), name.empty() ? "-" : name)
           : fmt::format("{} {}{}", kKinds[std::min<uint8_t>(e->kind, 3)],
                         collective(e->collective), e->ops > 1 ? fmt::format(" x{}", e->ops) : "");
    Json args = {{"job", trace.job_name(e->job)},
                 {"comm", e->comm},
                 {"seq", e->seq},
                 {"bytes", e->bytes},
                 {"name", name}};
    if (op) {
      args["status"] = std::string(proto::status_name(static_cast<proto::Status>(e->status)));
    } else {
      args["first_element"] = e->first;
      args["operations"] = e->ops;
    }
    events.push_back({{"name", title},
                      {"cat", kKinds[std::min<uint8_t>(e->kind, 3)]},
                      {"ph", "X"},
                      {"ts", ts},
                      {"dur", dur},
                      {"pid", pid},
                      {"tid", tid},
                      {"args", args}});
  }
  for (const auto& [tid, name] : lane_names) {
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", pid},
                      {"tid", tid},
                      {"args", {{"name", name}}}});
  }
  return {{"traceEvents", events},
          {"displayTimeUnit", "ms"},
          {"otherData",
           {{"instance", instance},
            {"node_index", h.node_index},
            {"daemon_pid", h.pid},
            {"start_realtime_ns", h.start_realtime_ns},
            {"events", trace.events.size()},
            {"dropped", h.dropped}}}};
}

}  // namespace nodecomm::ctl
