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
// latency-bytes, allreduce-algorithm, collective-algorithm) and use the same lanes (endpoints).
// Node 0's are sent in every scheduling round record and applied by every daemon before it starts
// that round's transfers, so `nodecommctl set chunk-size` on node 0 changes the whole job between
// two transfers, never in the middle of one. pipeline-depth is local (slices in flight here).
struct AgreedAlgorithm {
  uint64_t chunk_bytes;  // 0: none sent (keep the local settings)
  uint64_t small_bytes;
  uint32_t allreduce;  // AllreduceAlgorithmKind
  uint32_t endpoints;
  uint32_t collectives;    // CollectiveAlgorithmKind
  uint32_t latency_bytes;  // at most 4 GiB (--latency-bytes' limit)
};
static_assert(sizeof(AgreedAlgorithm) == 32);

AgreedAlgorithm agreed_algorithm(const AlgorithmTuning& tuning);
// `local` with the agreed fields of `agreed` (unless it carries none).
AlgorithmTuning with_agreed_algorithm(AlgorithmTuning local, const AgreedAlgorithm& agreed);

// Sequence numbers one round can see past the floor. Under `direct` a low-priority operation
// may hold the floor while a whole step's tensors (ResNet-50 has 161) queue behind it.
inline constexpr size_t kWindow = 1024;

// Operations one round record can announce; the rest wait for the next round.
inline constexpr size_t kAnnouncePerRound = 64;

// Small allreduces travel inside the round (issue 18 point 3): each node adds its reduced
// part of every locally ready allreduce of at most --sched-eager-bytes (kEagerBytes at most,
// kEagerOps of them), and an operation that every node carried in the same round is combined
// from the records at once, without a transfer of its own.
inline constexpr size_t kEagerOps = 16;
inline constexpr size_t kEagerBytes = kMaxEagerBytes;

// No node (RoundRecord::malformed_node, Announcement::refused_node).
inline constexpr uint32_t kNoNode = UINT32_MAX;

struct EagerEntry {
  uint64_t seq;
  uint32_t offset;  // in RoundRecord::tail, past the announcements; a multiple of 8
  uint32_t bytes;   // the part, in the wire type
};
static_assert(sizeof(EagerEntry) == 16);

// One operation's announcements by the nodes a record covers, combined (round_record.hpp):
// the least and the greatest of their summaries by the fields every rank must pass alike, so
// that they agree when the two are the same, and a disagreement names two nodes that differ.
struct Announcement {
  OpSummary low;
  OpSummary high;
  // alltoallv: the nodes' count digests summed (zero over all nodes when every pair agrees).
  uint64_t counts_sum[2];
  uint32_t low_node;
  uint32_t high_node;
  uint32_t nodes;      // nodes whose announcement this holds
  uint32_t lead_node;  // the lowest of them: its priority orders the plan
  int32_t lead_priority;
  uint32_t refused;       // nodes that cannot stage it
  uint32_t refused_node;  // the lowest of them, kNoNode if none
  uint32_t reserved;
};
static_assert(sizeof(Announcement) == 144 && std::is_trivially_copyable_v<Announcement>);

// What the daemons of a communicator tell each other each round, as one record per node
// combined over any set of nodes (round_record.hpp): ready bitmaps ANDed, rooms taken at their
// least, announcements merged per operation, eager parts reduced, and the tuning of the
// lowest node. Every daemon ends a round with the record of all nodes, however the records
// travelled: all-to-all (each combines the N records in node order) or by recursive doubling
// (log2 N steps), so the agreement scales to thousands of nodes.
// An operation is marked ready only once it has been announced (now or in an earlier round)
// with what this node's ranks submitted, so before any of its data moves every daemon can
// check that all nodes posted the same collective, dtype, op, count and root. Node 0's
// announced priority orders the plan. Only the used part is sent (round_record_bytes): a round
// that announces one operation and carries 8 bytes of it is about 800 bytes on the wire.
struct RoundRecord {
  uint32_t nodes;           // nodes this record combines (1 as a node sends its own)
  uint32_t lead_node;       // the lowest of them: the tuning fields below are its
  uint32_t malformed_node;  // kNoNode, or the lowest node whose record arrived malformed
  uint32_t gather_nodes;    // lead's --sched-gather-nodes: how the next round travels
  uint64_t floor_low;       // least and greatest floor of the nodes: equal unless diverged
  uint64_t floor_high;
  uint64_t ready[kWindow / 64];  // ready on every node covered
  uint32_t policy;
  uint32_t fusion;
  uint64_t fusion_threshold;
  uint64_t chunk_bytes;
  uint64_t room;  // window bytes free, the least over the nodes: the round hands out that much
  // Bytes a node still has on the network when the plan arrives, the most over the nodes:
  // where any, the link is loaded and the plan's allreduces take the ring (choose_allreduce).
  uint64_t staying;
  uint32_t announced;
  uint32_t eager;             // entries of eager_ops in use, by seq
  AgreedAlgorithm algorithm;  // inter-node algorithm settings; node 0's apply (see AgreedAlgorithm)
  EagerEntry eager_ops[kEagerOps];
  // `announced` Announcements by seq, then the eager parts at their offsets.
  alignas(8) uint8_t tail[kAnnouncePerRound * sizeof(Announcement) + kEagerBytes];
};
static_assert(std::is_trivially_copyable_v<RoundRecord>);
static_assert(offsetof(RoundRecord, tail) % 8 == 0 && sizeof(RoundRecord) % 8 == 0);

}  // namespace nodecomm::daemon
