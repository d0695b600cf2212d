// Count agreement for collectives whose counts differ by rank (allgatherv, alltoallv): before
// any data moves, what every rank sends must be what its peers expect, on the node and
// between nodes. Without it a staging buffer sized by one side is read by the other: a rank
// expecting more than its peers send would receive whatever the buffer held before.
//
// On the node the daemon holds every member's count arrays and compares them exactly. Between
// nodes each daemon sends a fixed-width digest (in its OpSummary, op_check.hpp):
//  - allgatherv: a 128-bit hash of recv_counts, which every rank must pass alike; equal digests
//    and the node's own check (each rank's send count == recv_counts[rank]) give agreement;
//  - alltoallv: node A knows what its ranks send to every rank and what they expect from every
//    rank, but not its peers' side. Each (source i, destination j, count) pair that crosses
//    nodes becomes a keyed 64-bit term, added by the sender's node (from send_counts) and
//    subtracted by the receiver's node (from recv_counts), in two independent lanes. The
//    lanes of all nodes sum to zero when every pair agrees. A client that searched for counts
//    whose terms cancel could pass this check with counts that disagree; the network step then
//    truncates (an error) or receives short into a receive buffer cleared before the transfer
//    (collectives.cpp), so it still never sees bytes that the operation did not stage.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nodecomm/proto/types.hpp"

namespace nodecomm::daemon {

// One local member's submission: its rank in the communicator, its descriptor count and its
// private copy of the count arrays (proto::aux_entries(c, size) entries).
struct MemberCounts {
  uint32_t rank;
  uint64_t count;
  const uint64_t* aux;
};

// Empty when the node's members agree; otherwise a text such as "alltoallv seq 3: rank 0
// sends 5 elements to rank 2, rank 2 expects 7 from rank 0" (the first few disagreements).
std::string local_count_disagreement(proto::Collective c, uint64_t seq, uint32_t size,
                                     const std::vector<MemberCounts>& members);

// What one node tells the others about its members' counts (see the file comment).
struct CountDigest {
  uint64_t digest[2] = {0, 0};
  // For messages only (never sent between nodes). allgatherv: elements the node's ranks send,
  // and the total of their recv_counts; alltoallv: to and from ranks on other nodes.
  uint64_t sent = 0;
  uint64_t expected = 0;
};
// `local[r]` is true for the communicator ranks on this node.
CountDigest node_count_digest(proto::Collective c, uint32_t size,
                              const std::vector<MemberCounts>& members,
                              const std::vector<bool>& local);

// Empty when the digests agree; otherwise the reason, naming the nodes by `labels` (one per
// digest, such as "node 1 (ranks 2,3)"; allgatherv names those that differ from the first)
// and, if `here` is given, this node's totals under `here_label`. Only the digests travel
// between nodes, so other nodes' totals are not known here. A digest may stand for several
// nodes (alltoallv's are summed on the way), labelled as such.
std::string cross_node_count_disagreement(proto::Collective c, uint32_t comm_id, uint64_t seq,
                                          const std::vector<CountDigest>& by_node,
                                          const std::vector<std::string>& labels,
                                          const std::string& here_label, const CountDigest* here);

}  // namespace nodecomm::daemon
