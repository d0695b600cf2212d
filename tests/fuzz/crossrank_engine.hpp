// The cross-rank fuzzer's run of one operation through a real daemon::Engine: all ranks on one
// node, each a real ClientSession with its own segment, the loopback transport, and the
// engine's own staging pool (shared by every input, as the daemon's is shared by every job).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "nodecomm/proto/abi.hpp"

namespace nodecomm::fuzz {

inline constexpr uint64_t kEngineArena = 4096;  // every rank's arena

struct EngineRank {
  proto::OpDescriptor d;
  std::vector<uint8_t> arena;  // kEngineArena bytes: the client's arena before the operation
};

struct EngineOutcome {
  std::vector<proto::Completion> completions;  // by rank
  std::vector<std::vector<uint8_t>> arenas;    // by rank, after the operation
};

// Submits every rank's descriptor through its submission ring and polls the engine until every
// rank has its completion. `fail` reports a broken oracle (never returns).
EngineOutcome run_on_engine(const std::vector<EngineRank>& ranks,
                            const std::function<void(const std::string&, int)>& fail);

}  // namespace nodecomm::fuzz
