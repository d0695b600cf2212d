// Inter-node transfers of any size. MPI's counts are int (Open MPI 4.1 has no MPI_*_c
// large-count calls), so a block of 2 GiB or more between two daemons cannot go in one
// message; here it goes as consecutive messages of at most `max_message` bytes on one lane and
// tag, which MPI delivers in order (messages of one sender, tag and communicator never overtake
// each other), so both sides cut a block alike and nothing is truncated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "algorithms/allreduce_algorithms.hpp"
#include "net/p2p.hpp"

namespace nodecomm::daemon {

// One block to or from `peer` (a rank of the PointToPoint). A block with `peer` this daemon's
// own rank is copied from the send to the receive of that peer, without a message.
struct Transfer {
  uint32_t peer;
  uint8_t* data;  // a send's data is only read
  size_t bytes;
};

// Messages a block of `bytes` takes with messages of at most `max_message` bytes (0 for an
// empty block), and the size of message `index` of it: every message but the last is full.
size_t message_count(size_t bytes, size_t max_message);
size_t message_bytes(size_t bytes, size_t max_message, size_t index);

// Sends every block of `sends` and receives every block of `recvs`, each cut into messages of at
// most `max_message` bytes, on lane 0 with tag `tag`. Both sides of a pair must give the same
// size for the block between them (agreed counts). Throws TransportError.
std::unique_ptr<AllreduceAlgorithm> make_chunked_transfers(PointToPoint& net, int tag,
                                                           const std::vector<Transfer>& sends,
                                                           const std::vector<Transfer>& recvs,
                                                           size_t max_message);

}  // namespace nodecomm::daemon
