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
                         static_cast<uint32_t>(tuning.latency_bytes)};
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
  local.latency_bytes = agreed.latency_bytes;
  return local;
}

}  // namespace nodecomm::daemon
