#include "nodecomm/ipc/daemon_identity.hpp"

#include <fmt/format.h>
#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>

#include "nodecomm/ipc/socket.hpp"

namespace nodecomm::ipc {

namespace {

std::optional<uid_t> uid_of(const std::string& text) {
  if (!text.empty() && text.size() < 10 &&
      text.find_first_not_of("0123456789") == std::string::npos) {
    return static_cast<uid_t>(std::stoul(text));
  }
  if (const passwd* user = ::getpwnam(text.c_str()); user != nullptr) return user->pw_uid;
  return std::nullopt;
}

}  // namespace

std::string check_daemon_peer(int fd, const std::string& socket_path) {
  const std::optional<PeerCredentials> peer = peer_credentials(fd);
  if (!peer) {
    return fmt::format(
        "cannot tell who serves nodecommd's socket {} (SO_PEERCRED failed); "
        "refusing to send it anything",
        socket_path);
  }
  std::string expected;
  const char* pinned = std::getenv(kDaemonUidEnv);
  if (pinned != nullptr && *pinned != '\0') {
    const std::optional<uid_t> uid = uid_of(pinned);
    if (!uid) {
      return fmt::format("{} '{}' is neither a uid nor a user name", kDaemonUidEnv, pinned);
    }
    if (peer->uid == *uid) return {};
    expected = fmt::format("uid {} ({})", *uid, kDaemonUidEnv);
  } else {
    const std::optional<uid_t> service = uid_of(kServiceUser);
    if (peer->uid == 0 || peer->uid == ::getuid() || peer->uid == ::geteuid() ||
        (service && peer->uid == *service)) {
      return {};
    }
    expected = fmt::format(
        "root, this process's uid {}{}", ::geteuid(),
        service ? fmt::format(" or the service user {} (uid {})", kServiceUser, *service)
                : std::string());
  }
  return fmt::format(
      "refusing nodecommd at {}: it runs as uid {} (pid {}), but this process accepts only {}; "
      "if that daemon is genuine, set {} to its uid",
      socket_path, peer->uid, peer->pid, expected, kDaemonUidEnv);
}

}  // namespace nodecomm::ipc
