#include "mpi/rendezvous.hpp"

#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "mpi/mpi_common.hpp"
#include "net/transport.hpp"
#include "nodecomm/ipc/printable.hpp"

namespace nodecomm::daemon {
namespace {

constexpr int kDefaultExchangeTimeoutS = 5;
constexpr const char* kTimeoutVariable = "OMPI_MCA_pmix_base_exchange_timeout";

std::string start_hint(const std::string& file) {
  return fmt::format("start the rendezvous unit (ompi-server --no-daemonize -r {}) first", file);
}

struct Endpoint {
  std::string uri;  // as written, for messages
  std::string host;
  std::string port;
};

// ORTE's contact string: "<jobid>.<vpid>;tcp://<ipv4>:<port>;tcp6://[<ipv6>]:<port>".
std::vector<Endpoint> parse_contact(const std::string& contact) {
  std::vector<Endpoint> endpoints;
  std::stringstream in(contact);
  std::string part;
  while (std::getline(in, part, ';')) {
    Endpoint e;
    e.uri = part;
    std::string rest;
    if (part.rfind("tcp://", 0) == 0) {
      rest = part.substr(6);
    } else if (part.rfind("tcp6://", 0) == 0) {
      rest = part.substr(7);
    } else {
      continue;
    }
    const size_t colon = rest.rfind(':');
    if (colon == std::string::npos) continue;
    e.host = rest.substr(0, colon);
    e.port = rest.substr(colon + 1);
    if (e.host.size() >= 2 && e.host.front() == '[' && e.host.back() == ']') {
      e.host = e.host.substr(1, e.host.size() - 2);
    }
    endpoints.push_back(std::move(e));
  }
  return endpoints;
}

// A TCP connection that is accepted within `timeout_ms`: the server runs. Empty when it
// answers, else why not.
std::string check_answers(const Endpoint& e, int timeout_ms) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(e.host.c_str(), e.port.c_str(), &hints, &found); rc != 0) {
    return gai_strerror(rc);
  }
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    int error = 0;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      error = errno;
      if (error == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        const int ready = ::poll(&p, 1, timeout_ms);
        socklen_t len = sizeof(error);
        if (ready == 1) {
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
        } else {
          error = ETIMEDOUT;
        }
      }
    }
    ::close(fd);
    if (error == 0) {
      ::freeaddrinfo(found);
      return {};
    }
    why = std::strerror(error);
  }
  ::freeaddrinfo(found);
  return why;
}

std::string encode_key(const std::string& key) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const char c : key) {
    const auto b = static_cast<unsigned char>(c);
    if ((b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9') || b == '.' ||
        b == '_' || b == '-') {
      out.push_back(c);
    } else {
      out.push_back('%');
      out.push_back(kHex[b >> 4]);
      out.push_back(kHex[b & 15]);
    }
  }
  return out;
}

uint64_t fnv1a(const std::string& text) {
  uint64_t h = 1469598103934665603ULL;
  for (const char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  return h;
}

}  // namespace

void join_rendezvous(const std::string& uri_file) {
  std::ifstream in(uri_file);
  if (!in) {
    throw TransportError(fmt::format("rendezvous URI file {}: {}: {}", uri_file,
                                     std::strerror(errno), start_hint(uri_file)));
  }
  std::string contact;
  std::getline(in, contact);
  const std::vector<Endpoint> endpoints = parse_contact(contact);
  if (endpoints.empty()) {
    throw TransportError(fmt::format("rendezvous URI file {} holds no ompi-server URI (\"{}\"): {}",
                                     uri_file, ipc::printable(contact.substr(0, 200)),
                                     start_hint(uri_file)));
  }
  // A file left behind by a server that is gone would let MPI_Init crash: ask the server.
  std::string failures;
  bool answers = false;
  for (const Endpoint& e : endpoints) {
    const std::string why = check_answers(e, 2000);
    if (why.empty()) {
      answers = true;
      break;
    }
    failures += fmt::format("{}{}: {}", failures.empty() ? "" : "; ", e.uri, why);
  }
  if (!answers) {
    throw TransportError(fmt::format("the rendezvous server in {} does not answer ({}): {}",
                                     uri_file, failures, start_hint(uri_file)));
  }
  char absolute[PATH_MAX];
  const std::string path = ::realpath(uri_file.c_str(), absolute) != nullptr ? absolute : uri_file;
  ::setenv("OMPI_MCA_pmix_server_uri", ("file:" + path).c_str(), /*overwrite=*/1);
  ::setenv(kTimeoutVariable, std::to_string(kDefaultExchangeTimeoutS).c_str(), /*overwrite=*/0);
}

int exchange_timeout_s() {
  if (const char* v = std::getenv(kTimeoutVariable); v != nullptr) {
    char* end = nullptr;
    const long s = std::strtol(v, &end, 10);
    if (end != v && *end == '\0' && s > 0 && s < 3600) return static_cast<int>(s);
  }
  return kDefaultExchangeTimeoutS;
}

std::string rendezvous_base(const std::string& key) {
  std::string encoded = encode_key(key);
  if (encoded.size() > 200) {
    encoded = fmt::format("{}~{:016x}", encoded.substr(0, 150), fnv1a(key));
  }
  return "nodecomm:" + encoded;
}

std::string generation_name(const std::string& base, uint32_t generation) {
  return fmt::format("{}#{}", base, generation);
}

std::string joiner_name(const std::string& base, uint32_t generation, uint32_t node) {
  return fmt::format("{}#{}:{}", base, generation, node);
}

std::string ping_name(const std::string& base, uint32_t generation, uint32_t node,
                      uint32_t attempt) {
  return fmt::format("{}#{}:{}/ping{}", base, generation, node, attempt);
}

std::string answer_name(const std::string& base, uint32_t generation, uint32_t node,
                        uint32_t attempt) {
  return fmt::format("{}#{}:{}/pong{}", base, generation, node, attempt);
}

std::string go_name(const std::string& base, uint32_t generation, uint32_t node, uint32_t ping) {
  return fmt::format("{}#{}:{}/go{}", base, generation, node, ping);
}

std::string ack_name(const std::string& base, uint32_t generation, uint32_t node, uint32_t ping,
                     bool ready) {
  return fmt::format("{}#{}:{}/{}{}", base, generation, node, ready ? "ack" : "busy", ping);
}

uint64_t link_id(const std::string& base, uint32_t generation, uint32_t node, uint32_t ping) {
  return fnv1a(fmt::format("{}#{}:{}/link{}", base, generation, node, ping));
}

bool lookup_name(const std::string& name, std::string& value, uint32_t node) {
  char port[MPI_MAX_PORT_NAME] = {};
  const int rc = MPI_Lookup_name(name.c_str(), MPI_INFO_NULL, port);
  if (rc == MPI_SUCCESS) {
    value.assign(port, strnlen(port, sizeof(port)));
    return true;
  }
  int error_class = rc;
  MPI_Error_class(rc, &error_class);
  if (error_class == MPI_ERR_NAME) return false;
  throw TransportError(
      fmt::format("MPI_Lookup_name({}) on node {}: {}", name, node, mpi_error_text(rc)));
}

void publish_name(const std::string& name, const std::string& value, uint32_t node) {
  const int rc = MPI_Publish_name(name.c_str(), MPI_INFO_NULL, value.c_str());
  if (rc != MPI_SUCCESS) {
    throw TransportError(
        fmt::format("MPI_Publish_name({}) on node {}: {}", name, node, mpi_error_text(rc)));
  }
}

bool unpublish_name(const std::string& name, const std::string& value) {
  return MPI_Unpublish_name(name.c_str(), MPI_INFO_NULL, value.c_str()) == MPI_SUCCESS;
}

}  // namespace nodecomm::daemon
