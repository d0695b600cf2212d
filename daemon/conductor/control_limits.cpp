// The control socket's limits (Daemon members; the rest of the socket handling is in
// daemon.cpp): connections per uid, deadlines for hello, mapping and attach, and how a refused
// or dropped connection is told why. Every refusal names its limit and the option that sets it.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <string>
#include <vector>

#include "conductor/daemon.hpp"
#include "config/log.hpp"
#include "nodecomm/ipc/clock.hpp"
#include "nodecomm/ipc/fixed_text.hpp"

namespace nodecomm::daemon {

namespace {
// Messages read and thrown away before a parting reply: enough for a client's hello and a few
// more; a flooder's further messages fail to send once the socket is shut down.
constexpr int kDrainMessages = 8;
// Connections accepted per second, and at once: a 128-rank job attaches in one burst; a flood
// of connections costs the loop at most this rate (each one a session, a read and a reply).
constexpr double kAcceptsPerSecond = 500;
constexpr double kAcceptBurst = 128;

void drain(int fd) {
  alignas(8) uint8_t buffer[proto::kMaxControlMessageBytes];
  for (int i = 0; i < kDrainMessages; ++i) {
    size_t size = 0;
    if (ipc::recv_message(fd, buffer, sizeof(buffer), size) != ipc::IoResult::kOk) return;
  }
}

// Sends `reply` so that the peer can still read it after the close. Closing a Unix socket
// that holds unread messages resets the connection, and the peer's next read then fails
// before it reaches the reply. So: read what is queued, reply, shut down both directions (the
// peer's further sends now fail with EPIPE instead of queueing), and read what arrived meanwhile.
void part(int fd, const void* reply, size_t bytes) {
  drain(fd);
  ipc::send_message(fd, reply, bytes);
  ::shutdown(fd, SHUT_RDWR);
  drain(fd);
}

proto::HelloReply hello_reply(proto::Status status, const std::string& text) {
  proto::HelloReply reply{};
  reply.type = static_cast<uint32_t>(proto::ControlType::kHelloReply);
  reply.status = static_cast<int32_t>(status);
  ipc::copy_text(reply.message, text);
  return reply;
}
}  // namespace

size_t Daemon::connections_of(uint32_t uid) const {
  size_t n = 0;
  for (const auto& [id, client] : clients_) {
    n += client->cred().uid == uid && client->state() != ClientSession::State::kClosed;
  }
  return n;
}

std::string Daemon::connection_limit(const ipc::PeerCredentials& cred) const {
  if (clients_.size() >= config_.max_clients) {
    return fmt::format(
        "nodecommd instance '{}' already serves {} clients (the limit, --max-clients)",
        config_.instance, config_.max_clients);
  }
  if (const size_t mine = connections_of(cred.uid); mine >= config_.max_clients_per_uid) {
    return fmt::format(
        "uid {} already holds {} connections to nodecommd instance '{}' (the limit per uid, "
        "--max-clients-per-uid {})",
        cred.uid, mine, config_.instance, config_.max_clients_per_uid);
  }
  return {};
}

void Daemon::refuse_connection(ipc::Fd fd, const ipc::PeerCredentials& cred,
                               const std::string& text) {
  const proto::HelloReply reply = hello_reply(proto::Status::kQueueFull, text);
  part(fd.get(), &reply, sizeof(reply));
  log_refusal("connection from pid {} uid {} refused: {}", cred.pid, cred.uid, text);
}

void Daemon::part_with(ClientSession& client, proto::Status status, const std::string& why) {
  if (client.state() == ClientSession::State::kClosed) return;
  // A library client waits for a HelloReply until its hello is answered and for a JobReady
  // after: it reads the reason where it expects an answer.
  if (client.state() == ClientSession::State::kHello) {
    const proto::HelloReply reply =
        hello_reply(status, "nodecommd dropped this connection: " + why);
    part(client.fd(), &reply, sizeof(reply));
  } else {
    proto::JobReady ready{};
    ready.type = static_cast<uint32_t>(proto::ControlType::kJobReady);
    ready.status = static_cast<int32_t>(status);
    ready.local_rank = client.local_rank;
    ipc::copy_text(ready.message, why);
    part(client.fd(), &ready, sizeof(ready));
  }
  log_refusal("client {} (pid {}, uid {}) dropped: {}", client.id(), client.cred().pid,
              client.cred().uid, why);
  drop(client, why);
}

bool Daemon::refusal_log_due() {
  // At most one line a second: a flood of connections must not turn into a flood of log
  // writes on the loop that also serves the jobs.
  const uint64_t now = ipc::monotonic_ns();
  if (now - last_refusal_log_ns_ < 1'000'000'000ull) {
    ++unlogged_refusals_;
    return false;
  }
  last_refusal_log_ns_ = now;
  return true;
}

void Daemon::write_refusal(const std::string& text) {
  if (unlogged_refusals_ > 0) {
    NC_LOG(kWarn, "{} (and {} more refusals or drops since the last such line)", text,
           unlogged_refusals_);
  } else {
    NC_LOG(kWarn, "{}", text);
  }
  unlogged_refusals_ = 0;
}

bool Daemon::accept_allowed(uint64_t now) {
  if (accept_refill_ns_ == 0) accept_tokens_ = kAcceptBurst;
  accept_tokens_ =
      std::min(kAcceptBurst, accept_tokens_ + static_cast<double>(now - accept_refill_ns_) *
                                                  kAcceptsPerSecond / 1e9);
  accept_refill_ns_ = now;
  if (accept_tokens_ >= 1) {
    accept_tokens_ -= 1;
    return true;
  }
  epoll_event ev{};
  ev.events = 0;
  ev.data.u64 = 0;  // kListenTag
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, listen_fd_.get(), &ev);
  accepts_paused_ = true;
  return false;
}

void Daemon::resume_accepts(uint64_t now) {
  if (!accepts_paused_) return;
  if (accept_tokens_ + static_cast<double>(now - accept_refill_ns_) * kAcceptsPerSecond / 1e9 < 1) {
    return;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;  // kListenTag
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, listen_fd_.get(), &ev);
  accepts_paused_ = false;
}

void Daemon::check_deadlines(uint64_t now) {
  const auto ns = [](double sec) { return static_cast<uint64_t>(sec * 1e9); };
  for (auto& [id, client] : clients_) {
    const uint64_t since = client->state_since_ns();
    const uint64_t age = now > since ? now - since : 0;
    if (client->state() == ClientSession::State::kHello && config_.hello_timeout_sec > 0 &&
        age > ns(config_.hello_timeout_sec)) {
      part_with(*client, proto::Status::kTimeout,
                fmt::format("sent no hello within {:g} s of connecting (--hello-timeout-sec)",
                            config_.hello_timeout_sec));
    } else if (client->state() == ClientSession::State::kMapping && config_.map_timeout_sec > 0 &&
               age > ns(config_.map_timeout_sec)) {
      part_with(*client, proto::Status::kTimeout,
                fmt::format("local rank {} did not map its segment within {:g} s of the hello "
                            "reply (--map-timeout-sec)",
                            client->local_rank, config_.map_timeout_sec));
    }
  }
  for (auto& [name, served] : jobs_) {
    Job& job = served->job();
    if (served->group_formation != 0 && config_.attach_timeout_sec > 0 &&
        now - served->attach_since_ns > ns(config_.attach_timeout_sec)) {
      job_groups_->cancel(served->group_formation);
      served->group_formation = 0;
      job.state = Job::State::kFailed;
      send_job_ready(
          job, proto::Status::kTimeout,
          fmt::format("job '{}' did not form within {:g} s (--attach-timeout-sec): "
                      "the daemons of its {} nodes did not all come (this is node {}; "
                      "every node's ranks need the same NODECOMM_JOB and "
                      "NODECOMM_NODES, and each node its own NODECOMM_NODE)",
                      job.name, config_.attach_timeout_sec, job.asked_nodes, job.asked_node));
      continue;
    }
    if (job.state != Job::State::kAttaching) continue;
    if (served->attach_since_ns == 0) served->attach_since_ns = now;
    if (config_.attach_timeout_sec <= 0 ||
        now - served->attach_since_ns <= ns(config_.attach_timeout_sec)) {
      continue;
    }
    served->attach_since_ns = 0;
    part_with_unformed(job);
  }
}

void Daemon::part_with_unformed(Job& job) {
  std::vector<uint32_t> missing;
  for (uint32_t r = 0; r < job.local_size; ++r) {
    const ClientSession* m = job.members[r];
    if (m == nullptr || m->state() != ClientSession::State::kJoined) missing.push_back(r);
  }
  const std::string why = fmt::format(
      "job '{}' did not form within {:g} s (--attach-timeout-sec): {} of {} local ranks "
      "attached; local rank(s) {} never did",
      job.name, config_.attach_timeout_sec, job.attached, job.local_size, fmt::join(missing, ","));
  NC_LOG(kWarn, "{}", why);
  for (ClientSession* member : job.members) {
    if (member != nullptr) part_with(*member, proto::Status::kTimeout, why);
  }
}

}  // namespace nodecomm::daemon
