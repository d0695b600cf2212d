#include "schedule.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
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

size_t CommSchedule::window(const SchedulerTuning& t) const {
  if (t.window_bytes != 0) return t.window_bytes;
  const double bytes = rate * t.target_delay_us / 1e6;
  return std::clamp(static_cast<size_t>(bytes), kMinWindowBytes, kMaxWindowBytes);
}

size_t CommSchedule::chunk(const SchedulerTuning& t) const {
  if (t.chunk_bytes != 0) return t.chunk_bytes;
  return std::clamp(window(t) / 4, kMinChunkBytes, kMaxChunkBytes);
}

void CommSchedule::record_completion(size_t bytes, uint64_t now) {
  constexpr uint64_t kIntervalNs = 5'000'000;
  constexpr uint64_t kIdleGapNs = 20'000'000;
  // After a pause the link was idle, not slow: start a new interval.
  if (now - last_completion_ns > kIdleGapNs) {
    interval_start_ns = now;
    interval_bytes = 0;
  }
  last_completion_ns = now;
  interval_bytes += bytes;
  const uint64_t elapsed = now - interval_start_ns;
  if (elapsed < kIntervalNs) return;
  const double sample = static_cast<double>(interval_bytes) * 1e9 / static_cast<double>(elapsed);
  // Quick to rise (a small window under-measures a fast link), slow to fall.
  rate = rate == 0 || sample > rate ? sample : 0.8 * rate + 0.2 * sample;
  interval_start_ns = now;
  interval_bytes = 0;
}

}  // namespace nodecomm::daemon
