#include "config/tuning.hpp"

#include <fmt/format.h>

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
