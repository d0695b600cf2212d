#include "config/tuning.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <stdexcept>

namespace nodecomm::daemon {

std::string algorithm_name(AllreduceAlgorithmKind kind) {
  switch (kind) {
    case AllreduceAlgorithmKind::kAuto:
      return "auto";
    case AllreduceAlgorithmKind::kRing:
      return "ring";
    case AllreduceAlgorithmKind::kRecursiveDoubling:
      return "rd";
    case AllreduceAlgorithmKind::kMpi:
      return "mpi";
  }
  return "?";
}

AllreduceAlgorithmKind parse_algorithm(const std::string& text) {
  if (text == "auto") return AllreduceAlgorithmKind::kAuto;
  if (text == "ring") return AllreduceAlgorithmKind::kRing;
  if (text == "rd" || text == "recursive-doubling") {
    return AllreduceAlgorithmKind::kRecursiveDoubling;
  }
  if (text == "mpi") return AllreduceAlgorithmKind::kMpi;
  throw std::invalid_argument(
      fmt::format("unknown allreduce algorithm '{}' (auto, ring, rd or mpi)", text));
}

std::string collective_algorithm_name(CollectiveAlgorithmKind kind) {
  switch (kind) {
    case CollectiveAlgorithmKind::kAuto:
      return "auto";
    case CollectiveAlgorithmKind::kPipelined:
      return "pipelined";
    case CollectiveAlgorithmKind::kMpi:
      return "mpi";
  }
  return "?";
}

CollectiveAlgorithmKind parse_collective_algorithm(const std::string& text) {
  if (text == "auto") return CollectiveAlgorithmKind::kAuto;
  if (text == "pipelined") return CollectiveAlgorithmKind::kPipelined;
  if (text == "mpi") return CollectiveAlgorithmKind::kMpi;
  throw std::invalid_argument(
      fmt::format("unknown collective algorithm '{}' (auto, pipelined or mpi)", text));
}

size_t rd_switch_bytes(uint32_t nodes, size_t latency_bytes) {
  if (nodes <= 2) return 0;
  const uint32_t p = std::bit_floor(nodes);
  const uint32_t log_p = std::bit_width(p) - 1;
  const bool extra = nodes != p;
  // Recursive doubling beyond a power of two p folds the extra nodes in and the result back
  // out (two more steps, one more full-size message on the busiest link: recursive_doubling.cpp).
  const double rd_steps = log_p + (extra ? 2.0 : 0.0);
  const double rd_bytes = log_p + (extra ? 1.0 : 0.0);
  const double ring_steps = 2.0 * (nodes - 1);
  const double ring_bytes = 2.0 * (nodes - 1) / nodes;
  return static_cast<size_t>(std::floor((ring_steps - rd_steps) / (rd_bytes - ring_bytes) *
                                        static_cast<double>(latency_bytes)));
}

size_t allreduce_switch_bytes(const AlgorithmTuning& tuning, uint32_t nodes) {
  if (tuning.small_bytes != kAutoSmallBytes) return tuning.small_bytes;
  return std::min(rd_switch_bytes(nodes, tuning.latency_bytes), kMaxAutoSwitchBytes);
}

size_t collective_switch_bytes(const AlgorithmTuning& tuning) {
  return tuning.small_bytes == kAutoSmallBytes ? kAutoCollectiveSmallBytes : tuning.small_bytes;
}

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
