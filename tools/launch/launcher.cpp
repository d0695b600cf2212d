#include "launcher.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <system_error>

#include "nodecomm/ipc/runtime_paths.hpp"

namespace nodecomm::launch {
namespace {

using namespace std::chrono_literals;

constexpr auto kReadyPollInterval = 20ms;
// Daemons are ready in well under a second; a minute covers a heavily oversubscribed machine.
constexpr auto kReadyTimeout = 60s;
// After a rank fails, its daemon fails the other ranks' pending operations, so they normally
// exit on their own; this is how long they get before the launcher steps in.
constexpr auto kFailureGrace = 10s;
constexpr auto kTermToKill = 2s;
// Long enough for every daemon's MPI_Finalize on a loaded machine.
constexpr auto kDaemonStopTimeout = 15s;
// For processes already sent SIGKILL to be reaped.
constexpr auto kReapTimeout = 5s;
// More than this many names in one message is noise.
constexpr size_t kMaxListedRanks = 16;
// A line this long without a newline is forwarded anyway, so memory stays bounded.
constexpr size_t kMaxPartialLine = size_t{64} * 1024;
constexpr const char* kMpirunPrefix = "[mpirun] ";

std::string list_text(const std::string& one, const std::string& many,
                      const std::vector<std::string>& items) {
  std::string text = items.size() == 1 ? one : many;
  for (size_t i = 0; i < items.size() && i < kMaxListedRanks; ++i) {
    text += (i == 0 ? " " : ", ") + items[i];
  }
  if (items.size() > kMaxListedRanks) {
    text += fmt::format(" and {} more", items.size() - kMaxListedRanks);
  }
  return text;
}

// A TCP port free on the loopback now, for torch.distributed's env:// rendezvous (rank 0
// listens there a moment later; another process could take it meanwhile, as with torchrun's
// own choice).
int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 29500;  // torch's default
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 29500;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

}  // namespace

Launcher::Launcher(Options options)
    : opts_(std::move(options)),
      self_pid_(::getpid()),
      job_(opts_.job.empty() ? fmt::format("launch-{}", self_pid_) : opts_.job),
      start_(Clock::now()),
      deadline_(start_ + std::chrono::seconds(opts_.timeout_s)) {
  sigemptyset(&child_mask_);
  daemons_.resize(static_cast<size_t>(opts_.nodes));
  int world = 0;
  for (int node = 0; node < opts_.nodes; ++node) {
    for (int local = 0; local < opts_.ranks_per_node[static_cast<size_t>(node)]; ++local) {
      ranks_.push_back(Rank{.world = world++, .node = node, .local = local});
    }
  }
}

int Launcher::run() {
  const bool mpi = baseline();
  int code = 1;
  try {
    code = mpi ? run_mpi_job() : opts_.attach ? run_attached_job() : run_job();
  } catch (const std::exception& e) {
    write_stderr(fmt::format("nodecomm-launch: {}\n", e.what()));
    try {
      kill_everything();
    } catch (const std::exception& inner) {
      write_stderr(fmt::format("nodecomm-launch: while killing the job: {}\n", inner.what()));
    }
    code = abort_code_ != 0 ? abort_code_ : 1;
  }
  finish();
  // With --backend mpi or gloo the ranks are mpirun's; run_mpi_job and mpirun itself reported them.
  if (mpi) return code;

  const auto failed = std::count_if(ranks_.begin(), ranks_.end(), [](const Rank& rank) {
    return !rank.finished || !wait_status_ok(rank.status);
  });
  if (code == 0 && (failed > 0 || daemons_failed_)) code = 1;
  if (code != 0) {
    write_stderr(fmt::format("nodecomm-launch: {} of {} ranks failed{}\n", failed, total_ranks(),
                             ranks_started_ ? "" : " (none started)"));
  }
  return code;
}

int Launcher::run_job() {
  setup();
  if (!start_netsim()) return abort_code_ != 0 ? abort_code_ : 1;
  start_mpirun();
  if (!wait_ready()) return abort_code_ != 0 ? abort_code_ : 1;
  start_ranks();
  if (!wait_ranks()) return abort_code_;
  if (!stop_daemons()) return abort_code_;
  // run() turns failed ranks and daemon trouble into 1.
  return 0;
}

int Launcher::run_mpi_job() {
  setup();
  if (!start_netsim()) return abort_code_ != 0 ? abort_code_ : 1;
  start_mpirun();
  ranks_started_ = true;
  while (mpirun_running_) {
    if (aborting()) return abort_code_;
    pump(deadline_);
  }
  if (wait_status_ok(mpirun_status_)) return 0;
  write_stderr(fmt::format("nodecomm-launch: mpirun with {} ranks {}\n", total_ranks(),
                           describe_wait_status(mpirun_status_)));
  return 1;
}

void Launcher::setup() {
  // Signals first, so that an early Ctrl-C still finds us cleaning up what we made. SIGPIPE is
  // blocked so a closed stderr shows up as EPIPE instead of killing the launcher mid-cleanup.
  sigset_t handled;
  sigemptyset(&handled);
  // SIGHUP and SIGQUIT too: left at their defaults they would end the launcher without cleanup.
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD}) sigaddset(&handled, sig);
  sigset_t blocked = handled;
  sigaddset(&blocked, SIGPIPE);
  if (::sigprocmask(SIG_BLOCK, &blocked, &child_mask_) != 0) {
    throw std::system_error(errno, std::generic_category(), "sigprocmask");
  }
  signal_fd_ = ipc::Fd(::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!signal_fd_.valid()) throw std::system_error(errno, std::generic_category(), "signalfd");
  // Orphans of ranks and daemons (when mpirun dies) are reparented to us instead of init, so we
  // can reap and, at the end, kill whatever is left.
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    throw std::system_error(errno, std::generic_category(), "prctl(PR_SET_CHILD_SUBREAPER)");
  }
  dev_null_ = ipc::Fd(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!dev_null_.valid()) throw std::system_error(errno, std::generic_category(), "open /dev/null");

  // --backend mpi or gloo runs no daemons, --attach neither daemons nor mpirun.
  if (!baseline() && !opts_.attach) resolve_daemon();
  mpirun_path_ = opts_.attach ? std::string() : find_executable(opts_.mpirun);
  if (mpirun_path_.empty() && !opts_.attach) {
    throw std::runtime_error(
        fmt::format("--mpirun {}: no such executable file{}", opts_.mpirun,
                    opts_.mpirun.find('/') == std::string::npos ? " in PATH" : ""));
  }
  program_path_ = find_executable(opts_.program.front());
  if (program_path_.empty()) {
    throw std::runtime_error(
        fmt::format("PROGRAM {}: no such executable file{}", opts_.program.front(),
                    opts_.program.front().find('/') == std::string::npos ? " in PATH" : ""));
  }

  if (opts_.attach) return;  // the cluster's runtime directories, not ours (attach_to_cluster)
  // Under /tmp rather than $TMPDIR: socket paths must stay within sun_path's 108 bytes.
  char base[] = "/tmp/nodecomm-launch.XXXXXX";
  if (::mkdtemp(base) == nullptr) {
    throw std::system_error(errno, std::generic_category(), "mkdtemp /tmp/nodecomm-launch.XXXXXX");
  }
  base_dir_ = base;
  verbose(fmt::format("job {}, runtime dirs under {}", job_, base_dir_));
}

void Launcher::resolve_daemon() {
  daemon_path_ = resolve_nodecommd(opts_.daemon);
}

bool Launcher::wait_ready() {
  const auto ready_deadline = std::min(Clock::now() + kReadyTimeout, deadline_);
  while (true) {
    if (aborting()) return false;
    bool all_ready = true;
    for (int node = 0; node < opts_.nodes; ++node) {
      if (!daemons_[static_cast<size_t>(node)] && !try_read_ready(node)) all_ready = false;
    }
    if (all_ready) {
      verbose(fmt::format(
          "all {} daemons ready after {} ms", opts_.nodes,
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start_).count()));
      return true;
    }
    if (mpirun_exited_) {
      write_stderr(fmt::format(
          "nodecomm-launch: mpirun {} before all daemons were ready ({} not ready){}\n",
          describe_wait_status(mpirun_status_), unready_nodes_text(),
          mpirun_said_something_ ? "; its output is above, prefixed with [mpirun]" : ""));
      daemons_failed_ = true;
      kill_everything();
      return false;
    }
    const auto now = Clock::now();
    // At the overall deadline aborting() reports a timeout instead.
    if (ready_deadline < deadline_ && now >= ready_deadline) {
      write_stderr(fmt::format(
          "nodecomm-launch: daemons not ready after {} s ({} not ready); killing them\n",
          std::chrono::duration_cast<std::chrono::seconds>(kReadyTimeout).count(),
          unready_nodes_text()));
      daemons_failed_ = true;
      kill_everything();
      return false;
    }
    pump(std::min(now + kReadyPollInterval, ready_deadline));
  }
}

bool Launcher::try_read_ready(int node) {
  const std::string path = ipc::ready_path(runtime_dir(node));
  std::ifstream in(path);
  if (!in) return false;  // not written yet; the daemon renames it into place when complete
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  long long pid = 0;
  int ready_node = -1;
  int ready_nodes = -1;
  std::string socket;
  std::string ready_instance;
  try {
    const auto ready = nlohmann::json::parse(text);
    pid = ready.at("pid").get<long long>();
    ready_node = ready.at("node").get<int>();
    ready_nodes = ready.at("nodes").get<int>();
    socket = ready.at("socket").get<std::string>();
    ready_instance = ready.at("instance").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(fmt::format("ready file {}: {}", path, e.what()));
  }
  if (ready_node != node || ready_nodes != opts_.nodes) {
    throw std::runtime_error(
        fmt::format("ready file {} is for node {} of {}, expected node {} of {}", path, ready_node,
                    ready_nodes, node, opts_.nodes));
  }
  const auto process = pid > 0 ? process_ref(static_cast<pid_t>(pid)) : std::nullopt;
  if (!process) {
    throw std::runtime_error(
        fmt::format("ready file {} names pid {}, which is not running", path, pid));
  }
  if (ready_instance != instance(node)) {
    // Not fatal, but /dev/shm cleanup only knows the names this launcher asked for.
    write_stderr(
        fmt::format("nodecomm-launch: warning: node {} daemon calls itself '{}', not '{}'\n", node,
                    ready_instance, instance(node)));
  }
  verbose(fmt::format("node {} ready: daemon pid {}, socket {}", node, pid, socket));
  daemons_[static_cast<size_t>(node)] = *process;
  return true;
}

void Launcher::start_ranks() {
  // Like mpirun, only rank 0 gets our stdin; not a terminal, though: ranks run in background
  // process groups, where reading the terminal would stop them with SIGTTIN.
  const bool rank0_gets_stdin = ::isatty(STDIN_FILENO) == 0;
  // torch.distributed's env:// variables (as torchrun sets them), so that
  // init_process_group("nodecomm") needs no arguments: every simulated node is this host.
  const std::string master_port = std::to_string(free_loopback_port());
  const std::string world_size = std::to_string(ranks_.size());
  for (Rank& rank : ranks_) {
    const std::string local_size =
        std::to_string(opts_.ranks_per_node[static_cast<size_t>(rank.node)]);
    SpawnSpec spec;
    spec.path = program_path_;
    spec.argv = opts_.program;
    std::vector<std::pair<std::string, std::string>> env{
        {"NODECOMM_RUNTIME_DIR", runtime_dir(rank.node)},
        {"NODECOMM_JOB", job_},
        {"NODECOMM_LOCAL_RANK", std::to_string(rank.local)},
        {"NODECOMM_LOCAL_SIZE", local_size},
        {"NODECOMM_NODE", std::to_string(rank.node)},
        {"NODECOMM_NODES", std::to_string(opts_.nodes)},
        {"NODECOMM_WORLD_RANK_HINT", std::to_string(rank.world)},
        {"NODECOMM_BACKEND", "nodecomm"},
        {"RANK", std::to_string(rank.world)},
        {"WORLD_SIZE", world_size},
        {"LOCAL_RANK", std::to_string(rank.local)},
        {"LOCAL_WORLD_SIZE", local_size},
        {"GROUP_RANK", std::to_string(rank.node)},
        {"MASTER_ADDR", "127.0.0.1"},
        {"MASTER_PORT", master_port},
    };
    if (!link_rate_.empty()) env.emplace_back("NODECOMM_LINK_RATE", link_rate_);
    if (oversubscribed() && std::getenv("NODECOMM_IDLE") == nullptr) {
      env.emplace_back("NODECOMM_IDLE", "backoff");
    }
    spec.env = environment_with(env);
    spec.stdin_fd = rank.world == 0 && rank0_gets_stdin ? -1 : dev_null_.get();
    // If the launcher is SIGKILLed, nothing else would stop the ranks.
    spec.parent_death_signal = SIGKILL;
    spec.signal_mask = child_mask_;
    rank.pid = spawn(spec);
    rank.running = true;
    ranks_started_ = true;
    rank_by_pid_[rank.pid] = static_cast<size_t>(rank.world);
    verbose(fmt::format("started {}", describe_rank(rank)));
  }
}

bool Launcher::wait_ranks() {
  bool mpirun_reported = false;
  std::optional<Clock::time_point> term_sent;
  bool kill_sent = false;
  const auto any_running = [this] {
    return std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; });
  };
  while (any_running()) {
    if (aborting()) return false;
    const auto now = Clock::now();
    if (mpirun_exited_ && !mpirun_reported) {
      mpirun_reported = true;
      daemons_failed_ = true;
      write_stderr(fmt::format(
          "nodecomm-launch: mpirun {} while ranks were running; the daemons are gone{}\n",
          describe_wait_status(mpirun_status_),
          mpirun_said_something_ ? " (see [mpirun] output above)" : ""));
      if (!first_failure_) first_failure_ = now;
    }
    auto next = deadline_;
    if (first_failure_) {
      const auto grace_end = *first_failure_ + kFailureGrace;
      if (!term_sent && now >= grace_end) {
        write_stderr(fmt::format(
            "nodecomm-launch: {} still running {} s after the first failure; sending SIGTERM\n",
            running_ranks_text(),
            std::chrono::duration_cast<std::chrono::seconds>(kFailureGrace).count()));
        kill_running_ranks(SIGTERM);
        term_sent = now;
      } else if (term_sent && !kill_sent && now >= *term_sent + kTermToKill) {
        write_stderr(
            fmt::format("nodecomm-launch: {} still running after SIGTERM; sending SIGKILL\n",
                        running_ranks_text()));
        kill_running_ranks(SIGKILL);
        kill_sent = true;
      }
      if (!term_sent) {
        next = std::min(next, grace_end);
      } else if (!kill_sent) {
        next = std::min(next, *term_sent + kTermToKill);
      }
    }
    pump(next);
  }
  return true;
}

bool Launcher::stop_daemons() {
  if (!mpirun_running_) return true;  // wait_ranks already reported it
  // mpirun runs with --enable-recovery, so a daemon that died does not end the others (or
  // mpirun): it is found here.
  for (size_t node = 0; node < daemons_.size(); ++node) {
    if (daemons_[node] && !signal_process(*daemons_[node], 0)) {
      daemons_failed_ = true;
      write_stderr(
          fmt::format("nodecomm-launch: the daemon of node {} (pid {}) died during the "
                      "job\n",
                      node, daemons_[node]->pid));
    }
  }
  verbose("all ranks done; sending SIGTERM to the daemons");
  kill_daemons(SIGTERM);
  const auto stop_deadline = Clock::now() + kDaemonStopTimeout;
  while (mpirun_running_) {
    if (aborting()) return false;
    if (Clock::now() >= stop_deadline) {
      write_stderr(fmt::format(
          "nodecomm-launch: daemons still running {} s after SIGTERM; killing them\n",
          std::chrono::duration_cast<std::chrono::seconds>(kDaemonStopTimeout).count()));
      daemons_failed_ = true;
      kill_everything();
      return true;
    }
    pump(std::min(stop_deadline, deadline_));
  }
  if (!wait_status_ok(mpirun_status_)) {
    daemons_failed_ = true;
    write_stderr(fmt::format("nodecomm-launch: daemons did not stop cleanly: mpirun {}{}\n",
                             describe_wait_status(mpirun_status_),
                             mpirun_said_something_ ? " (see [mpirun] output above)" : ""));
  } else if (sanitizer_reported_) {
    daemons_failed_ = true;
    write_stderr(
        "nodecomm-launch: a sanitizer reported an error in a daemon (see [mpirun] "
        "output above)\n");
  }
  verbose("daemons stopped");
  return true;
}

void Launcher::finish() {
  try {
    sweep_leftovers();
  } catch (const std::exception& e) {
    write_stderr(fmt::format("nodecomm-launch: while killing leftover processes: {}\n", e.what()));
  }
  for (OutputPipe* pipe : {&mpirun_out_, &mpirun_err_}) {
    if (pipe->fd.valid()) drain_output(*pipe);
    forward_lines(*pipe, true);
  }
  cleanup_files();
}

bool Launcher::aborting() {
  if (abort_code_ != 0) return true;
  std::string why;
  if (caught_signal_ != 0) {
    abort_code_ = 128 + caught_signal_;
    why = fmt::format("caught {}", signal_name(caught_signal_));
  } else if (Clock::now() >= deadline_) {
    abort_code_ = 124;
    why = fmt::format("timeout after {} s", opts_.timeout_s);
  } else {
    return false;
  }
  std::vector<std::string> targets;
  if (const std::string running = running_ranks_text(); !running.empty()) {
    targets.push_back(running + " still running");
  }
  if (mpirun_running_ && baseline()) {
    targets.push_back(fmt::format("mpirun and its {} ranks", total_ranks()));
  } else if (mpirun_running_) {
    const std::string unready = unready_nodes_text();
    targets.push_back(unready.empty()
                          ? "the daemons and mpirun"
                          : fmt::format("the daemons ({} not ready) and mpirun", unready));
  }
  std::string message = fmt::format("nodecomm-launch: {}; ", why);
  message += targets.empty() ? "nothing left to kill"
                             : fmt::format("killing {}", fmt::join(targets, ", "));
  if (!ranks_started_) message += "; no ranks were started";
  write_stderr(message + "\n");
  kill_everything();
  return true;
}

void Launcher::kill_everything() {
  // Everything from here on was killed by us, and the abort message already named it; mpirun's
  // protests about its killed daemons would only suggest a second problem.
  quiet_rank_exits_ = true;
  mute_mpirun_ = !opts_.verbose;
  kill_running_ranks(SIGKILL);
  remember_mpi_segments();
  if (baseline() && mpirun_running_) {
    // mpirun before its ranks: it would report their deaths as a failure of their own. They
    // stay ours to signal: as orphans they are reparented to us and cannot be reaped meanwhile.
    const auto ranks = children_of(mpirun_pid_);
    signal_group(mpirun_pid_, SIGKILL);
    mpirun_sigkilled_ = true;
    for (const auto& [pid, comm] : ranks) ::kill(pid, SIGKILL);
  }
  kill_daemons(SIGKILL);
  if (mpirun_running_) {
    // Left alone, mpirun would take 1-2 s (odls_base_sigkill_timeout) to notice its dead daemons
    // and remove its session directory and vader segments; cleanup_files() does that instead.
    signal_group(mpirun_pid_, SIGKILL);
    mpirun_sigkilled_ = true;
  }
  // Under --netsim, Open MPI's daemons (and with --backend mpi or gloo the ranks) are orphans in
  // the host namespaces, reparented to us once their agent shells are gone. Done once none is left,
  // and every one killed is reaped (gone from the process table).
  std::set<pid_t> killed_inside;
  const auto kill_netsim_processes = [&] {
    if (!netsim_) return true;
    for (const auto& [pid, comm] : netsim_->processes_inside(self_pid_)) {
      ::kill(pid, SIGKILL);
      killed_inside.insert(pid);
    }
    return std::all_of(killed_inside.begin(), killed_inside.end(),
                       [](pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; });
  };
  kill_netsim_processes();
  wait_until(Clock::now() + kReapTimeout, [&] {
    return !mpirun_running_ &&
           std::none_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; }) &&
           kill_netsim_processes();
  });
}

void Launcher::kill_running_ranks(int sig) {
  for (Rank& rank : ranks_) {
    // Only unreaped leaders: their group id cannot have been reused. Orphans of reaped ranks
    // were reparented to us and are swept at the end.
    if (!rank.running) continue;
    signal_group(rank.pid, sig);
    rank.signalled_with = sig;
  }
}

void Launcher::kill_daemons(int sig) {
  for (const auto& daemon : daemons_) {
    if (daemon) signal_process(*daemon, sig);
  }
  // Daemons that never wrote a ready file are known only as mpirun's children.
  if (sig == SIGKILL && mpirun_running_) {
    for (const auto& [pid, comm] : children_of(mpirun_pid_)) ::kill(pid, SIGKILL);
  }
}

void Launcher::remember_mpi_segments() {
  if (!mpirun_running_) return;
  std::vector<pid_t> pids;
  for (const auto& daemon : daemons_) {
    if (daemon) pids.push_back(daemon->pid);
  }
  for (const auto& [pid, comm] : children_of(mpirun_pid_)) pids.push_back(pid);
  for (pid_t pid : pids) {
    for (auto& name : shm_files_mapped_by(pid)) {
      if (name.starts_with("vader_segment.")) mpi_segments_.insert(std::move(name));
    }
  }
}

template <typename Done>
void Launcher::wait_until(Clock::time_point until, Done done) {
  while (!done() && Clock::now() < until) pump(until);
}

void Launcher::sweep_leftovers() {
  if (mpirun_running_ ||
      std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; })) {
    kill_everything();
  }
  std::set<pid_t> seen;
  std::vector<std::string> killed;
  const auto until = Clock::now() + kReapTimeout;
  while (Clock::now() < until) {
    const auto children = children_of(self_pid_);
    if (children.empty()) break;
    for (const auto& [pid, comm] : children) {
      ::kill(pid, SIGKILL);
      if (seen.insert(pid).second) killed.push_back(fmt::format("{} ({})", pid, comm));
    }
    // Reaping one generation lets the next be reparented to us.
    pump(std::min(until, Clock::now() + 50ms));
  }
  if (!killed.empty()) {
    write_stderr(fmt::format("nodecomm-launch: killed {} leftover processes: {}\n", killed.size(),
                             fmt::join(killed, ", ")));
  }
}

void Launcher::cleanup_files() {
  // Attached ranks use the cluster's daemons, whose files are theirs until --service down.
  if (opts_.attach) return;
  std::vector<std::string> errors;
  std::vector<std::string> prefixes;
  for (int node = 0; node < opts_.nodes; ++node) {
    std::string prefix = ipc::segment_prefix(instance(node));
    if (prefix.starts_with('/')) prefix.erase(0, 1);  // shm_open names are /dev/shm/<name>
    prefixes.push_back(std::move(prefix));
  }
  // Covers any other per-node name a daemon may derive from its instance.
  prefixes.push_back(fmt::format("nodecomm.{}-node", job_));
  const auto removed = remove_shm_entries(prefixes, errors);
  if (!removed.empty()) {
    verbose(fmt::format("removed {} from /dev/shm", fmt::join(removed, ", ")));
  }
  // What a live mpirun would have removed itself.
  if (mpirun_sigkilled_) {
    const auto session_dirs = remove_ompi_session_dirs(mpirun_pid_, errors);
    if (!session_dirs.empty()) verbose(fmt::format("removed {}", fmt::join(session_dirs, ", ")));
    for (const auto& name : mpi_segments_) {
      const std::string path = "/dev/shm/" + name;
      if (::unlink(path.c_str()) == 0) {
        verbose(fmt::format("removed {}", path));
      } else if (errno != ENOENT) {
        errors.push_back(fmt::format("unlink {}: {}", path, std::strerror(errno)));
      }
    }
  }
  if (netsim_) {
    // After sweep_leftovers: nothing of ours is left inside the namespaces.
    netsim_->teardown(errors);
    verbose(fmt::format("netsim: removed the namespaces {}h*, {}", netsim_->prefix(),
                        netsim_->switch_name()));
  }
  if (!base_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(base_dir_, ec);
    if (ec) errors.push_back(fmt::format("remove {}: {}", base_dir_, ec.message()));
  }
  for (const auto& error : errors) {
    write_stderr(fmt::format("nodecomm-launch: cleanup: {}\n", error));
  }
}

void Launcher::pump(Clock::time_point until) {
  pollfd fds[3];
  OutputPipe* pipes[2];
  nfds_t count = 0;
  size_t pipe_count = 0;
  // poll ignores a negative fd, so this works before setup() made the signalfd too.
  fds[count++] = pollfd{signal_fd_.get(), POLLIN, 0};
  for (OutputPipe* pipe : {&mpirun_out_, &mpirun_err_}) {
    if (!pipe->fd.valid()) continue;
    fds[count++] = pollfd{pipe->fd.get(), POLLIN, 0};
    pipes[pipe_count++] = pipe;
  }
  const auto now = Clock::now();
  const long long wait_ms =
      until > now ? std::chrono::ceil<std::chrono::milliseconds>(until - now).count() : 0;
  // Capped so a clock oddity can never park us; every caller re-checks its deadlines.
  const int ready = ::poll(fds, count, static_cast<int>(std::min(wait_ms, 1000LL)));
  if (ready < 0 && errno != EINTR) throw std::system_error(errno, std::generic_category(), "poll");
  if (ready > 0) {
    if ((fds[0].revents & POLLIN) != 0) {
      signalfd_siginfo info{};
      while (::read(signal_fd_.get(), &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
        const int sig = static_cast<int>(info.ssi_signo);
        // reap() below handles every child; after the first signal, the job is going down anyway.
        if (sig != SIGCHLD && caught_signal_ == 0) caught_signal_ = sig;
      }
    }
    for (size_t i = 0; i < pipe_count; ++i) {
      if ((fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) drain_output(*pipes[i]);
    }
  }
  reap();
}

void Launcher::reap() {
  while (true) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;  // none ready, or no children at all
    if (pid == mpirun_pid_ && mpirun_running_) {
      on_mpirun_exit(status);
    } else if (const auto it = rank_by_pid_.find(pid); it != rank_by_pid_.end()) {
      const size_t index = it->second;
      rank_by_pid_.erase(it);  // the pid may come back as an unrelated orphan
      on_rank_exit(ranks_[index], status);
    }
    // Anything else is an orphaned descendant reparented to us; reaping it is all it needs.
  }
}

void Launcher::on_rank_exit(Rank& rank, int status) {
  rank.running = false;
  rank.finished = true;
  rank.status = status;
  if (wait_status_ok(status)) {
    verbose(fmt::format("{} exited with status 0", describe_rank(rank)));
    return;
  }
  if (!quiet_rank_exits_) {
    std::string note;
    if (rank.signalled_with != 0) {
      note =
          WIFSIGNALED(status) && WTERMSIG(status) == rank.signalled_with
              ? " (sent by nodecomm-launch)"
              : fmt::format(" (after nodecomm-launch sent {})", signal_name(rank.signalled_with));
    }
    write_stderr(fmt::format("nodecomm-launch: {} {}{}\n", describe_rank(rank),
                             describe_wait_status(status), note));
  }
  if (!first_failure_) first_failure_ = Clock::now();
}

void Launcher::on_mpirun_exit(int status) {
  mpirun_running_ = false;
  mpirun_exited_ = true;
  mpirun_status_ = status;
  // Its last words are in the pipes already; show them before anyone reports on its exit.
  for (OutputPipe* pipe : {&mpirun_out_, &mpirun_err_}) {
    if (pipe->fd.valid()) drain_output(*pipe);
  }
  verbose(fmt::format("mpirun (pid {}) {}", mpirun_pid_, describe_wait_status(status)));
}

void Launcher::drain_output(OutputPipe& pipe) {
  char buf[16384];
  while (pipe.fd.valid()) {
    const ssize_t n = ::read(pipe.fd.get(), buf, sizeof(buf));
    if (n > 0) {
      pipe.partial.append(buf, static_cast<size_t>(n));
      forward_lines(pipe, false);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    // EOF, or an error that will not go away.
    forward_lines(pipe, true);
    pipe.fd.reset();
  }
}

void Launcher::forward_lines(OutputPipe& pipe, bool flush_partial) {
  std::string out;
  size_t begin = 0;
  for (size_t newline; (newline = pipe.partial.find('\n', begin)) != std::string::npos;
       begin = newline + 1) {
    const std::string_view line(pipe.partial.data() + begin, newline + 1 - begin);
    sanitizer_reported_ = sanitizer_reported_ || is_sanitizer_report(line);
    out += kMpirunPrefix;
    out += line;
  }
  pipe.partial.erase(0, begin);
  if (!pipe.partial.empty() && (flush_partial || pipe.partial.size() >= kMaxPartialLine)) {
    out += kMpirunPrefix + pipe.partial + "\n";
    pipe.partial.clear();
  }
  if (out.empty() || mute_mpirun_) return;
  mpirun_said_something_ = true;
  write_stderr(out);
}

std::string Launcher::describe_rank(const Rank& rank) const {
  return fmt::format("rank {} (node {}, local rank {}, pid {})", rank.world, rank.node, rank.local,
                     rank.pid);
}

std::string Launcher::running_ranks_text() const {
  std::vector<std::string> items;
  for (const Rank& rank : ranks_) {
    if (!rank.running) continue;
    items.push_back(fmt::format("{} (node {}, local rank {}, pid {})", rank.world, rank.node,
                                rank.local, rank.pid));
  }
  return items.empty() ? std::string() : list_text("rank", "ranks", items);
}

std::string Launcher::unready_nodes_text() const {
  std::vector<std::string> items;
  for (int node = 0; node < opts_.nodes; ++node) {
    if (!daemons_[static_cast<size_t>(node)]) items.push_back(std::to_string(node));
  }
  return items.empty() ? std::string() : list_text("node", "nodes", items);
}

std::string Launcher::instance(int node) const {
  return fmt::format("{}-node{}", job_, node);
}

std::string Launcher::runtime_dir(int node) const {
  if (opts_.attach) return attached_dirs_.at(static_cast<size_t>(node));
  return fmt::format("{}/node{}", base_dir_, node);
}

int Launcher::total_ranks() const {
  return static_cast<int>(ranks_.size());
}

void Launcher::verbose(const std::string& message) const {
  if (opts_.verbose) write_stderr(fmt::format("nodecomm-launch: {}\n", message));
}

}  // namespace nodecomm::launch
