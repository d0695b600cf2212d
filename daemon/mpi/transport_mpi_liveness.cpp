#include "mpi/transport_mpi_liveness.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "mpi/mpi_common.hpp"

namespace nodecomm::daemon {

MpiPeerLiveness::MpiPeerLiveness(MPI_Comm world, uint32_t rank, uint32_t size, uint64_t now_ns,
                                 CommRelease release)
    : release_(std::move(release)), rank_(rank), peers_(size) {
  check_mpi(MPI_Comm_dup(world, &comm_), "MPI_Comm_dup (liveness)", rank_);
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  mine_.from = rank;
  mine_.pid = static_cast<int32_t>(::getpid());
  ::gethostname(mine_.host, sizeof(mine_.host) - 1);
  for (Peer& peer : peers_) peer.last_heard_ns = now_ns;
  post_receive();
}

MpiPeerLiveness::~MpiPeerLiveness() {
  if (receive_ != MPI_REQUEST_NULL) {
    MPI_Cancel(&receive_);
    MPI_Request_free(&receive_);
  }
  // A send to a lost peer never completes; it is let go rather than waited for.
  for (Peer& peer : peers_) {
    if (peer.send != MPI_REQUEST_NULL) MPI_Request_free(&peer.send);
  }
  if (comm_ != MPI_COMM_NULL) release_(comm_);
}

void MpiPeerLiveness::post_receive() {
  incoming_ = {};
  // The previous receive has completed (check() tested it) before this one is posted.
  // NOLINTNEXTLINE(clang-analyzer-optin.mpi.MPI-Checker)
  if (MPI_Irecv(&incoming_, sizeof(Beat), MPI_BYTE, MPI_ANY_SOURCE,
                reserved_tag(ReservedTag::kLiveness), comm_, &receive_) != MPI_SUCCESS) {
    receive_ = MPI_REQUEST_NULL;
  }
}

// Requests are completed by MPI_Test on later calls, or freed in the destructor.
// NOLINTBEGIN(clang-analyzer-optin.mpi.MPI-Checker)
std::vector<Transport::LostPeer> MpiPeerLiveness::check(uint64_t now_ns, uint64_t interval_ns,
                                                        uint64_t timeout_ns) {
  // This daemon's own pauses are not the peers' silence (net/peer_silence.hpp).
  const uint64_t unobserved = silence_.unobserved(now_ns, interval_ns);
  if (unobserved != 0) {
    for (Peer& peer : peers_)
      peer.last_heard_ns = forgive_unobserved(peer.last_heard_ns, unobserved, now_ns);
  }
  // Everything that arrived since the last check.
  int done = 0;
  while (receive_ != MPI_REQUEST_NULL &&
         MPI_Test(&receive_, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done != 0) {
    if (incoming_.from < peers_.size()) {
      Peer& peer = peers_[incoming_.from];
      peer.last_heard_ns = now_ns;
      peer.pid = incoming_.pid;
      incoming_.host[sizeof(incoming_.host) - 1] = '\0';
      peer.host = incoming_.host;
    }
    post_receive();
  }
  std::vector<Transport::LostPeer> lost;
  for (uint32_t p = 0; p < peers_.size(); ++p) {
    if (p == rank_) continue;
    Peer& peer = peers_[p];
    if (peer.lost) continue;
    // One heartbeat in flight per peer: a peer that stopped reading gets no pile-up.
    if (peer.send != MPI_REQUEST_NULL) {
      MPI_Test(&peer.send, &done, MPI_STATUS_IGNORE);
    }
    if (peer.send == MPI_REQUEST_NULL && now_ns - peer.last_sent_ns >= interval_ns) {
      ++mine_.count;
      peer.sent = mine_;
      if (MPI_Isend(&peer.sent, sizeof(Beat), MPI_BYTE, static_cast<int>(p),
                    reserved_tag(ReservedTag::kLiveness), comm_, &peer.send) != MPI_SUCCESS) {
        peer.send = MPI_REQUEST_NULL;
      }
      peer.last_sent_ns = now_ns;
    }
    if (timeout_ns > 0 && now_ns - peer.last_heard_ns > timeout_ns) {
      peer.lost = true;
      any_lost_ = true;
      const std::string who = peer.pid != 0
                                  ? fmt::format("its daemon (pid {} on {})", peer.pid, peer.host)
                                  : std::string("its daemon");
      lost.push_back({p, fmt::format("node {} lost: {} sent no heartbeat for {:.1f} s", p, who,
                                     static_cast<double>(now_ns - peer.last_heard_ns) / 1e9)});
    }
  }
  return lost;
}
// NOLINTEND(clang-analyzer-optin.mpi.MPI-Checker)

}  // namespace nodecomm::daemon
