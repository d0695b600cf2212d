#include "conductor/daemon.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <pwd.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "conductor/memory_budget.hpp"
#include "conductor/notify.hpp"
#include "conductor/peer_groups.hpp"
#include "config/log.hpp"
#include "nodecomm/ipc/clock.hpp"
#include "nodecomm/ipc/fixed_text.hpp"
#include "nodecomm/ipc/futex.hpp"
#include "nodecomm/ipc/printable.hpp"
#include "nodecomm/ipc/private_dir.hpp"
#include "nodecomm/ipc/runtime_paths.hpp"
#include "nodecomm/proto/control.hpp"

namespace nodecomm::daemon {

namespace {
constexpr uint64_t kListenTag = 0;           // client ids start at 1
constexpr uint64_t kSocketCheckNs = 50'000;  // socket poll interval while busy
constexpr uint64_t kHeartbeatNs = 10'000'000;
constexpr int kParkTimeoutMs = 100;
// Bounded work per readiness event: a client that keeps its socket full, or a flood of
// connections, gets this much of the loop per pass and waits for the next (epoll is level-
// triggered, so what is left is reported again); the jobs' rings are served in between.
constexpr int kMessagesPerEvent = 16;
constexpr int kAcceptsPerEvent = 16;

}  // namespace

Daemon::Daemon(DaemonConfig config, Transport& transport)
    : config_(std::move(config)),
      transport_(transport),
      numa_node_(staging_numa_node(-1)),
      network_idle_(network_idle_config(config_)),
      job_weights_(parse_job_weights(config_.job_weights)) {}

Daemon::~Daemon() {
  if (!ready_path_.empty()) ::unlink(ready_path_.c_str());
  if (listen_fd_.valid()) ::unlink(socket_path_.c_str());
}

void Daemon::start() {
  runtime_dir_ = config_.runtime_dir.empty() ? ipc::instance_runtime_dir(config_.instance)
                                             : config_.runtime_dir;
  // 0711, owned by this uid, checked before use (ipc/private_dir.hpp says why not 0700): nobody
  // else can plant or swap a file in it. Each file below is still opened without following a
  // symbolic link, and one found at its path is refused.
  ipc::prepare_private_dir(runtime_dir_);
  const std::string lock_path = runtime_dir_ + "/nodecommd.lock";
  ipc::refuse_symlink(lock_path, "lock file");
  // No O_EXCL: a crashed daemon's lock file stays, and flock (not the file's existence) is
  // the lock. 0600: nobody else needs it, and nobody else may take the lock.
  lock_fd_ = ipc::Fd(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!lock_fd_.valid() && errno == ELOOP) ipc::refuse_symlink(lock_path, "lock file");
  if (!lock_fd_.valid() || ::flock(lock_fd_.get(), LOCK_EX | LOCK_NB) != 0) {
    throw std::runtime_error(fmt::format("instance '{}' is already running (lock {} is held: {})",
                                         config_.instance, lock_path, std::strerror(errno)));
  }
  socket_path_ = ipc::socket_path(runtime_dir_);
  ready_path_ = ipc::ready_path(runtime_dir_);
  const std::string tmp = ready_path_ + ".tmp";
  ipc::refuse_symlink(socket_path_, "socket");
  ipc::refuse_symlink(ready_path_, "ready file");
  ipc::refuse_symlink(tmp, "ready file");
  // 0666: any local user may connect; who may join a job is decided per connection from
  // SO_PEERCRED, not by the file mode.
  listen_fd_ = ipc::listen_unix(socket_path_, 0666);
  epoll_fd_ = ipc::Fd(::epoll_create1(EPOLL_CLOEXEC));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenTag;
  if (!epoll_fd_.valid() ||
      ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, listen_fd_.get(), &ev) != 0) {
    throw std::runtime_error(fmt::format("epoll: {}", std::strerror(errno)));
  }

  const nlohmann::json ready = {{"pid", ::getpid()},
                                {"node", transport_.node_index()},
                                {"nodes", transport_.node_count()},
                                {"socket", socket_path_},
                                {"instance", config_.instance},
                                {"transport", transport_.name()}};
  // A new file (O_EXCL, O_NOFOLLOW) renamed over the old one: readers never see half of it,
  // and rename replaces whatever is at the path instead of writing through it.
  ::unlink(tmp.c_str());  // a crashed daemon's; the lock we hold says no live one writes it
  {
    ipc::Fd out(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
    const std::string text = ready.dump() + "\n";
    if (!out.valid() || ::fchmod(out.get(), 0644) != 0 ||
        ::write(out.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
      throw std::runtime_error(fmt::format("cannot write {}: {}", tmp, std::strerror(errno)));
    }
  }
  if (::rename(tmp.c_str(), ready_path_.c_str()) != 0) {
    throw std::runtime_error(fmt::format("rename {}: {}", ready_path_, std::strerror(errno)));
  }
  counters_.watch_algorithm(&config_.tuning);
  counters_.open(config_, transport_, runtime_dir_, socket_path_);
  NC_LOG(kInfo, "ready: socket {}, node {} of {}, transport {}, staging on NUMA node {}",
         socket_path_, transport_.node_index(), transport_.node_count(), transport_.name(),
         numa_node_);
}

ipc::IdleConfig network_idle_config(const DaemonConfig& config) {
  ipc::IdleConfig c;
  // A few polls right after a message completes catch the next one cheaply; then sleeps,
  // because every poll is a syscall in Open MPI's TCP progress and the peers, the training
  // processes and the kernel's TCP need the CPU too. The cap bounds the idle link time: at
  // 1 Gbit/s, 200 us is 25 KB, far less than the socket buffers hold.
  c.spins = 50;
  c.yields = 0;
  c.min_park_ns = uint64_t{config.net_park_min_us} * 1000;
  c.max_park_ns = std::max(c.min_park_ns, uint64_t{config.net_park_max_us} * 1000);
  return c;
}

int Daemon::run(const std::atomic<bool>& stop) {
  // relaxed: the flag is set from a signal handler and only needs to be seen eventually.
  while (!stop.load(std::memory_order_relaxed)) {
    // Once per pass, for every job and the checks below: a spinning daemon passes millions of
    // times a second, and a clock read costs 40 ns on some virtual machines.
    const uint64_t now = ipc::monotonic_ns();
    size_t work = do_work(now) + back_segments();
    if (take_region_faults()) {
      drop_poisoned_regions();
      ++work;
    }
    uint64_t activity = transport_.activity();
    size_t network_in_flight = 0;
    for (auto& [name, served] : jobs_) {
      if (&served->transport() != &transport_) activity += served->transport().activity();
      network_in_flight += served->engine().network_in_flight();
    }
    if (activity != last_network_activity_) {
      last_network_activity_ = activity;
      ++work;  // messages are flowing: poll again soon rather than back off
    }
    if (now - last_socket_check_ns_ >= kSocketCheckNs) {
      last_socket_check_ns_ = now;
      work += service_sockets(0);
    }
    if (now - last_heartbeat_ns_ >= kHeartbeatNs) {
      last_heartbeat_ns_ = now;
      heartbeat();
    }
    if (work > 0) {
      idle_.reset();
      network_idle_.reset();
      last_work_ns_ = now;
      continue;
    }
    const bool network_busy = network_in_flight > 0;
    if (network_busy) {
      // MPI only progresses inside MPI calls: keep calling, but give the CPU away between
      // calls, since on a shared machine the peers and the kernel's TCP need it too.
      network_idle_.idle(0);
      continue;
    }
    network_idle_.reset();
    switch (idle_.next(0)) {
      case ipc::IdleStrategy::Phase::kSpin:
        ipc::cpu_relax();
        break;
      case ipc::IdleStrategy::Phase::kYield:
        sched_yield();
        break;
      case ipc::IdleStrategy::Phase::kPark:
        if (now - last_work_ns_ < kShallowParkNs) {
          // Training loops post again within microseconds of a completion: a short sleep
          // catches that without the clients' wake-up message round trip of a deep park.
          idle_.idle(0);
        } else {
          deep_park();
        }
        break;
    }
  }
  NC_LOG(kInfo, "stopping: {} client(s) attached", clients_.size());
  return 0;
}

size_t Daemon::do_work(uint64_t now) {
  size_t work = 0;
  for (auto& [name, served] : jobs_) work += work_on(*served, now);
  return work;
}

void Daemon::deep_park() {
  // Tell every client we are about to sleep, then look once more: a submission published
  // before a client saw the flag is caught here, one published after makes it send a wake.
  for (auto& [id, client] : clients_) client->set_daemon_parked(true);
  if (do_work(ipc::monotonic_ns()) > 0) {
    for (auto& [id, client] : clients_) client->set_daemon_parked(false);
    idle_.reset();
    return;
  }
  parked_ = true;
  service_sockets(kParkTimeoutMs);
  parked_ = false;
  for (auto& [id, client] : clients_) client->set_daemon_parked(false);
  heartbeat();
}

void Daemon::check_peers(uint64_t now) {
  if (config_.peer_timeout_sec <= 0) return;
  const auto timeout_ns = static_cast<uint64_t>(config_.peer_timeout_sec * 1e9);
  if (transport_.node_count() > 1) {
    for (const Transport::LostPeer& lost :
         transport_.check_peers(now, timeout_ns / 10, timeout_ns)) {
      NC_LOG(kError, "{}", lost.text);
      if (lost_peer_.empty()) lost_peer_ = lost.text;
      fail_jobs_over(transport_, lost.text);
    }
  }
  // Jobs over groups of their own: a lost daemon fails only the jobs it was part of.
  for (auto& [name, served] : jobs_) {
    Transport& group = served->transport();
    if (&group == &transport_ || group.node_count() == 1) continue;
    for (const Transport::LostPeer& lost : group.check_peers(now, timeout_ns / 10, timeout_ns)) {
      NC_LOG(kError, "job {}: {}", name, lost.text);
      fail_jobs_over(group, lost.text);
    }
  }
}

void Daemon::check_client_heartbeats(uint64_t now) {
  if (config_.client_timeout_sec <= 0) return;
  const auto timeout_ns = static_cast<uint64_t>(config_.client_timeout_sec * 1e9);
  // After a pause of this daemon's own (net/peer_silence.hpp) every client gets a full
  // timeout from now: its clock thread may have been paused with it.
  if (client_silence_.unobserved(now, timeout_ns / 10) != 0) client_grace_ns_ = now;
  for (auto& [id, client] : clients_) {
    if (client->state() != ClientSession::State::kJoined) continue;
    // relaxed: a timestamp from the client's clock thread; nothing else is read through it.
    const uint64_t beat =
        ipc::load_u64(client->segment().doorbells().client_heartbeat_ns, std::memory_order_relaxed);
    // 0: a library without a heartbeat thread (or none written yet); it is never timed out.
    if (beat == 0 || now <= beat || now - std::max(beat, client_grace_ns_) <= timeout_ns) continue;
    drop(*client, fmt::format("sent no heartbeat for {:.1f} s (--client-timeout-sec): the "
                              "process is stopped, frozen or starved of CPU",
                              static_cast<double>(now - beat) / 1e9));
  }
}

void Daemon::heartbeat() {
  const uint64_t now = ipc::monotonic_ns();
  // At most one of the two is backed by MPI (world mode's transport, or the service's job
  // groups), so the sum counts each retired communicator once.
  RetiredComms retired = transport_.tend(now);
  if (job_groups_ != nullptr) {
    const RetiredComms groups = job_groups_->tend(now);
    retired.retired += groups.retired;
    retired.late_dropped += groups.late_dropped;
  }
  counters_.retired_comms(retired);
  check_peers(now);
  check_client_heartbeats(now);
  check_deadlines(now);
  for (auto& [id, client] : clients_) client->heartbeat(now);
  share_links(now);
  // The counters list every job; the algorithm parameters in effect they show are the oldest
  // job's (its rounds may have agreed node 0's).
  ServedJob* shown = nullptr;
  std::vector<const Job*> jobs;
  jobs.reserve(jobs_.size());
  for (auto& [name, served] : jobs_) {
    jobs.push_back(&served->job());
    if (shown == nullptr || served->job().serial < shown->job().serial) shown = served.get();
  }
  counters_.watch_algorithm(shown != nullptr ? &shown->engine().algorithm_in_effect()
                                             : &config_.tuning);
  counters_.housekeeping(now, last_work_ns_, jobs, clients_, config_.limits.stall_sec);
  if (notifier_ != nullptr) notifier_->tick(now, [this] { return status_line(); });
}

std::string Daemon::status_line() {
  if (jobs_.empty()) {
    return fmt::format("waiting for a job: {} client(s) connected", clients_.size());
  }
  if (jobs_.size() > 1) {
    size_t running = 0;
    for (const auto& [name, served] : jobs_) {
      running += served->job().state == Job::State::kRunning ? 1 : 0;
    }
    return fmt::format("{} jobs ({} running): {} client(s)", jobs_.size(), running,
                       clients_.size());
  }
  const Job& job = jobs_.begin()->second->job();
  static constexpr const char* kStates[] = {"attaching", "forming", "running", "failed"};
  uint64_t ops = 0;  // collectives posted: the most any local rank has posted
  for (const ClientSession* member : job.members) {
    if (member == nullptr) continue;
    uint64_t posted = 0;
    for (const auto& [comm, next] : member->next_seq) posted += next - 1;
    ops = std::max(ops, posted);
  }
  size_t in_flight = 0;
  for (const auto& [id, comm] : job.comms) in_flight += comm->ops().size();
  return fmt::format("job '{}' {}: {} client(s), {}/{} local ranks, {} ops posted, {} in flight",
                     ipc::printable(job.name), kStates[static_cast<int>(job.state)],
                     clients_.size(), job.attached, job.local_size, ops, in_flight);
}

size_t Daemon::service_sockets(int timeout_ms) {
  if (accepts_paused_) {
    resume_accepts(ipc::monotonic_ns());
    // Paused: look again within a millisecond, when the next connection may be taken.
    if (accepts_paused_) timeout_ms = std::min(timeout_ms, 1);
  }
  epoll_event events[64];
  const int n = ::epoll_wait(epoll_fd_.get(), events, 64, timeout_ms);
  size_t work = 0;
  for (int i = 0; i < n; ++i) {
    ++work;
    if (events[i].data.u64 == kListenTag) {
      accept_clients();
      continue;
    }
    auto it = clients_.find(static_cast<uint32_t>(events[i].data.u64));
    if (it != clients_.end() && it->second->state() != ClientSession::State::kClosed) {
      on_readable(*it->second);
    }
  }
  reap();
  return work;
}

void Daemon::accept_clients() {
  for (int accepted = 0; accepted < kAcceptsPerEvent; ++accepted) {
    if (!accept_allowed(ipc::monotonic_ns())) return;
    ipc::Fd fd = ipc::accept_unix(listen_fd_.get());
    if (!fd.valid()) {
      accept_tokens_ += 1;  // nothing was waiting: the token is not spent
      return;
    }
    const auto cred = ipc::peer_credentials(fd.get());
    if (!cred) continue;
    // Refused at once, answering its hello: it never holds a slot, so connections over a
    // limit cannot use up --max-clients for others.
    if (std::string limit = connection_limit(*cred); !limit.empty()) {
      refuse_connection(std::move(fd), *cred, limit);
      continue;
    }
    const uint32_t id = next_client_id_++;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = id;
    if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd.get(), &ev) != 0) continue;
    NC_LOG(kDebug, "client {} connected: pid {} uid {}", id, cred->pid, cred->uid);
    clients_.emplace(id, std::make_unique<ClientSession>(id, std::move(fd), *cred));
    counters_.client_accepted();
    idle_ = ipc::IdleStrategy(
        ipc::IdleConfig::for_mode(config_.idle, static_cast<unsigned>(clients_.size()) + 1));
  }
}

void Daemon::on_readable(ClientSession& client) {
  alignas(8) uint8_t buffer[proto::kMaxControlMessageBytes];
  for (int handled = 0; handled < kMessagesPerEvent; ++handled) {
    size_t size = 0;
    ipc::Fd passed;  // only a kRegister carries one; any other is closed unused
    const ipc::IoResult r = ipc::recv_message(client.fd(), buffer, sizeof(buffer), size, &passed);
    if (r == ipc::IoResult::kWouldBlock) return;
    if (r != ipc::IoResult::kOk) {
      drop(client, "closed its control socket (the process exited or crashed)");
      return;
    }
    uint32_t type = 0;
    if (size >= sizeof(type)) std::memcpy(&type, buffer, sizeof(type));
    const auto kind = static_cast<proto::ControlType>(type);
    if (kind == proto::ControlType::kWake && size == sizeof(proto::Wake)) {
      if (client.state() == ClientSession::State::kJoined) continue;
      // Only a job's members have rings to serve; anyone else's wake-ups only cost the loop.
      part_with(client, proto::Status::kProtocol,
                fmt::format("protocol violation: a wake-up message before joining a job (only a "
                            "job's attached ranks may send them; this connection is in state {})",
                            client.state() == ClientSession::State::kHello ? "hello" : "mapping"));
      return;
    }
    if (kind == proto::ControlType::kHello && size == sizeof(proto::Hello) &&
        client.state() == ClientSession::State::kHello) {
      proto::Hello hello;
      std::memcpy(&hello, buffer, sizeof(hello));
      on_hello(client, hello);
    } else if (kind == proto::ControlType::kMapped && size == sizeof(proto::Mapped) &&
               client.state() == ClientSession::State::kMapping) {
      on_mapped(client);
    } else if (kind == proto::ControlType::kAdminRequest && size == sizeof(proto::AdminRequest) &&
               client.state() == ClientSession::State::kHello) {
      proto::AdminRequest request;
      std::memcpy(&request, buffer, sizeof(request));
      on_admin(client, request);
      // One request per connection, as nodecommctl sends: more would let one connection
      // repeat refused requests (and their log lines) at the loop's pace.
      drop(client, "admin request answered");
      return;
    } else if (kind == proto::ControlType::kRegister && size == sizeof(proto::Register) &&
               client.state() == ClientSession::State::kJoined) {
      proto::Register request;
      std::memcpy(&request, buffer, sizeof(request));
      on_register(client, request, passed);
    } else if (kind == proto::ControlType::kBye && size == sizeof(proto::Bye)) {
      drop(client, "called finalize");
      return;
    } else {
      drop(client, fmt::format("protocol violation: unexpected control message type {} of {} "
                               "bytes",
                               type, size));
      return;
    }
    if (client.state() == ClientSession::State::kClosed) return;
  }
}

void Daemon::reply_hello_error(ClientSession& client, proto::Status status,
                               const std::string& text) {
  proto::HelloReply reply{};
  reply.type = static_cast<uint32_t>(proto::ControlType::kHelloReply);
  reply.status = static_cast<int32_t>(status);
  // The text may quote another user's job name, which then reaches this user's terminal.
  ipc::copy_text(reply.message, ipc::printable(text));
  ipc::send_message(client.fd(), &reply, sizeof(reply));
  log_refusal("client {} (pid {}) refused: {}", client.id(), client.cred().pid, text);
  drop(client, "refused at attach");
}

bool Daemon::may_join_others(const ClientSession& client) const {
  const ipc::PeerCredentials& cred = client.cred();
  for (const std::string& entry : config_.allow_uids) {
    const passwd* user = ::getpwnam(entry.c_str());
    const std::string number = std::to_string(cred.uid);
    if (entry == number || (user != nullptr && user->pw_uid == cred.uid)) return true;
  }
  if (config_.allow_groups.empty()) return false;
  const std::vector<gid_t> groups = peer_groups(client.fd(), cred);
  for (const std::string& entry : config_.allow_groups) {
    const group* named = ::getgrnam(entry.c_str());
    for (const gid_t g : groups) {
      if (entry == std::to_string(g) || (named != nullptr && named->gr_gid == g)) return true;
    }
  }
  return false;
}

void Daemon::on_hello(ClientSession& client, const proto::Hello& hello) {
  using proto::Status;
  if (hello.magic != proto::kControlMagic || hello.layout_version != proto::kLayoutVersion) {
    return reply_hello_error(client, Status::kProtocol,
                             fmt::format("client speaks layout version {}, nodecommd speaks {}",
                                         hello.layout_version, proto::kLayoutVersion));
  }
  if (!ipc::is_terminated(hello.job) || hello.job[0] == '\0') {
    return reply_hello_error(client, Status::kInvalidArgument, "job name is empty or unterminated");
  }
  const std::string job_name = hello.job;
  if (!lost_peer_.empty()) {
    return reply_hello_error(client, Status::kPeerLost,
                             fmt::format("this daemon's group cannot run jobs any more: {}; "
                                         "restart the job's daemons",
                                         lost_peer_));
  }
  if (hello.local_size == 0 || hello.local_size > proto::kLocalSizeLimit ||
      hello.local_rank >= hello.local_size) {
    return reply_hello_error(
        client, Status::kInvalidArgument,
        fmt::format("local rank {} of local size {} (size must be 1..{})", hello.local_rank,
                    hello.local_size, proto::kLocalSizeLimit));
  }
  if (hello.node_count > proto::kMaxJobNodes ||
      (hello.node_count > 0 && hello.node_index >= hello.node_count)) {
    return reply_hello_error(client, Status::kInvalidArgument,
                             fmt::format("node {} of {} nodes (NODECOMM_NODE, NODECOMM_NODES; "
                                         "nodes must be 1..{})",
                                         hello.node_index, hello.node_count, proto::kMaxJobNodes));
  }
  if (one_job_at_a_time() && hello.node_count > 0 &&
      (hello.node_count != transport_.node_count() ||
       hello.node_index != transport_.node_index())) {
    return reply_hello_error(
        client, Status::kInvalidArgument,
        fmt::format("local rank {} says node {} of {} (NODECOMM_NODE, NODECOMM_NODES), but this "
                    "daemon is node {} of the {} launched for the job",
                    hello.local_rank, hello.node_index, hello.node_count, transport_.node_index(),
                    transport_.node_count()));
  }
  if (!one_job_at_a_time() && hello.node_count > 1 && job_groups_ == nullptr) {
    return reply_hello_error(
        client, Status::kInvalidArgument,
        no_groups_reason_.empty()
            ? fmt::format("job '{}' spans {} nodes (NODECOMM_NODES), but this daemon serves "
                          "one-node jobs only (transport {}; a multi-node service runs with "
                          "--transport service)",
                          job_name, hello.node_count, transport_.name())
            : fmt::format("job '{}' spans {} nodes (NODECOMM_NODES), but this service daemon "
                          "serves one-node jobs only: {}",
                          job_name, hello.node_count, no_groups_reason_));
  }
  const uint64_t arena = hello.arena_bytes == 0 ? config_.default_arena_bytes : hello.arena_bytes;
  if (arena > config_.max_arena_bytes) {
    return reply_hello_error(client, Status::kNoMemory,
                             fmt::format("arena of {} bytes requested; this daemon allows at most "
                                         "{} (--max-arena)",
                                         arena, config_.max_arena_bytes));
  }
  // A hello that would start a job checks against a job of its own, adopted only once the
  // rank is admitted: a refused hello leaves no job behind to hold the daemon.
  std::unique_ptr<Job> fresh;
  const auto existing = jobs_.find(job_name);
  if (existing == jobs_.end()) {
    if (one_job_at_a_time() && !jobs_.empty()) {
      return reply_hello_error(client, Status::kInvalidArgument,
                               fmt::format("this daemon is serving job '{}'; job '{}' must wait "
                                           "until it ends",
                                           jobs_.begin()->first, job_name));
    }
    if (jobs_.size() >= config_.max_jobs) {
      return reply_hello_error(client, Status::kQueueFull,
                               fmt::format("this daemon already serves {} jobs (the limit, "
                                           "--max-jobs); job '{}' must wait until one ends",
                                           jobs_.size(), job_name));
    }
    fresh = std::make_unique<Job>(job_name, hello.local_size);
    fresh->asked_node = hello.node_index;
    fresh->asked_nodes = hello.node_count;
  }
  Job& job = fresh ? *fresh : existing->second->job();
  if (job.state != Job::State::kAttaching) {
    return reply_hello_error(client, Status::kInvalidArgument,
                             fmt::format("job '{}' has already formed; local rank {} came too late",
                                         job_name, hello.local_rank));
  }
  if (job.local_size != hello.local_size) {
    return reply_hello_error(
        client, Status::kInvalidArgument,
        fmt::format("job '{}' has {} local ranks on this node, but local rank "
                    "{} says {}",
                    job_name, job.local_size, hello.local_rank, hello.local_size));
  }
  if (job.asked_nodes != hello.node_count || job.asked_node != hello.node_index) {
    return reply_hello_error(
        client, Status::kInvalidArgument,
        fmt::format("job '{}' runs on node {} of {} here, but local rank {} says node {} of {} "
                    "(NODECOMM_NODE, NODECOMM_NODES)",
                    job_name, job.asked_node, job.asked_nodes, hello.local_rank, hello.node_index,
                    hello.node_count));
  }
  if (ClientSession* other = job.members[hello.local_rank]; other != nullptr) {
    return reply_hello_error(client, Status::kInvalidArgument,
                             fmt::format("local rank {} of job '{}' is already attached by pid {}",
                                         hello.local_rank, job_name, other->cred().pid));
  }
  for (ClientSession* other : job.members) {
    if (other != nullptr && other->cred().uid != client.cred().uid && !may_join_others(client)) {
      return reply_hello_error(
          client, Status::kPermission,
          fmt::format("job '{}' belongs to uid {}; uid {} may not join it (nodecommd "
                      "--allow-uids or --allow-groups admits it)",
                      job_name, other->cred().uid, client.cred().uid));
    }
  }

  ipc::SegmentSpec spec;
  spec.submit_capacity = config_.ring_capacity;
  spec.complete_capacity = config_.ring_capacity;
  spec.arena_bytes = proto::align_up(arena, proto::kArenaAlignment);
  spec.numa_node = numa_node_;
  const uint64_t segment_bytes =
      proto::segment_geometry(spec.submit_capacity, spec.complete_capacity, spec.arena_bytes)
          .segment_bytes;
  // Before any page is asked for: where a cgroup's OOM killer would answer instead of an
  // error, it would kill this daemon. Segments still being backed count as taken.
  uint64_t unbacked = 0;
  for (const auto& [id, other] : clients_) {
    if (other->state() == ClientSession::State::kBacking) {
      unbacked += other->pending_segment.unbacked_bytes();
    }
  }
  if (const std::string why = memory_shortfall(segment_bytes + unbacked); !why.empty()) {
    return reply_hello_error(
        client, Status::kNoMemory,
        fmt::format("no memory for local rank {}'s {}-byte segment ({}-byte arena, +{} MiB "
                    "reserve): {}",
                    hello.local_rank, segment_bytes, spec.arena_bytes, kMemoryReserveBytes >> 20,
                    why));
  }
  try {
    client.pending_segment = ipc::Segment::reserve(spec, hello.local_rank);
  } catch (const ipc::SegmentError& e) {
    return reply_hello_error(client, e.no_memory() ? Status::kNoMemory : Status::kInternal,
                             e.what());
  }
  if (fresh) {
    // A one-node job runs over a group of its own: nothing of it reaches another job, and no
    // other job waits for it. Over a launched group of several nodes it takes the group.
    std::unique_ptr<Transport> own = one_job_at_a_time() ? nullptr : make_loopback_transport();
    Transport& group = own ? *own : transport_;
    jobs_.emplace(job_name, std::make_unique<ServedJob>(std::move(fresh), group, std::move(own),
                                                        config_, staging_ledger_, &counters_));
    // The log names the job while it is the only one.
    Log::get().set_job(jobs_.size() == 1 ? job_name : std::string());
  }
  // The first rank's settings count only once that rank is admitted.
  if (hello.local_rank == 0) job.requested = hello.tuning;
  client.job = &job;
  client.local_rank = hello.local_rank;
  job.members[hello.local_rank] = &client;
  client.set_state(ClientSession::State::kBacking);  // back_segments() goes on from here
}

size_t Daemon::back_segments() {
  for (auto& [id, entry] : clients_) {
    ClientSession& client = *entry;
    if (client.state() != ClientSession::State::kBacking) continue;
    ipc::Segment& segment = client.pending_segment;
    try {
      if (!segment.back(kBackingChunkBytes)) return 1;  // more next turn
      segment.finish(client.id());
    } catch (const ipc::SegmentError& e) {
      // What was backed goes back at once: under a limit, the daemon's own next page needs it.
      client.pending_segment = ipc::Segment();
      reply_hello_error(client, e.no_memory() ? proto::Status::kNoMemory : proto::Status::kInternal,
                        e.what());
      return 1;
    }
    client.attach_segment(std::move(segment));
    client.set_state(ClientSession::State::kMapping);
    // The segment travels as a descriptor with the reply (SCM_RIGHTS): it has no name anyone
    // could open, and its seals keep the client from resizing it under this daemon.
    proto::HelloReply reply{};
    reply.type = static_cast<uint32_t>(proto::ControlType::kHelloReply);
    reply.status = static_cast<int32_t>(proto::Status::kOk);
    reply.segment_bytes = client.segment().size();
    const ipc::IoResult sent =
        ipc::send_message(client.fd(), &reply, sizeof(reply), client.segment().fd());
    client.segment().close_fd();  // the mapping keeps the memory; the client has its own copy
    if (sent != ipc::IoResult::kOk) drop(client, "could not be sent its segment");
    return 1;
  }
  return 0;
}

void Daemon::on_mapped(ClientSession& client) {
  client.set_state(ClientSession::State::kJoined);
  Job& job = *client.job;
  ++job.attached;
  NC_LOG(kDebug, "job {}: local rank {} attached (pid {}), {}/{}", job.name, client.local_rank,
         client.cred().pid, job.attached, job.local_size);
  if (!job.all_attached()) return;
  if (ServedJob* served = served_of(client); served != nullptr) start_formation(*served);
}

void Daemon::on_register(ClientSession& client, const proto::Register& request, const ipc::Fd& fd) {
  proto::RegisterReply reply{};
  reply.type = static_cast<uint32_t>(proto::ControlType::kRegisterReply);
  uint32_t index = 0;
  std::string error;
  if (client.regions().add(fd, request.file_offset, request.bytes, config_.max_arena_bytes, index,
                           error)) {
    reply.status = static_cast<int32_t>(proto::Status::kOk);
    reply.region = index;
    NC_LOG(kDebug, "client {} (pid {}): region {} registered, {} bytes, {}", client.id(),
           client.cred().pid, index, request.bytes,
           client.regions().sealed(index) ? "sealed against shrinking"
                                          : "unsealable (guarded against truncation)");
  } else {
    reply.status = static_cast<int32_t>(proto::Status::kInvalidArgument);
    ipc::copy_text(reply.message,
                   fmt::format("nodecommd refused to register {} bytes at file offset {} for "
                               "local rank {} (pid {}): {}",
                               request.bytes, request.file_offset, client.local_rank,
                               client.cred().pid, error));
    NC_LOG(kWarn, "{}", reply.message);
  }
  if (ipc::send_message(client.fd(), &reply, sizeof(reply)) != ipc::IoResult::kOk) {
    drop(client, "could not be told whether its region was registered");
  }
}

void Daemon::drop_poisoned_regions() {
  for (auto& [id, client] : clients_) {
    if (client->state() == ClientSession::State::kClosed) continue;
    if (std::string text = client->regions().poisoned(); !text.empty()) {
      if (client->job != nullptr && client->job->state == Job::State::kRunning) {
        client->violation = text;  // the engine fails its operations, naming the rank
      } else {
        drop(*client, "protocol violation: " + text);
      }
    }
  }
}

void Daemon::drop(ClientSession& client, const std::string& why) {
  if (client.state() == ClientSession::State::kClosed) return;
  const bool was_joined = client.state() == ClientSession::State::kJoined;
  client.set_state(ClientSession::State::kClosed);
  client.pending_segment = ipc::Segment();  // a segment being backed: its pages, at once
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, client.fd(), nullptr);
  client.close_socket();
  Job* job = client.job;
  const bool loss =
      job != nullptr && job->state == Job::State::kRunning && why != "called finalize";
  Log::get().write(loss ? LogLevel::kWarn : LogLevel::kDebug,
                   "client {} (pid {}, local rank {}) {}", client.id(), client.cred().pid,
                   client.local_rank, why);
  if (job == nullptr) return;
  if (job->state == Job::State::kAttaching) {
    // Not formed yet: free the slot so a restarted rank can take it.
    if (job->members[client.local_rank] == &client) job->members[client.local_rank] = nullptr;
    if (was_joined) --job->attached;
    client.job = nullptr;
  } else if (ServedJob* served = served_of(client); served != nullptr) {
    served->engine().member_lost(*job, client, why);
  }
}

void Daemon::reap() {
  bool ended = false;
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    ServedJob& served = *it->second;
    bool any_live = false;
    for (ClientSession* member : served.job().members) {
      any_live =
          any_live || (member != nullptr && member->state() != ClientSession::State::kClosed);
    }
    const bool busy = served.job().formation != 0 || served.engine().has_inter_node_work();
    if (any_live || busy) {
      ++it;
      continue;
    }
    end_job(served);
    it = jobs_.erase(it);
    ended = true;
  }
  if (ended) {
    counters_.watch_algorithm(&config_.tuning);  // the next heartbeat picks the job shown
    Log::get().set_job(jobs_.size() == 1 ? jobs_.begin()->first : std::string());
  }
  const size_t before = clients_.size();
  for (auto it = clients_.begin(); it != clients_.end();) {
    if (it->second->state() == ClientSession::State::kClosed && it->second->job == nullptr) {
      it = clients_.erase(it);
    } else {
      ++it;
    }
  }
  if (clients_.size() != before) {
    idle_ = ipc::IdleStrategy(
        ipc::IdleConfig::for_mode(config_.idle, static_cast<unsigned>(clients_.size()) + 1));
  }
}

}  // namespace nodecomm::daemon
