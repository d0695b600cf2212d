// The --netsim link probe: one TCP stream between two simulated hosts for about a second.
// Sockets keep the network namespace they were created in, so the launcher creates the
// listener inside the receiving host's namespace and the sender inside the sending host's
// (setns(2) on its one thread), returns to its own namespace, and then drives both ends from
// one poll loop.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <system_error>
#include <vector>

#include "netsim.hpp"
#include "nodecomm/ipc/socket.hpp"

namespace nodecomm::launch {
namespace {

using ProbeClock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// TCP's slow start and the TBF bucket's initial burst are over well within the warm-up.
constexpr auto kConnectTimeout = 1s;
constexpr auto kWarmup = 250ms;
constexpr auto kMeasure = 750ms;
constexpr size_t kChunk = size_t{256} * 1024;

ipc::Fd open_netns(const std::string& name) {
  const std::string path = "/run/netns/" + name;
  ipc::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) throw std::system_error(errno, std::generic_category(), "netsim probe: " + path);
  return fd;
}

void enter_netns(int fd, const std::string& name) {
  if (::setns(fd, CLONE_NEWNET) != 0) {
    throw std::system_error(errno, std::generic_category(),
                            fmt::format("netsim probe: setns into {}", name));
  }
}

ipc::Fd tcp_socket(const std::string& where) {
  ipc::Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) {
    throw std::system_error(errno, std::generic_category(),
                            fmt::format("netsim probe: socket in {}", where));
  }
  return fd;
}

sockaddr_in inet_address(const std::string& address, uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (::inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1) {
    throw std::invalid_argument(fmt::format("netsim probe: bad address {}", address));
  }
  return addr;
}

// Creates the receiver's listener in `to_ns`, bound to `to_address`, and an unconnected sender
// in `from_ns`; always returns to the launcher's own namespace.
std::pair<ipc::Fd, ipc::Fd> make_sockets(const std::string& from_ns, const std::string& to_ns,
                                         const std::string& to_address) {
  ipc::Fd home(::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC));
  if (!home.valid()) {
    throw std::system_error(errno, std::generic_category(), "netsim probe: /proc/self/ns/net");
  }
  const ipc::Fd from_fd = open_netns(from_ns);
  const ipc::Fd to_fd = open_netns(to_ns);
  ipc::Fd listener;
  ipc::Fd sender;
  std::string failure;
  try {
    enter_netns(to_fd.get(), to_ns);
    listener = tcp_socket(to_ns);
    const sockaddr_in addr = inet_address(to_address, 0);
    if (::bind(listener.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(listener.get(), 1) != 0) {
      throw std::system_error(errno, std::generic_category(),
                              fmt::format("netsim probe: listen on {} in {}", to_address, to_ns));
    }
    enter_netns(from_fd.get(), from_ns);
    sender = tcp_socket(from_ns);
  } catch (const std::exception& e) {
    failure = e.what();
  }
  if (::setns(home.get(), CLONE_NEWNET) != 0) {
    throw std::system_error(errno, std::generic_category(),
                            "netsim probe: returning to the launcher's network namespace");
  }
  if (!failure.empty()) throw std::runtime_error(failure);
  return {std::move(listener), std::move(sender)};
}

}  // namespace

Netsim::Probe Netsim::probe() const {
  Probe result;
  // With one host, the switch sends to it: that is still the host's shaped link, one way.
  const bool two_hosts = hosts_ >= 2;
  result.from = two_hosts ? host_name(0) : switch_;
  result.to = two_hosts ? host_name(1) : host_name(0);
  const std::string to_address = host_address(two_hosts ? 1 : 0);
  auto [listener, sender] = make_sockets(result.from, result.to, to_address);

  sockaddr_in bound{};
  socklen_t bound_len = sizeof(bound);
  if (::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&bound), &bound_len) != 0) {
    throw std::system_error(errno, std::generic_category(), "netsim probe: getsockname");
  }
  const std::string target = fmt::format("{}:{}", to_address, ntohs(bound.sin_port));
  const auto cannot_connect = [&](const std::string& why) {
    return std::runtime_error(fmt::format("netsim probe: cannot connect from {} to {} in {}: {}",
                                          result.from, target, result.to, why));
  };
  if (::connect(sender.get(), reinterpret_cast<const sockaddr*>(&bound), sizeof(bound)) != 0 &&
      errno != EINPROGRESS) {
    throw cannot_connect(std::strerror(errno));
  }
  pollfd accept_poll{listener.get(), POLLIN, 0};
  const int ready =
      ::poll(&accept_poll, 1, static_cast<int>(std::chrono::milliseconds(kConnectTimeout).count()));
  if (ready <= 0) {
    throw cannot_connect(ready == 0
                             ? fmt::format("no connection within {} ms",
                                           std::chrono::milliseconds(kConnectTimeout).count())
                             : std::string(std::strerror(errno)));
  }
  ipc::Fd receiver(::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
  if (!receiver.valid()) throw cannot_connect(fmt::format("accept: {}", std::strerror(errno)));
  listener.reset();

  std::vector<char> out(kChunk, 'n');
  std::vector<char> in(kChunk);
  const auto start = ProbeClock::now();
  const auto measure_from = start + kWarmup;
  const auto end = measure_from + kMeasure;
  size_t measured = 0;
  auto now = start;
  for (; now < end; now = ProbeClock::now()) {
    pollfd fds[2] = {{receiver.get(), POLLIN, 0}, {sender.get(), POLLOUT, 0}};
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(end - now).count();
    if (::poll(fds, 2, static_cast<int>(left)) < 0 && errno != EINTR) {
      throw std::system_error(errno, std::generic_category(), "netsim probe: poll");
    }
    if ((fds[1].revents & (POLLOUT | POLLERR | POLLHUP)) != 0) {
      const ssize_t n = ::send(sender.get(), out.data(), out.size(), MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN && errno != EINTR) {
        throw cannot_connect(fmt::format("send: {}", std::strerror(errno)));
      }
    }
    if ((fds[0].revents & (POLLIN | POLLERR | POLLHUP)) != 0) {
      while (true) {
        const ssize_t n = ::recv(receiver.get(), in.data(), in.size(), 0);
        if (n <= 0) break;
        if (ProbeClock::now() >= measure_from) measured += static_cast<size_t>(n);
      }
    }
  }
  result.bits_per_second = static_cast<double>(measured) * 8.0 /
                           std::chrono::duration<double>(now - measure_from).count();
  return result;
}

}  // namespace nodecomm::launch
