// Every record the daemons of a job send each other, in one place: they cross the network
// between daemons that may have been built apart, so they are fixed-width, trivially
// copyable and checked by static_assert, like the client ABI in proto/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "config/tuning.hpp"

namespace nodecomm::daemon {

// OpSummary::flags
inline constexpr uint32_t kSummaryStagingRefused = 1u << 0;  // this node cannot stage it

// What one node's ranks submitted for one sequence number: the fields that every rank of a
// communicator must pass alike. It travels between daemons, so it is fixed-width.
struct OpSummary {
  uint64_t seq;
  uint64_t count;    // 0 for collectives whose counts differ by rank (v-collectives, split)
  uint32_t root;     // 0 for collectives without a root
  int32_t priority;  // not compared: node 0's priority orders the schedule
  uint8_t collective;
  uint8_t dtype;
  uint8_t redop;
  uint8_t compression;
  uint32_t flags;  // kSummary*
  // allgatherv/alltoallv: the node's count digest (count_agreement.hpp), not compared field
  // by field; zero otherwise. The node's totals stay home: each summary costs every scheduling
  // round 64 slots, so it carries only what the agreement needs (48 bytes, was 32).
  uint64_t counts_digest[2];
};
static_assert(sizeof(OpSummary) == 48 && std::is_trivially_copyable_v<OpSummary>);

// The inter-node algorithm settings that every daemon of a job must share: both ends of a
// ring step must cut the same slices (chunk-size), pick the same algorithm (small-bytes,
// allreduce-algorithm, collective-algorithm) and use the same lanes (endpoints). Node 0's are sent
// in every scheduling round record and applied by every daemon before it starts that round's
// transfers, so `nodecommctl set chunk-size` on node 0 changes the whole job between two
// transfers, never in the middle of one. pipeline-depth is local (slices in flight here).
struct AgreedAlgorithm {
  uint64_t chunk_bytes;  // 0: none sent (keep the local settings)
  uint64_t small_bytes;
  uint32_t allreduce;  // AllreduceAlgorithmKind
  uint32_t endpoints;
  uint32_t collectives;  // CollectiveAlgorithmKind
  uint32_t reserved;
};
static_assert(sizeof(AgreedAlgorithm) == 32);

AgreedAlgorithm agreed_algorithm(const AlgorithmTuning& tuning);
// `local` with the agreed fields of `agreed` (unless it carries none).
AlgorithmTuning with_agreed_algorithm(AlgorithmTuning local, const AgreedAlgorithm& agreed);

// Sequence numbers one round can see past the floor. Under `direct` a low-priority operation
// may hold the floor while a whole step's tensors (ResNet-50 has 161) queue behind it.
inline constexpr size_t kWindow = 1024;

// Operations one round can announce per node; the rest wait for the next round.
inline constexpr size_t kAnnouncePerRound = 64;

// Small allreduces travel inside the round (issue 18 point 3): each node adds its reduced
// part of every locally ready allreduce of at most --sched-eager-bytes (kEagerBytes at most,
// kEagerOps of them), and an operation that every node carried in the same round is combined
// from the records at once, without a transfer of its own.
inline constexpr size_t kEagerOps = 16;
inline constexpr size_t kEagerBytes = kMaxEagerBytes;

struct EagerEntry {
  uint64_t seq;
  uint32_t offset;  // in RoundRecord::tail, past the announcements; a multiple of 8
  uint32_t bytes;   // the node's part, in the wire type
};
static_assert(sizeof(EagerEntry) == 16);

// What one daemon tells the others each round. Only node 0's tuning fields are used, so the
// daemons agree even if their jobs' environments differ. An operation is marked ready only
// once it has been announced (now or in an earlier round) with what this node's ranks
// submitted, so before any of its data moves every daemon can check that all nodes posted the
// same collective, dtype, op, count and root. Node 0's announced priority orders the plan.
// Only the used part is sent (round_record_bytes): a round that announces one operation
// and carries 8 bytes of it is about 550 bytes on the wire, not the whole record.
struct RoundRecord {
  uint64_t floor;
  uint64_t ready[kWindow / 64];
  uint32_t policy;
  uint32_t fusion;
  uint64_t fusion_threshold;
  uint64_t chunk_bytes;
  uint64_t room;  // window bytes this node has free: the round hands out the least of these
  uint32_t announced;
  uint32_t eager;             // entries of eager_ops in use
  AgreedAlgorithm algorithm;  // inter-node algorithm settings; node 0's apply (see AgreedAlgorithm)
  EagerEntry eager_ops[kEagerOps];
  // `announced` OpSummary records, then the eager parts at their offsets.
  alignas(8) uint8_t tail[kAnnouncePerRound * sizeof(OpSummary) + kEagerBytes];
};
static_assert(std::is_trivially_copyable_v<RoundRecord>);
static_assert(offsetof(RoundRecord, tail) % 8 == 0 && sizeof(RoundRecord) % 8 == 0);

// Bytes of `r` that carry something: what is sent.
size_t round_record_bytes(const RoundRecord& r);
OpSummary announcement(const RoundRecord& r, size_t k);
void add_announcement(RoundRecord& r, const OpSummary& summary);
// Empty when `r`, as received from another node, is well formed; otherwise what is wrong.
std::string round_record_problem(const RoundRecord& r);
const EagerEntry* find_eager(const RoundRecord& r, uint64_t seq);

}  // namespace nodecomm::daemon
