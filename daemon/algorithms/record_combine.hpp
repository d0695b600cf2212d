// Combining one record per node into the record of all nodes, on every node, by recursive
// doubling: log2(N) exchanges with one peer each (two more for the nodes beyond the largest
// power of two, which hand theirs to a neighbour first and get the result from it last). The
// scheduler's rounds use it beyond --sched-gather-nodes, where an all-to-all exchange would
// cost every daemon N-1 messages a round (issue 18 point 2).
//
// The records' meaning stays with the caller: after each exchange, `combine` merges the
// record just received (that of a contiguous range of nodes) into this node's, and says how
// many bytes of it to send next. Every node of a group holds the same record after each
// exchange, provided `combine` gives the same bits whichever node runs it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "algorithms/allreduce_algorithms.hpp"
#include "net/p2p.hpp"

namespace nodecomm::daemon {

struct RecordCombineSpec {
  uint8_t* record = nullptr;    // this node's record; all nodes' once complete
  uint8_t* incoming = nullptr;  // a peer's record lands here (capacity bytes)
  size_t capacity = 0;          // of both
  size_t send_bytes = 0;        // of this node's record, to send first
  // Merges `incoming`, the record of nodes [first, first + nodes) (as the protocol expects
  // it; the callee checks that it says so), into `record`; returns the bytes of `record`
  // to send from now on (at most capacity). Must not throw for a malformed record: every
  // other node waits for this one's next message.
  std::function<size_t(uint32_t first, uint32_t nodes)> combine;
};

// `tag_base` and the next kTagsPerOperation tags belong to this combination alone.
std::unique_ptr<AllreduceAlgorithm> make_record_combine(PointToPoint& net, int tag_base,
                                                        RecordCombineSpec spec);

}  // namespace nodecomm::daemon
