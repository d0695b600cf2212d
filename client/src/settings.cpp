// What nc_init needs before it can attach: the caller's options, else the environment the
// launcher (nodecomm-launch, torchrun, Slurm) set, each checked with a message naming the
// variable and the value it refused.
#include <fmt/format.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "context.hpp"
#include "nodecomm/ipc/byte_size.hpp"
#include "nodecomm/ipc/runtime_paths.hpp"
#include "nodecomm/proto/control.hpp"

namespace nodecomm::client {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

bool parse_u32(const char* text, uint32_t& out) {
  char* end = nullptr;
  errno = 0;
  const unsigned long v = std::strtoul(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v > UINT32_MAX) return false;
  out = static_cast<uint32_t>(v);
  return true;
}

// A size in the one grammar of ipc/byte_size.hpp ("64M", "64MiB", "4096"); `why` says what is
// wrong otherwise, overflow included.
bool parse_size(const char* text, uint64_t& out, std::string& why) {
  const std::optional<uint64_t> v = ipc::parse_byte_size(text, why);
  if (v) out = *v;
  return v.has_value();
}

// The job's scheduling overrides, sent to the daemon with the hello.
Result resolve_tuning(proto::JobTuning& t) {
  if (const char* v = env("NODECOMM_PRIORITY_POLICY")) {
    t.priority_policy = -1;
    for (int p = 0; p < static_cast<int>(proto::PriorityPolicy::kCount); ++p) {
      if (proto::priority_policy_name(static_cast<proto::PriorityPolicy>(p)) == v) {
        t.priority_policy = p;
      }
    }
    if (t.priority_policy < 0) {
      return fail(NC_ERR_INVALID_ARGUMENT,
                  fmt::format("NODECOMM_PRIORITY_POLICY '{}' is not none, direct or lifo", v));
    }
  }
  if (const char* v = env("NODECOMM_FUSION")) {
    const std::string text = v;
    if (text == "on" || text == "1") {
      t.fusion = 1;
    } else if (text == "off" || text == "0") {
      t.fusion = 0;
    } else {
      return fail(NC_ERR_INVALID_ARGUMENT, fmt::format("NODECOMM_FUSION '{}' is not on or off", v));
    }
  }
  uint64_t value = 0;
  std::string why;
  if (const char* v = env("NODECOMM_FUSION_THRESHOLD")) {
    if (!parse_size(v, value, why) || value > (uint64_t{1} << 40)) {
      return fail(NC_ERR_INVALID_ARGUMENT,
                  fmt::format("NODECOMM_FUSION_THRESHOLD '{}' is not a size like 64M from 0 to "
                              "1024G{}{}",
                              v, why.empty() ? "" : ": ", why));
    }
    t.fusion_threshold_bytes = static_cast<int64_t>(value);
  }
  if (const char* v = env("NODECOMM_FUSION_CYCLE_US")) {
    // Microseconds, read with the size grammar as they always were (so "1K" is 1024 us).
    if (!parse_size(v, value, why) || value > 10'000'000) {
      return fail(NC_ERR_INVALID_ARGUMENT,
                  fmt::format("NODECOMM_FUSION_CYCLE_US '{}' is not 0..10000000", v));
    }
    t.fusion_cycle_us = static_cast<int64_t>(value);
  }
  if (const char* v = env("NODECOMM_JOB_WEIGHT")) {
    uint32_t weight = 0;
    if (!parse_u32(v, weight) || weight == 0 || weight > proto::kMaxJobWeight) {
      return fail(NC_ERR_INVALID_ARGUMENT,
                  fmt::format("NODECOMM_JOB_WEIGHT '{}' is not 1..{}", v, proto::kMaxJobWeight));
    }
    t.weight = static_cast<int32_t>(weight);
  }
  return Result::ok();
}

}  // namespace

Result resolve_settings(const nc_init_options_t* opts, Settings& s) {
  nc_init_options_t none;
  nc_init_options_default(&none);
  const nc_init_options_t& o = opts != nullptr ? *opts : none;

  if (o.runtime_dir != nullptr && *o.runtime_dir != '\0') {
    s.runtime_dir = o.runtime_dir;
  } else if (const char* dir = env("NODECOMM_RUNTIME_DIR")) {
    s.runtime_dir = dir;
  } else {
    const char* instance =
        o.instance != nullptr && *o.instance != '\0' ? o.instance : env("NODECOMM_INSTANCE");
    s.runtime_dir = ipc::instance_runtime_dir(instance != nullptr ? instance : "default");
  }
  const char* job = o.job != nullptr && *o.job != '\0' ? o.job : env("NODECOMM_JOB");
  s.job = job != nullptr ? job : "default";
  if (s.job.size() >= proto::kJobNameBytes) {
    return fail(NC_ERR_INVALID_ARGUMENT, fmt::format("job name '{}' is longer than {} bytes", s.job,
                                                     proto::kJobNameBytes - 1));
  }
  if (o.local_rank >= 0) {
    s.local_rank = static_cast<uint32_t>(o.local_rank);
  } else if (const char* v = env("NODECOMM_LOCAL_RANK");
             v == nullptr || !parse_u32(v, s.local_rank)) {
    return fail(NC_ERR_INVALID_ARGUMENT,
                fmt::format("NODECOMM_LOCAL_RANK is {}; set it to this process's rank among the "
                            "job's ranks on this node (nodecomm-launch does)",
                            v == nullptr ? "not set" : fmt::format("'{}', not a number", v)));
  }
  if (o.local_size > 0) {
    s.local_size = static_cast<uint32_t>(o.local_size);
  } else if (const char* v = env("NODECOMM_LOCAL_SIZE");
             v == nullptr || !parse_u32(v, s.local_size) || s.local_size == 0) {
    return fail(NC_ERR_INVALID_ARGUMENT,
                fmt::format("NODECOMM_LOCAL_SIZE is {}; set it to the number of the job's ranks on "
                            "this node",
                            v == nullptr ? "not set" : fmt::format("'{}'", v)));
  }
  if (s.local_rank >= s.local_size) {
    return fail(NC_ERR_INVALID_ARGUMENT, fmt::format("local rank {} is not below local size {}",
                                                     s.local_rank, s.local_size));
  }
  // The job's nodes, for a service daemon that forms the job's group on demand; daemons
  // launched with the job know them without.
  if (const char* v = env("NODECOMM_NODES")) {
    if (!parse_u32(v, s.node_count) || s.node_count == 0 || s.node_count > proto::kMaxJobNodes) {
      return fail(NC_ERR_INVALID_ARGUMENT,
                  fmt::format("NODECOMM_NODES is '{}'; set it to the number of nodes the job "
                              "runs on (1..{})",
                              v, proto::kMaxJobNodes));
    }
    const char* node = env("NODECOMM_NODE");
    if (node == nullptr || !parse_u32(node, s.node_index) || s.node_index >= s.node_count) {
      return fail(NC_ERR_INVALID_ARGUMENT,
                  fmt::format("NODECOMM_NODE is {}; with NODECOMM_NODES={} set it to this node's "
                              "index in the job, 0..{} (torchrun: $GROUP_RANK, Slurm: "
                              "$SLURM_NODEID)",
                              node == nullptr ? "not set" : fmt::format("'{}'", node), s.node_count,
                              s.node_count - 1));
    }
  }
  if (o.arena_bytes > 0) {
    s.arena_bytes = o.arena_bytes;
  } else if (std::string why; const char* v = env("NODECOMM_ARENA_BYTES")) {
    if (!parse_size(v, s.arena_bytes, why)) {
      return fail(NC_ERR_INVALID_ARGUMENT,
                  fmt::format("NODECOMM_ARENA_BYTES '{}' is not a size like 64M: {}", v, why));
    }
  }
  if (o.timeout_sec > 0) {
    s.timeout_sec = o.timeout_sec;
  } else if (const char* v = env("NODECOMM_TIMEOUT_SEC")) {
    char* end = nullptr;
    const double t = std::strtod(v, &end);
    if (end == v || *end != '\0' || t < 0) {
      return fail(NC_ERR_INVALID_ARGUMENT,
                  fmt::format("NODECOMM_TIMEOUT_SEC '{}' is not a number", v));
    }
    s.timeout_sec = t == 0 ? 1e12 : t;
  }
  return resolve_tuning(s.tuning);
}

}  // namespace nodecomm::client
