// Heartbeats between the daemons of one MPI world (part of the MPI transport). Open MPI, run
// with --enable-recovery so that a dead process does not abort the others, reports nothing
// when a peer dies: its messages just never come. Each daemon therefore sends every peer a
// small heartbeat on a communicator of its own and declares a peer lost after a silence,
// naming the node, its daemon's pid and host from the peer's last heartbeat.
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // the C API only: the C++ bindings need a library we don't link
#endif
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "mpi/mpi_common.hpp"
#include "net/peer_silence.hpp"
#include "net/transport.hpp"

namespace nodecomm::daemon {

class MpiPeerLiveness {
 public:
  // Collective over `world` (duplicates it); every peer counts as heard from now. The duplicate
  // goes to `release` when destroyed.
  MpiPeerLiveness(MPI_Comm world, uint32_t rank, uint32_t size, uint64_t now_ns,
                  CommRelease release);
  ~MpiPeerLiveness();
  MpiPeerLiveness(const MpiPeerLiveness&) = delete;
  MpiPeerLiveness& operator=(const MpiPeerLiveness&) = delete;

  std::vector<Transport::LostPeer> check(uint64_t now_ns, uint64_t interval_ns,
                                         uint64_t timeout_ns);
  bool any_lost() const { return any_lost_; }

 private:
  struct Beat {
    uint32_t from;
    int32_t pid;
    uint64_t count;
    char host[64];
  };
  struct Peer {
    uint64_t last_heard_ns = 0;
    uint64_t last_sent_ns = 0;
    MPI_Request send = MPI_REQUEST_NULL;
    Beat sent{};
    int32_t pid = 0;
    std::string host;
    bool lost = false;
  };
  void post_receive();

  MPI_Comm comm_ = MPI_COMM_NULL;
  CommRelease release_;
  uint32_t rank_;
  std::vector<Peer> peers_;
  Beat incoming_{};
  MPI_Request receive_ = MPI_REQUEST_NULL;
  Beat mine_{};
  bool any_lost_ = false;
  PeerSilenceClock silence_;
};

}  // namespace nodecomm::daemon
