// The byte encoding of the cross-rank fuzzer's inputs (crossrank_fuzz.cpp), shared with the
// seed corpus generator (make_corpus.cpp): one operation as every rank of a communicator
// submitted it, and which node each rank lives on.
//
//   u8 size        ranks in the communicator: 1 + size % kMaxRanks
//   u8 nodes       1 + nodes % size daemons (nodes left without a rank are dropped)
//   u8 node_of[kMaxRanks]   node of each rank: node_of[r] % nodes
//   per rank r < size:
//     OpDescriptor (112 bytes; seq and comm_id are forced to 1 and 0: ring order and
//                   communicator lookup are the decoder fuzzer's business)
//     u64 x aux_entries(collective of this rank, size): its count arrays, which the harness
//                   writes into the rank's arena (kEngineArena bytes, crossrank_engine.hpp,
//                   otherwise filled with a pattern of the rank's own) at aux_offset when
//                   they fit there
// Past the end every byte reads as zero (Input in fuzz_input.hpp).
#pragma once

#include <cstdint>

namespace nodecomm::fuzz {

inline constexpr uint32_t kMaxRanks = 4;

struct CrossRankPrefix {
  uint8_t size;
  uint8_t nodes;
  uint8_t node_of[kMaxRanks];
};
static_assert(sizeof(CrossRankPrefix) == 2 + kMaxRanks);

}  // namespace nodecomm::fuzz
