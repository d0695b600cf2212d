#include "conductor/notify.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "nodecomm/ipc/clock.hpp"

namespace nodecomm::daemon {

Notifier::~Notifier() {
  if (fd_ >= 0) ::close(fd_);
}

Notifier& Notifier::from_environment() {
  static Notifier notifier;
  static bool initialized = false;
  if (initialized) return notifier;
  initialized = true;
  const char* socket_env = std::getenv("NOTIFY_SOCKET");
  const char* usec_env = std::getenv("WATCHDOG_USEC");
  const char* pid_env = std::getenv("WATCHDOG_PID");
  std::string path = socket_env != nullptr ? socket_env : "";
  uint64_t watchdog_usec = 0;
  if (usec_env != nullptr) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(usec_env, &end, 10);
    if (end != usec_env && *end == '\0') watchdog_usec = v;
  }
  // WATCHDOG_PID names the process that must ping; for any other process the watchdog is off.
  if (pid_env != nullptr && std::strtol(pid_env, nullptr, 10) != static_cast<long>(::getpid())) {
    watchdog_usec = 0;
  }
  ::unsetenv("NOTIFY_SOCKET");
  ::unsetenv("WATCHDOG_USEC");
  ::unsetenv("WATCHDOG_PID");
  if (path.size() < 2 || (path[0] != '/' && path[0] != '@') ||
      path.size() >= sizeof(sockaddr_un::sun_path)) {
    return notifier;
  }
  if (path[0] == '@') path[0] = '\0';
  notifier.fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  notifier.address_ = path;
  notifier.watchdog_ns_ = watchdog_usec * 1000;
  notifier.last_watchdog_ns_ = ipc::monotonic_ns();
  return notifier;
}

bool Notifier::send(std::string_view message) {
  if (fd_ < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, address_.data(), address_.size());
  const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address_.size());
  ssize_t sent = -1;
  do {
    sent = ::sendto(fd_, message.data(), message.size(), MSG_NOSIGNAL,
                    reinterpret_cast<const sockaddr*>(&addr), length);
  } while (sent < 0 && errno == EINTR);
  return sent == static_cast<ssize_t>(message.size());
}

void Notifier::ready(const std::string& status) {
  last_status_ = status;
  // A first keep-alive with READY=1: systemd arms the watchdog from here on.
  send(std::string(watchdog_ns_ != 0 ? "READY=1\nWATCHDOG=1\nSTATUS=" : "READY=1\nSTATUS=") +
       status);
  last_watchdog_ns_ = ipc::monotonic_ns();
}

void Notifier::status(const std::string& status) {
  last_status_ = status;
  send("STATUS=" + status);
}

void Notifier::stopping(const std::string& status) {
  last_status_ = status;
  send("STOPPING=1\nSTATUS=" + status);
}

bool stderr_is_journal() {
  const char* stream = std::getenv("JOURNAL_STREAM");
  if (stream == nullptr) return false;
  unsigned long long device = 0;
  unsigned long long inode = 0;
  if (std::sscanf(stream, "%llu:%llu", &device, &inode) != 2) return false;
  struct stat st {};
  if (::fstat(STDERR_FILENO, &st) != 0) return false;
  return static_cast<unsigned long long>(st.st_dev) == device &&
         static_cast<unsigned long long>(st.st_ino) == inode;
}

}  // namespace nodecomm::daemon
