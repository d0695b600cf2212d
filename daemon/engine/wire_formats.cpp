#include "engine/wire_formats.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace nodecomm::daemon {

AgreedAlgorithm agreed_algorithm(const AlgorithmTuning& tuning) {
  return AgreedAlgorithm{tuning.chunk_bytes,
                         tuning.small_bytes,
                         static_cast<uint32_t>(tuning.allreduce),
                         tuning.endpoints,
                         static_cast<uint32_t>(tuning.collectives),
                         0};
}

AlgorithmTuning with_agreed_algorithm(AlgorithmTuning local, const AgreedAlgorithm& agreed) {
  if (agreed.chunk_bytes == 0 || agreed.endpoints == 0 ||
      agreed.allreduce > static_cast<uint32_t>(AllreduceAlgorithmKind::kMpi) ||
      agreed.collectives > static_cast<uint32_t>(CollectiveAlgorithmKind::kMpi)) {
    return local;  // nothing (valid) was sent
  }
  local.chunk_bytes = agreed.chunk_bytes;
  local.small_bytes = agreed.small_bytes;
  local.allreduce = static_cast<AllreduceAlgorithmKind>(agreed.allreduce);
  local.endpoints = agreed.endpoints;
  local.collectives = static_cast<CollectiveAlgorithmKind>(agreed.collectives);
  return local;
}

size_t round_record_bytes(const RoundRecord& r) {
  size_t end = std::min<size_t>(r.announced, kAnnouncePerRound) * sizeof(OpSummary);
  for (uint32_t k = 0; k < std::min<uint32_t>(r.eager, kEagerOps); ++k) {
    end = std::max<size_t>(end, size_t{r.eager_ops[k].offset} + r.eager_ops[k].bytes);
  }
  return offsetof(RoundRecord, tail) + std::min(end, sizeof(r.tail));
}

OpSummary announcement(const RoundRecord& r, size_t k) {
  OpSummary summary;
  std::memcpy(&summary, r.tail + k * sizeof(OpSummary), sizeof(summary));
  return summary;
}

void add_announcement(RoundRecord& r, const OpSummary& summary) {
  std::memcpy(r.tail + size_t{r.announced} * sizeof(OpSummary), &summary, sizeof(summary));
  ++r.announced;
}

std::string round_record_problem(const RoundRecord& r) {
  if (r.announced > kAnnouncePerRound) {
    return fmt::format("{} announcements, at most {}", r.announced, kAnnouncePerRound);
  }
  if (r.eager > kEagerOps)
    return fmt::format("{} eager operations, at most {}", r.eager, kEagerOps);
  const size_t data = size_t{r.announced} * sizeof(OpSummary);
  for (uint32_t k = 0; k < r.eager; ++k) {
    const EagerEntry& e = r.eager_ops[k];
    if (e.offset < data || e.offset % 8 != 0 || e.bytes > kEagerBytes ||
        size_t{e.offset} + e.bytes > sizeof(r.tail)) {
      return fmt::format("eager seq {}: {} bytes at offset {}, past the record's data area", e.seq,
                         e.bytes, e.offset);
    }
  }
  return {};
}

const EagerEntry* find_eager(const RoundRecord& r, uint64_t seq) {
  for (uint32_t k = 0; k < std::min<uint32_t>(r.eager, kEagerOps); ++k) {
    if (r.eager_ops[k].seq == seq) return &r.eager_ops[k];
  }
  return nullptr;
}

}  // namespace nodecomm::daemon
