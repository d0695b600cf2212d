// nodecommd's main loop. One thread runs two duties, as Aeron's "shared" threading mode does:
// the conductor (control socket: attach, job formation, wake-ups, liveness) and the engine
// (rings, matching, reduction, network). On small nodes that are oversubscribed by training
// processes, one polling thread that backs off is cheaper than two that compete.
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "conductor/link_share.hpp"
#include "conductor/served_job.hpp"
#include "config/config.hpp"
#include "config/job_weights.hpp"
#include "engine/engine.hpp"
#include "engine/job.hpp"
#include "engine/staging.hpp"
#include "net/job_groups.hpp"
#include "net/peer_silence.hpp"
#include "net/transport.hpp"
#include "nodecomm/ipc/idle.hpp"
#include "nodecomm/ipc/socket.hpp"
#include "nodecomm/proto/control.hpp"
#include "observe/counters.hpp"
#include "session/client_session.hpp"

namespace nodecomm::daemon {

class Notifier;

// How the loop waits while only the network has work in flight.
ipc::IdleConfig network_idle_config(const DaemonConfig& config);

class Daemon {
 public:
  Daemon(DaemonConfig config, Transport& transport);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Creates the runtime directory, takes the instance lock, listens, and writes the ready
  // file. Throws std::runtime_error with the path and the reason.
  void start();
  // Serves clients until `stop` becomes true. Returns the process exit code.
  int run(const std::atomic<bool>& stop);

  const std::string& socket_path() const { return socket_path_; }
  const std::string& runtime_dir() const { return runtime_dir_; }
  // systemd: the loop pings the watchdog and refreshes STATUS= through it (notify.hpp).
  void set_notifier(Notifier* notifier) { notifier_ = notifier; }
  // A service daemon forms each multi-node job's group on demand through `groups`
  // (net/job_groups.hpp); without, it serves one-node jobs only (or the jobs of the group it
  // was launched in).
  // `why_none`: why a service daemon has none (its rendezvous could not be joined).
  void set_job_groups(JobGroupFormer* groups, std::string why_none = {}) {
    job_groups_ = groups;
    no_groups_reason_ = std::move(why_none);
  }
  // One line for systemd's STATUS=: clients, the job and its operations.
  std::string status_line();

 private:
  // One pass over every job; `now`: the pass's clock, read once.
  size_t do_work(uint64_t now);
  size_t work_on(ServedJob& served, uint64_t now);
  // The served job a client belongs to, or null.
  ServedJob* served_of(const ClientSession& client);
  // Jobs run one at a time here: the daemon's transport spans several nodes and every job
  // forms over all of them.
  bool one_job_at_a_time() const { return transport_.node_count() > 1; }
  // Fails every job running over `group` after one of its daemons was lost.
  void fail_jobs_over(const Transport& group, const std::string& text);
  void end_job(ServedJob& served);
  // Jobs moving data between nodes at once split this node's link by weight (link_share.hpp).
  void share_links(uint64_t now);
  // --allow-uids / --allow-groups: may this peer join a job that another uid started?
  bool may_join_others(const ClientSession& client) const;
  // Failure notices to and from the other daemons of the job: send_notices hands the engine's
  // to the others, exchange_notices does that and applies theirs.
  size_t send_notices(ServedJob& served);
  size_t exchange_notices(ServedJob& served);
  size_t service_sockets(int timeout_ms);
  void accept_clients();
  void on_readable(ClientSession& client);
  // nodecommctl set / trace (admin.cpp). apply_setting throws std::invalid_argument with a
  // message that names the key, the bad value and what is accepted.
  void on_admin(ClientSession& client, const proto::AdminRequest& request);
  std::string apply_setting(const std::string& key, const std::string& value);
  void on_hello(ClientSession& client, const proto::Hello& hello);
  void on_mapped(ClientSession& client);
  // Backs the segments of clients in kBacking, at most kBackingChunkBytes per call, and sends
  // each its hello reply once its segment is whole. Returns the number of clients served.
  size_t back_segments();
  void on_register(ClientSession& client, const proto::Register& request, const ipc::Fd& fd);
  // Drops every client whose registered region the SIGBUS handler had to replace.
  void drop_poisoned_regions();
  void reply_hello_error(ClientSession& client, proto::Status status, const std::string& text);
  void drop(ClientSession& client, const std::string& why);
  size_t progress_formation(ServedJob& served);
  // Every local rank of the job is here: forms its group if it needs one of its own, then
  // exchanges the nodes' records over it (job_formation.cpp).
  void start_formation(ServedJob& served);
  size_t progress_group(ServedJob& served);
  void start_exchange(ServedJob& served);
  void send_job_ready(Job& job, proto::Status status, const std::string& text);
  void reap();
  void deep_park();
  void heartbeat();
  // Heartbeats with the other daemons; a lost one fails the job's multi-node work.
  void check_peers(uint64_t now);
  // Drops joined clients whose library stopped writing its heartbeat.
  void check_client_heartbeats(uint64_t now);
  // The control socket's limits (control_limits.cpp). check_deadlines: hello, mapping and
  // attach deadlines. connection_limit: why a new connection from this peer is refused, or "".
  void check_deadlines(uint64_t now);
  // The attach deadline of `job` passed: its ranks are told which local ranks never came.
  void part_with_unformed(Job& job);
  size_t connections_of(uint32_t uid) const;
  std::string connection_limit(const ipc::PeerCredentials& cred) const;
  // Answers a refused connection's hello with `text` (NC_ERR_QUEUE_FULL) and closes it.
  void refuse_connection(ipc::Fd fd, const ipc::PeerCredentials& cred, const std::string& text);
  // Tells a client why it is dropped where its library waits for an answer, then drops it.
  void part_with(ClientSession& client, proto::Status status, const std::string& why);
  // Warns about a refusal or drop, at most once a second (a flood must not flood the log);
  // the text is only formatted when it is written.
  template <class... Args>
  void log_refusal(fmt::format_string<Args...> format, Args&&... args) {
    if (refusal_log_due()) write_refusal(fmt::format(format, std::forward<Args>(args)...));
  }
  bool refusal_log_due();
  void write_refusal(const std::string& text);
  // Paces accepting: a token bucket of connections; when it is empty the listening socket
  // leaves the epoll set, so a connection flood waits in the kernel's backlog (and in the
  // flooder's connect) instead of taking the loop. resume_accepts puts it back once a token
  // has been earned.
  bool accept_allowed(uint64_t now);
  void resume_accepts(uint64_t now);

  DaemonConfig config_;
  Transport& transport_;
  // Every job's staging pool reports its reservations here, so --max-staging caps them all.
  StagingLedger staging_ledger_;
  int numa_node_ = 0;  // where staging and client segments live
  ipc::IdleStrategy idle_;
  ipc::IdleStrategy network_idle_;
  std::string runtime_dir_;
  std::string socket_path_;
  std::string ready_path_;
  ipc::Fd lock_fd_;
  ipc::Fd listen_fd_;
  ipc::Fd epoll_fd_;
  uint32_t next_client_id_ = 1;
  std::map<uint32_t, std::unique_ptr<ClientSession>> clients_;
  // The jobs being served, by name. Over a daemon group launched together (an MPI world of
  // several nodes) one at a time, since forming a job takes every daemon of the group; else
  // any number up to --max-jobs, each over its own group (served_job.hpp).
  std::map<std::string, std::unique_ptr<ServedJob>> jobs_;
  uint64_t last_socket_check_ns_ = 0;
  uint64_t last_heartbeat_ns_ = 0;
  PeerSilenceClock client_silence_;  // pauses of this daemon, for the clients' heartbeats
  uint64_t client_grace_ns_ = 0;     // when the last such pause ended
  uint64_t last_network_activity_ = 0;
  uint64_t last_work_ns_ = 0;
  uint64_t last_refusal_log_ns_ = 0;
  uint64_t unlogged_refusals_ = 0;
  double accept_tokens_ = 0;  // filled to the burst at the first accept
  uint64_t accept_refill_ns_ = 0;
  bool accepts_paused_ = false;
  static constexpr uint64_t kShallowParkNs = 2'000'000;
  // Segment bytes backed per loop turn: about 35 ms at 0.57 s/GiB, well inside the peers'
  // heartbeat period, so that a 16 GiB arena does not make them declare this node lost.
  static constexpr uint64_t kBackingChunkBytes = 64ULL << 20;
  bool parked_ = false;
  Notifier* notifier_ = nullptr;
  JobGroupFormer* job_groups_ = nullptr;
  std::string no_groups_reason_;
  std::vector<WeightRule> job_weights_;  // parsed config_.job_weights
  LinkSharer link_sharer_;
  std::string lost_peer_;       // why this daemon's group can run no more multi-node jobs
  CountersPublisher counters_;  // the counters segment nodecommctl reads (counters.hpp)
};

}  // namespace nodecomm::daemon
