#include "nodecomm/ipc/socket.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace nodecomm::ipc {

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

namespace {
bool make_address(const std::string& path, sockaddr_un& addr) {
  std::memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) return false;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return true;
}
}  // namespace

Fd listen_unix(const std::string& path, unsigned mode) {
  sockaddr_un addr{};
  if (!make_address(path, addr)) {
    throw std::runtime_error(fmt::format("socket path '{}' is empty or longer than {} bytes", path,
                                         sizeof(addr.sun_path) - 1));
  }
  Fd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) throw std::runtime_error(fmt::format("socket(): {}", std::strerror(errno)));
  ::unlink(
      path.c_str());  // a stale file from a crashed daemon; the instance lock protects live ones
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    throw std::runtime_error(fmt::format("bind {}: {}", path, std::strerror(errno)));
  }
  if (::chmod(path.c_str(), mode) != 0) {
    throw std::runtime_error(fmt::format("chmod {}: {}", path, std::strerror(errno)));
  }
  if (::listen(fd.get(), 128) != 0) {
    throw std::runtime_error(fmt::format("listen {}: {}", path, std::strerror(errno)));
  }
  return fd;
}

Fd accept_unix(int listen_fd) {
  return Fd(::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
}

Fd connect_unix(const std::string& path, std::string& error, int* error_number) {
  if (error_number != nullptr) *error_number = 0;
  sockaddr_un addr{};
  if (!make_address(path, addr)) {
    error = fmt::format("socket path '{}' is empty or too long", path);
    return {};
  }
  Fd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    error = fmt::format("socket(): {}", std::strerror(errno));
    return {};
  }
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (error_number != nullptr) *error_number = errno;
    error = fmt::format("connect {}: {}", path, std::strerror(errno));
    return {};
  }
  return fd;
}

std::optional<PeerCredentials> peer_credentials(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return std::nullopt;
  return PeerCredentials{cred.pid, cred.uid, cred.gid};
}

IoResult send_message(int fd, const void* data, size_t bytes, int passed_fd) {
  iovec iov{const_cast<void*>(data), bytes};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (passed_fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &passed_fd, sizeof(int));
  }
  for (;;) {
    const ssize_t n = ::sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(bytes)) return IoResult::kOk;
    if (n >= 0) return IoResult::kError;  // SEQPACKET never sends a partial record
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return IoResult::kWouldBlock;
    if (errno == EPIPE || errno == ECONNRESET) return IoResult::kClosed;
    return IoResult::kError;
  }
}

IoResult recv_message(int fd, void* data, size_t capacity, size_t& received, Fd* passed) {
  iovec iov{data, capacity};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  // Room for a few descriptors: whatever a peer attaches is taken and closed here unless the
  // caller asked for one, so none leaks into this process.
  alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))];
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  for (;;) {
    const ssize_t n = ::recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n > 0) {
      received = static_cast<size_t>(n);
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; ++i) {
          int received_fd = -1;
          std::memcpy(&received_fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
          Fd owned(received_fd);
          if (passed != nullptr && !passed->valid()) *passed = std::move(owned);
        }
      }
      return IoResult::kOk;
    }
    if (n == 0) return IoResult::kClosed;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return IoResult::kWouldBlock;
    if (errno == ECONNRESET) return IoResult::kClosed;
    return IoResult::kError;
  }
}

IoResult recv_message_timed(int fd, void* data, size_t capacity, size_t& received, int timeout_ms,
                            Fd* passed) {
  pollfd p{fd, POLLIN, 0};
  for (;;) {
    const int r = ::poll(&p, 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return IoResult::kError;
    if (r == 0) return IoResult::kTimeout;
    return recv_message(fd, data, capacity, received, passed);
  }
}

bool peer_closed(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL)) != 0;
}

}  // namespace nodecomm::ipc
