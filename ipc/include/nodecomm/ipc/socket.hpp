// The daemon's Unix control socket: SOCK_SEQPACKET, so every message arrives whole, and EOF
// tells the daemon a client is gone. Always a filesystem path (never the abstract namespace,
// which is per network namespace).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace nodecomm::ipc {

// Owns a file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

struct PeerCredentials {
  pid_t pid;
  uid_t uid;
  gid_t gid;
};

// Binds and listens at `path` (replacing a stale socket file) with the given mode.
// Throws std::runtime_error naming the path on failure.
Fd listen_unix(const std::string& path, unsigned mode);
// Accepts one pending connection, non-blocking and close-on-exec; invalid Fd if none.
Fd accept_unix(int listen_fd);
// Connects to `path`. Returns an invalid Fd and sets `error` on failure, and `error_number`
// (when given) to connect's errno, so callers can tell "no daemon yet" from "not allowed".
Fd connect_unix(const std::string& path, std::string& error, int* error_number = nullptr);
std::optional<PeerCredentials> peer_credentials(int fd);

enum class IoResult { kOk, kWouldBlock, kClosed, kError, kTimeout };

// Sends one message without blocking (MSG_DONTWAIT | MSG_NOSIGNAL), with `passed_fd` attached
// (SCM_RIGHTS) when it is not negative.
IoResult send_message(int fd, const void* data, size_t bytes, int passed_fd = -1);
// Receives one message without blocking; `received` is its size. A descriptor attached to it
// goes to `*passed` (when given and not yet holding one); any other is closed.
IoResult recv_message(int fd, void* data, size_t capacity, size_t& received, Fd* passed = nullptr);
// Waits up to timeout_ms for one message; `passed` as for recv_message.
IoResult recv_message_timed(int fd, void* data, size_t capacity, size_t& received, int timeout_ms,
                            Fd* passed = nullptr);
// True when the peer has closed its end (or the socket has failed), without consuming data.
bool peer_closed(int fd);

}  // namespace nodecomm::ipc
