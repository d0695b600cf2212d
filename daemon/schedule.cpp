#include "schedule.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace nodecomm::daemon {

proto::PriorityPolicy parse_priority_policy(const std::string& text) {
  for (int p = 0; p < static_cast<int>(proto::PriorityPolicy::kCount); ++p) {
    const auto policy = static_cast<proto::PriorityPolicy>(p);
    if (proto::priority_policy_name(policy) == text) return policy;
  }
  throw std::invalid_argument(
      fmt::format("unknown priority policy '{}' (none, direct or lifo)", text));
}

SchedulerTuning with_job_overrides(SchedulerTuning tuning, const proto::JobTuning& job) {
  if (job.priority_policy >= 0 &&
      job.priority_policy < static_cast<int32_t>(proto::PriorityPolicy::kCount)) {
    tuning.policy = static_cast<proto::PriorityPolicy>(job.priority_policy);
  }
  if (job.fusion == 0 || job.fusion == 1) tuning.fusion = job.fusion == 1;
  if (job.fusion_threshold_bytes >= 0) {
    tuning.fusion_threshold_bytes = static_cast<size_t>(job.fusion_threshold_bytes);
  }
  if (job.fusion_cycle_us >= 0 && job.fusion_cycle_us <= 10'000'000) {
    tuning.fusion_cycle_us = static_cast<uint32_t>(job.fusion_cycle_us);
  }
  return tuning;
}

}  // namespace nodecomm::daemon
