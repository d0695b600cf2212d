// Cross-node agreement on what each sequence number is. Before an operation's data crosses
// the network, every daemon learns what the other nodes' ranks submitted for it, so ranks
// that disagree between nodes get an error naming every node's submission at once instead
// of a transfer that truncates on one node and waits forever on another.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "nodecomm/proto/abi.hpp"

namespace nodecomm::daemon {

struct CommLayout;
struct Operation;

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

OpSummary summarize(uint64_t seq, const proto::OpDescriptor& desc);
// With the count digest of the node's members and, if this node refused the operation's
// staging (Operation::staging_refused), that refusal.
OpSummary summarize(const Operation& op, const CommLayout& layout);

// Empty when every node submitted the same operation, with counts that agree; otherwise the
// error for every member: each node, its ranks in the communicator and what they posted.
// `here`: this node's operation for that seq, if it has one, whose count totals a count
// disagreement names.
std::string cross_node_disagreement(uint32_t comm_id, uint64_t seq,
                                    const std::vector<std::optional<OpSummary>>& by_node,
                                    const CommLayout& layout, const Operation* here = nullptr);

// Every node agreed on the operation, but one or more could not stage it (--max-staging,
// --max-staging-per-job, or no memory): empty if none; otherwise the error for every member.
// The operation fails alike on every node without moving data; the communicator stays usable.
std::string cross_node_refusal(uint32_t comm_id, uint64_t seq,
                               const std::vector<std::optional<OpSummary>>& by_node,
                               const CommLayout& layout);

}  // namespace nodecomm::daemon
