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

#include "engine/wire_formats.hpp"
#include "nodecomm/proto/abi.hpp"

namespace nodecomm::daemon {

struct CommLayout;
struct Operation;

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

// The same two for the scheduler's rounds, from every node's announcements combined
// (round_record.hpp): a disagreement names the two nodes whose submissions differ most, a
// refusal the lowest node that cannot stage it and how many others.
std::string cross_node_disagreement(uint32_t comm_id, uint64_t seq, const Announcement& a,
                                    const CommLayout& layout, const Operation* here = nullptr);
std::string cross_node_refusal(uint32_t comm_id, uint64_t seq, const Announcement& a,
                               const CommLayout& layout);

}  // namespace nodecomm::daemon
