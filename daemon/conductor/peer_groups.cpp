#include "conductor/peer_groups.hpp"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "config/log.hpp"

namespace nodecomm::daemon {

std::vector<gid_t> peer_groups(int fd, const ipc::PeerCredentials& cred) {
  std::vector<gid_t> groups{cred.gid};
  // SO_PEERGROUPS (Linux 4.13) holds the groups the peer had at connect, like SO_PEERCRED: not
  // /proc/<pid>/status, which names whatever process has that pid by the time it is read and
  // which the unit's ProtectProc=invisible hides. ERANGE gives the size needed.
  std::vector<gid_t> buffer(64);
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto len = static_cast<socklen_t>(buffer.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, buffer.data(), &len) == 0) {
      groups.insert(groups.end(), buffer.begin(), buffer.begin() + len / sizeof(gid_t));
      return groups;
    }
    if (errno != ERANGE) break;
    buffer.resize(len / sizeof(gid_t) + 1);
  }
  NC_LOG(kWarn, "SO_PEERGROUPS failed ({}): only the peer's primary group {} is known",
         std::strerror(errno), cred.gid);
  return groups;
}

}  // namespace nodecomm::daemon
