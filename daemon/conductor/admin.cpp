#include "conductor/admin.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <grp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "conductor/daemon.hpp"
#include "config/log.hpp"
#include "nodecomm/ipc/byte_size.hpp"
#include "nodecomm/ipc/fixed_text.hpp"
#include "nodecomm/ipc/printable.hpp"
#include "nodecomm/ipc/runtime_paths.hpp"
#include "observe/counters.hpp"
#include "session/client_session.hpp"

namespace nodecomm::daemon {

namespace {

// Settings that are fixed once the daemon runs: the segment layout, the socket, the transport
// and the lanes opened at start depend on them.
const std::vector<std::string> kRestartOnly = {
    "instance",      "runtime-dir",   "cores",        "transport",
    "lanes",         "default-arena", "max-arena",    "max-clients",
    "ring-capacity", "staging-cache", "max-staging",  "max-staging-per-job",
    "log-format",    "allow-uids",    "allow-groups", "admin-group"};

struct Invalid : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

uint64_t parse_size(const std::string& key, const std::string& value, uint64_t min, uint64_t max) {
  const auto bad = [&] {
    return Invalid(fmt::format(
        "{}: bad value '{}': expected a size in bytes with an optional K, M, G or T suffix "
        "(powers of 1024) from {} to {}",
        key, value, ipc::format_byte_size(min), ipc::format_byte_size(max)));
  };
  const std::optional<uint64_t> bytes = ipc::parse_byte_size(value);
  if (!bytes || *bytes < min || *bytes > max) throw bad();
  return *bytes;
}

uint32_t parse_uint(const std::string& key, const std::string& value, uint32_t min, uint32_t max) {
  size_t used = 0;
  unsigned long long n = 0;
  bool ok = !value.empty() && std::isdigit(static_cast<unsigned char>(value[0]));
  try {
    n = ok ? std::stoull(value, &used) : 0;
  } catch (const std::exception&) {
    ok = false;
  }
  if (!ok || used != value.size() || n < min || n > max) {
    throw Invalid(
        fmt::format("{}: bad value '{}': expected an integer from {} to {}", key, value, min, max));
  }
  return static_cast<uint32_t>(n);
}

void check_choice(const std::string& key, const std::string& value,
                  const std::vector<std::string>& choices) {
  if (std::find(choices.begin(), choices.end(), value) == choices.end()) {
    throw Invalid(fmt::format("{}: bad value '{}': expected one of {}", key, value,
                              fmt::join(choices, ", ")));
  }
}

}  // namespace

const std::vector<std::string>& settable_keys() {
  static const std::vector<std::string> keys = {"log-level",
                                                "allreduce-algorithm",
                                                "collective-algorithm",
                                                "small-bytes",
                                                "latency-bytes",
                                                "chunk-size",
                                                "pipeline-depth",
                                                "endpoints",
                                                "priority-policy",
                                                "fusion",
                                                "fusion-threshold",
                                                "fusion-cycle-us",
                                                "sched-chunk-size",
                                                "sched-window",
                                                "sched-target-us",
                                                "sched-hold-us",
                                                "sched-hold-max-nodes",
                                                "sched-hold-stream-us",
                                                "sched-urgent-target-us",
                                                "sched-eager-bytes",
                                                "sched-gather-nodes",
                                                "idle",
                                                "net-park-min-us",
                                                "net-park-max-us",
                                                "stall-sec",
                                                "op-timeout-sec"};
  return keys;
}

bool may_administer(int fd, const ipc::PeerCredentials& cred, const std::string& admin_group,
                    std::string& why) {
  if (cred.uid == 0 || cred.uid == ::geteuid()) return true;
  if (!admin_group.empty()) {
    const group* named = ::getgrnam(admin_group.c_str());
    for (const gid_t g : peer_groups(fd, cred)) {
      if (admin_group == std::to_string(g) || (named != nullptr && named->gr_gid == g)) {
        return true;
      }
    }
  }
  why = fmt::format(
      "permission denied: uid {} (pid {}) may not administer this daemon; allowed are root, "
      "the daemon's uid {}{}",
      cred.uid, cred.pid, ::geteuid(),
      admin_group.empty() ? " (no admin-group is configured)"
                          : fmt::format(" and members of admin-group '{}'", admin_group));
  return false;
}

std::string Daemon::apply_setting(const std::string& key, const std::string& value) {
  const auto& keys = settable_keys();
  if (std::find(kRestartOnly.begin(), kRestartOnly.end(), key) != kRestartOnly.end()) {
    throw Invalid(
        fmt::format("{} cannot change at run time: it needs a restart of nodecommd (set it in the "
                    "configuration file, the environment or a flag)",
                    key));
  }
  if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
    throw Invalid(
        fmt::format("unknown setting '{}'; settable at run time: {}", key, fmt::join(keys, ", ")));
  }
  std::string note;
  // The inter-node algorithm: see AgreedAlgorithm. Outside a multi-node job it applies at
  // once; inside one from the next scheduling round, with node 0's value.
  const auto apply_algorithm = [&] {
    for (auto& [name, served] : jobs_) {
      Engine& engine = served->engine();
      const Job& job = served->job();
      engine.set_algorithm_tuning(config_.tuning);
      const bool multi_node = job.node_count > 1 && job.state == Job::State::kRunning;
      if (!multi_node) {
        engine.set_algorithm_in_effect(config_.tuning);
        continue;
      }
      if (!with_job_overrides(engine.scheduler_tuning(), job.requested).negotiated()) {
        note += fmt::format(
            "; multi-node job '{}' does not negotiate (priority-policy none and fusion off), so "
            "it keeps the old value until it ends",
            ipc::printable(name));
      } else if (job.node_index != 0) {
        note += fmt::format(
            "; this is node {} of job '{}': a multi-node job runs with node 0's value, so set it "
            "on node 0 (or on every node)",
            job.node_index, ipc::printable(name));
      } else {
        note += fmt::format("; the daemons of job '{}' adopt it at their next scheduling round",
                            ipc::printable(name));
      }
    }
  };
  const auto apply_sched = [&] {
    for (auto& [name, served] : jobs_) served->engine().set_scheduler_tuning(config_.sched);
  };
  std::string old;
  if (key == "log-level") {
    check_choice(key, value, {"error", "warn", "info", "debug"});
    static constexpr const char* kLevels[] = {"error", "warn", "info", "debug"};
    old = kLevels[static_cast<int>(config_.log_level)];
    for (int i = 0; i < 4; ++i) {
      if (value == kLevels[i]) config_.log_level = static_cast<LogLevel>(i);
    }
    Log::get().set_level(config_.log_level);
  } else if (key == "allreduce-algorithm") {
    check_choice(key, value, {"auto", "ring", "rd", "recursive-doubling", "mpi"});
    old = algorithm_name(config_.tuning.allreduce);
    config_.tuning.allreduce = parse_algorithm(value);
    apply_algorithm();
  } else if (key == "collective-algorithm") {
    check_choice(key, value, {"auto", "pipelined", "mpi"});
    old = collective_algorithm_name(config_.tuning.collectives);
    config_.tuning.collectives = parse_collective_algorithm(value);
    apply_algorithm();
  } else if (key == "small-bytes") {
    old = config_.tuning.small_bytes == kAutoSmallBytes
              ? "auto"
              : ipc::format_byte_size(config_.tuning.small_bytes);
    config_.tuning.small_bytes =
        value == "auto" ? kAutoSmallBytes : parse_size(key, value, 0, uint64_t{1} << 40);
    apply_algorithm();
  } else if (key == "latency-bytes") {
    old = ipc::format_byte_size(config_.tuning.latency_bytes);
    config_.tuning.latency_bytes = parse_size(key, value, 0, (uint64_t{1} << 32) - 1);
    apply_algorithm();
  } else if (key == "chunk-size") {
    old = ipc::format_byte_size(config_.tuning.chunk_bytes);
    config_.tuning.chunk_bytes = parse_size(key, value, 1, uint64_t{1} << 30);
    apply_algorithm();
  } else if (key == "endpoints") {
    const uint32_t n = parse_uint(key, value, 1, 64);
    if (n > transport_.lanes()) {
      throw Invalid(fmt::format(
          "endpoints: bad value '{}': at most the {} lane(s) this daemon opened at start "
          "(lanes); more lanes need a restart",
          value, transport_.lanes()));
    }
    old = std::to_string(config_.tuning.endpoints);
    config_.tuning.endpoints = n;
    apply_algorithm();
  } else if (key == "pipeline-depth") {
    old = std::to_string(config_.tuning.pipeline_depth);
    config_.tuning.pipeline_depth = parse_uint(key, value, 1, 1024);
    for (auto& [name, served] : jobs_) {
      Engine& engine = served->engine();
      engine.set_algorithm_tuning(config_.tuning);
      AlgorithmTuning now = engine.algorithm_in_effect();  // slices in flight here: local, at once
      now.pipeline_depth = config_.tuning.pipeline_depth;
      engine.set_algorithm_in_effect(now);
    }
  } else if (key == "priority-policy") {
    check_choice(key, value, {"none", "direct", "lifo"});
    old = std::string(proto::priority_policy_name(config_.sched.policy));
    config_.sched.policy = parse_priority_policy(value);
    apply_sched();
  } else if (key == "fusion") {
    check_choice(key, value, {"on", "off"});
    old = config_.sched.fusion ? "on" : "off";
    config_.sched.fusion = value == "on";
    apply_sched();
  } else if (key == "fusion-threshold") {
    old = ipc::format_byte_size(config_.sched.fusion_threshold_bytes);
    config_.sched.fusion_threshold_bytes = parse_size(key, value, 0, uint64_t{1} << 40);
    apply_sched();
  } else if (key == "fusion-cycle-us") {
    old = std::to_string(config_.sched.fusion_cycle_us);
    config_.sched.fusion_cycle_us = parse_uint(key, value, 0, 10'000'000);
    apply_sched();
  } else if (key == "sched-chunk-size" || key == "sched-window") {
    size_t& field =
        key == "sched-chunk-size" ? config_.sched.chunk_bytes : config_.sched.window_bytes;
    old = field == 0 ? "auto" : ipc::format_byte_size(field);
    field = value == "auto" ? 0 : parse_size(key + " (or auto)", value, 1, uint64_t{1} << 40);
    apply_sched();
  } else if (key == "sched-target-us") {
    old = std::to_string(config_.sched.target_delay_us);
    config_.sched.target_delay_us = parse_uint(key, value, 100, 1'000'000);
    apply_sched();
  } else if (key == "sched-hold-us") {
    old = std::to_string(config_.sched.hold_us);
    config_.sched.hold_us = parse_uint(key, value, 0, 10'000'000);
    apply_sched();
  } else if (key == "sched-hold-max-nodes") {
    old = std::to_string(config_.sched.hold_max_nodes);
    config_.sched.hold_max_nodes = parse_uint(key, value, 0, 1u << 20);
    apply_sched();
  } else if (key == "sched-hold-stream-us") {
    old = std::to_string(config_.sched.hold_stream_us);
    config_.sched.hold_stream_us = parse_uint(key, value, 0, 10'000'000);
    apply_sched();
  } else if (key == "sched-urgent-target-us") {
    old = std::to_string(config_.sched.urgent_target_us);
    config_.sched.urgent_target_us = parse_uint(key, value, 0, 1'000'000);
    apply_sched();
  } else if (key == "sched-gather-nodes") {
    old = std::to_string(config_.sched.gather_nodes);
    config_.sched.gather_nodes = parse_uint(key, value, 1, 1u << 20);
    apply_sched();
  } else if (key == "sched-eager-bytes") {
    old = std::to_string(config_.sched.eager_bytes);
    config_.sched.eager_bytes = parse_uint(key, value, 0, kMaxEagerBytes);
    apply_sched();
  } else if (key == "idle") {
    check_choice(key, value, {"auto", "spin", "backoff"});
    old = config_.idle;
    config_.idle = value;
    idle_ = ipc::IdleStrategy(
        ipc::IdleConfig::for_mode(config_.idle, static_cast<unsigned>(clients_.size()) + 1));
  } else if (key == "net-park-min-us" || key == "net-park-max-us") {
    uint32_t& field = key == "net-park-min-us" ? config_.net_park_min_us : config_.net_park_max_us;
    old = std::to_string(field);
    field = parse_uint(key, value, 0, 100'000);
    network_idle_ = ipc::IdleStrategy(network_idle_config(config_));
  } else if (key == "stall-sec" || key == "op-timeout-sec") {
    uint32_t& field = key == "stall-sec" ? config_.limits.stall_sec : config_.limits.op_timeout_sec;
    old = std::to_string(field);
    field = parse_uint(key, value, 0, key == "stall-sec" ? 86'400 : 864'000);
    for (auto& [name, served] : jobs_) served->engine().set_limits(config_.limits);
  }
  counters_.publish_params(config_, true);
  return fmt::format("{} = {} (was {}){}", key, value, old, note);
}

void Daemon::on_admin(ClientSession& client, const proto::AdminRequest& request) {
  using proto::Status;
  proto::AdminReply reply{};
  reply.type = static_cast<uint32_t>(proto::ControlType::kAdminReply);
  reply.verb = request.verb;
  Status status = Status::kOk;
  std::string text;
  std::string why;
  const auto verb = static_cast<proto::AdminVerb>(request.verb);
  const char* verb_name = verb == proto::AdminVerb::kSet          ? "set"
                          : verb == proto::AdminVerb::kTraceStart ? "trace start"
                          : verb == proto::AdminVerb::kTraceStop  ? "trace stop"
                                                                  : "?";
  if (request.magic != proto::kControlMagic || request.version != proto::kAdminProtocolVersion) {
    status = Status::kProtocol;
    text = fmt::format("nodecommctl speaks admin protocol version {}, nodecommd speaks {}",
                       request.version, proto::kAdminProtocolVersion);
  } else if (!ipc::is_terminated(request.key) || !ipc::is_terminated(request.value)) {
    status = Status::kInvalidArgument;
    text = "key or value is unterminated";
  } else if (!may_administer(client.fd(), client.cred(), config_.admin_group, why)) {
    status = Status::kPermission;
    text = why;
  } else if (verb == proto::AdminVerb::kSet) {
    try {
      text = apply_setting(request.key, request.value);
    } catch (const std::exception& e) {
      status = Status::kInvalidArgument;
      text = e.what();
    }
  } else if (verb == proto::AdminVerb::kTraceStart) {
    uint64_t capacity = TraceRecorder::kDefaultEvents;
    const std::string value = request.value;
    try {
      if (!value.empty()) capacity = parse_uint("events", value, 1, TraceRecorder::kMaxEvents);
      const std::string name = ipc::trace_shm_name(config_.instance);
      const std::string error =
          counters_.active()
              ? counters_.trace().start(name, config_.instance, transport_.node_index(), capacity,
                                        reader_group_id(config_.admin_group))
              : "this daemon has no counters segment";
      if (!error.empty()) {
        status = Status::kInvalidArgument;
        text = "trace start: " + error;
      } else {
        text = fmt::format("tracing into /dev/shm{} (at most {} events)", name, capacity);
      }
    } catch (const std::exception& e) {
      status = Status::kInvalidArgument;
      text = e.what();
    }
  } else if (verb == proto::AdminVerb::kTraceStop) {
    TraceRecorder& trace = counters_.trace();
    if (!trace.recording()) {
      status = Status::kInvalidArgument;
      text = "no trace is being recorded (nodecommctl trace start first)";
    } else {
      trace.stop();
      text = fmt::format("/dev/shm{}: {} events, {} dropped", trace.shm_name(), trace.count(),
                         trace.dropped());
    }
  } else {
    status = Status::kInvalidArgument;
    text = fmt::format("unknown admin verb {}", request.verb);
  }
  reply.status = static_cast<int32_t>(status);
  ipc::copy_text(reply.message, text);
  counters_.admin_request(status != Status::kOk);
  Log::get().write(status == Status::kOk ? LogLevel::kInfo : LogLevel::kWarn,
                   "admin: uid {} (pid {}) {} {}{}: {}", client.cred().uid, client.cred().pid,
                   verb_name, ipc::bounded_text(request.key),
                   status == Status::kOk ? "" : " refused", text);
  if (ipc::send_message(client.fd(), &reply, sizeof(reply)) != ipc::IoResult::kOk) {
    drop(client, "could not be sent its admin reply");
  }
}

}  // namespace nodecomm::daemon
