#include "service_cluster.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#include "netsim.hpp"
#include "nodecomm/ipc/runtime_paths.hpp"
#include "nodecomm/ipc/socket.hpp"
#include "process.hpp"
#include "service_state.hpp"

extern char** environ;

namespace nodecomm::launch {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr auto kPollInterval = 20ms;
// ompi-server writes its URI file within a second; a loaded machine may take a few.
constexpr auto kServerTimeout = 30s;
// As for a launch's daemons (launcher.cpp).
constexpr auto kReadyTimeout = 60s;
// down: SIGTERM, then SIGKILL after this (a daemon's MPI_Finalize on a loaded machine).
constexpr auto kTermToKill = 5s;
// For processes already sent SIGKILL to be gone.
constexpr auto kKillTimeout = 5s;
// Another launcher bringing the cluster up or down holds its lock at most this long.
constexpr auto kLockTimeout = 90s;
constexpr size_t kLogTailLines = 6;
constexpr const char* kEnvFile = "daemon-env.json";
constexpr const char* kUriFile = "rendezvous.uri";
constexpr const char* kServerLog = "ompi-server.log";
constexpr const char* kVaderPrefix = "vader_segment.";

// A signal that ends `up` or `restart-node` early: what was started is stopped again.
struct Interrupted : std::runtime_error {
  explicit Interrupted(int signal)
      : std::runtime_error(fmt::format("caught {}", signal_name(signal))), sig(signal) {}
  int sig;
};

// The last lines of a log, indented, for an error message.
std::string log_tail(const std::string& path) {
  const std::string text = read_text_file(path);
  if (text.empty()) return fmt::format(" ({} is empty)", path);
  std::vector<std::string_view> lines;
  size_t begin = 0;
  while (begin < text.size()) {
    const size_t end = std::min(text.find('\n', begin), text.size());
    if (end > begin) lines.emplace_back(text.data() + begin, end - begin);
    begin = end + 1;
  }
  const size_t first = lines.size() > kLogTailLines ? lines.size() - kLogTailLines : 0;
  std::string out = fmt::format("; the last lines of {}:", path);
  for (size_t i = first; i < lines.size(); ++i) out += fmt::format("\n  {}", lines[i]);
  return out;
}

// The daemons' and ompi-server's environment: ours, less what belongs to whoever started the
// launcher (systemd's notification socket; an MPI job's identity when the launcher itself ran
// under mpirun, which would make the singletons join that job), plus `extra`.
std::vector<std::string> detached_environment(
    const std::vector<std::pair<std::string, std::string>>& extra) {
  const bool under_mpi =
      std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
  std::vector<std::string> env;
  for (char** var = environ; var != nullptr && *var != nullptr; ++var) {
    const std::string_view entry(*var);
    const std::string_view key = entry.substr(0, entry.find('='));
    if (key == "NOTIFY_SOCKET" || key == "WATCHDOG_USEC" || key == "WATCHDOG_PID" ||
        key.starts_with("LISTEN_")) {
      continue;
    }
    if (under_mpi && (key.starts_with("OMPI_") || key.starts_with("PMIX_"))) continue;
    if (std::any_of(extra.begin(), extra.end(), [&](const auto& kv) { return kv.first == key; })) {
      continue;
    }
    env.emplace_back(entry);
  }
  for (const auto& [name, value] : extra) env.push_back(name + "=" + value);
  return env;
}

// Open MPI refuses root unless told twice; ompi-server has no --allow-run-as-root.
std::vector<std::pair<std::string, std::string>> root_allowance() {
  if (::geteuid() != 0) return {};
  return {{"OMPI_ALLOW_RUN_AS_ROOT", "1"}, {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}};
}

std::string alive_text(bool alive) {
  return alive ? "alive" : "dead";
}

class ServiceCluster {
 public:
  explicit ServiceCluster(const Options& opts) : opts_(opts) {
    // Ctrl-C, SIGTERM and friends are noticed between steps (check_interrupted()), so that `up` can
    // stop what it started; the children get the mask we started with.
    sigemptyset(&handled_);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&handled_, sig);
    sigset_t blocked = handled_;
    sigaddset(&blocked, SIGPIPE);
    if (::sigprocmask(SIG_BLOCK, &blocked, &child_mask_) != 0) {
      throw std::system_error(errno, std::generic_category(), "sigprocmask");
    }
    dev_null_ = ipc::Fd(::open("/dev/null", O_RDWR | O_CLOEXEC));
    if (!dev_null_.valid()) {
      throw std::system_error(errno, std::generic_category(), "open /dev/null");
    }
  }

  int run() {
    switch (opts_.service) {
      case ServiceAction::kUp:
        return up();
      case ServiceAction::kDown:
        return down();
      case ServiceAction::kStatus:
        return status();
      case ServiceAction::kRestartNode:
        return restart_node(opts_.restart_node);
      case ServiceAction::kNone:
        break;
    }
    return 2;
  }

 private:
  int up();
  int down();
  int status();
  int restart_node(int index);

  // Throws Interrupted once a handled signal is pending.
  void check_interrupted() const {
    timespec zero{};
    siginfo_t info{};
    const int sig = ::sigtimedwait(&handled_, &info, &zero);
    if (sig > 0) throw Interrupted(sig);
  }

  // Takes the cluster directory's lock (flock), waiting while another launcher holds it.
  void lock(const std::string& dir) {
    lock_ = ipc::Fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
    if (!lock_.valid()) throw std::system_error(errno, std::generic_category(), "open " + dir);
    const auto until = Clock::now() + kLockTimeout;
    while (::flock(lock_.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR) {
        throw std::system_error(errno, std::generic_category(), "flock " + dir);
      }
      if (Clock::now() >= until) {
        throw std::runtime_error(fmt::format(
            "cluster '{}' is busy: another nodecomm-launch has held {} for {} s", opts_.cluster,
            dir, std::chrono::duration_cast<std::chrono::seconds>(kLockTimeout).count()));
      }
      std::this_thread::sleep_for(kPollInterval);
    }
  }

  // For down and restart-node: locks the cluster's directory, which must be ours (or we root),
  // then loads its state as it is now that we hold the lock.
  void lock_own() {
    const std::string dir = cluster_dir(opts_.cluster);
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0) {
      if (errno == ENOENT) {
        throw std::runtime_error(
            fmt::format("no simulated cluster '{}' is up (no {})", opts_.cluster, dir));
      }
      throw std::system_error(errno, std::generic_category(), "stat " + dir);
    }
    if (::geteuid() != 0 && ::geteuid() != st.st_uid) {
      throw std::runtime_error(fmt::format("cluster '{}' belongs to uid {}, not to uid {}",
                                           opts_.cluster, st.st_uid, ::geteuid()));
    }
    lock(dir);
  }

  void save_state() const { save_cluster_state(state_, state_.dir); }

  void verbose(const std::string& message) const {
    if (opts_.verbose) write_stderr(fmt::format("nodecomm-launch: {}\n", message));
  }

  // Starts argv detached: its own session, stdin /dev/null, stdout and stderr appended to
  // `log`, no fd of ours, nothing that ties it to the launcher's lifetime.
  ProcessRef spawn_detached(const std::vector<std::string>& argv,
                            const std::vector<std::string>& env, const std::string& log) {
    ipc::Fd out(::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644));
    if (!out.valid()) throw std::system_error(errno, std::generic_category(), "open " + log);
    SpawnSpec spec;
    spec.path = argv.front();
    spec.argv = argv;
    spec.env = env;
    spec.new_session = true;
    spec.stdin_fd = dev_null_.get();
    spec.stdout_fd = out.get();
    spec.stderr_fd = out.get();
    spec.signal_mask = child_mask_;
    spec.close_other_fds = true;
    verbose(fmt::format("starting {} (output in {})", shell_join(argv), log));
    const pid_t pid = spawn(spec);
    // The start time is fixed at fork, so it is right even before the exec.
    const auto ref = process_ref(pid);
    if (!ref) {
      int status = 0;
      ::waitpid(pid, &status, 0);
      throw std::runtime_error(fmt::format("{} {} at once{}", argv.front(),
                                           describe_wait_status(status), log_tail(log)));
    }
    return *ref;
  }

  // If our child `pid` has exited, its status (reaped).
  static std::optional<int> exited(pid_t pid) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    return std::nullopt;
  }

  std::vector<std::string> node_argv(int index) const;
  void start_netsim();
  void start_server();
  void start_node(ClusterNode& node, const std::vector<std::string>& env);
  void wait_ready(const std::vector<ClusterNode*>& nodes);
  std::vector<std::string> read_env_file() const;
  std::string node_line(const ClusterNode& node, bool with_alive) const;
  std::string already_up_message() const;

  // Stops every process of the cluster (the daemons, then ompi-server), removes its /dev/shm
  // files, namespaces and state directory. Problems go to `errors`; returns a summary.
  std::string teardown(std::vector<std::string>& errors);
  // SIGTERM (unless `sig` is SIGKILL), then SIGKILL after kTermToKill, to each live process of
  // `refs`, and whatever else is left in their sessions; waits until all are gone. Returns how
  // many needed SIGKILL after a SIGTERM.
  int stop_processes(const std::vector<ProcessRef>& refs, int sig,
                     std::vector<std::string>& errors);
  std::vector<std::string> mapped_vader_segments(const std::vector<ProcessRef>& refs) const;
  // The other live processes of `ref`'s session, and its children (in sessions of their own).
  static std::vector<ProcessRef> family(const ProcessRef& ref) {
    std::vector<ProcessRef> found;
    for (const auto& member : session_members(ref.pid, ref.start_time)) {
      if (member.pid != ref.pid) found.push_back(member);
    }
    for (const auto& entry : children_of(ref.pid)) {
      const pid_t pid = entry.first;  // clang 14 cannot capture a structured binding
      const auto child = process_ref(pid);
      if (child && std::none_of(found.begin(), found.end(),
                                [&](const ProcessRef& f) { return f.pid == pid; })) {
        found.push_back(*child);
      }
    }
    return found;
  }
  static void remove_vader_segments(const std::vector<std::string>& names,
                                    std::vector<std::string>& errors);

  const Options& opts_;
  sigset_t handled_{};
  sigset_t child_mask_{};
  ipc::Fd dev_null_;
  ipc::Fd lock_;
  ClusterState state_;
  std::unique_ptr<Netsim> netsim_;  // --service up --netsim, until the cluster is up
};

std::vector<std::string> ServiceCluster::node_argv(int index) const {
  const ClusterNode& node = state_.node_list[static_cast<size_t>(index)];
  std::vector<std::string> argv;
  if (netsim_) argv = netsim_->host_exec_prefix(index);
  // As the unit runs it (ExecStart= has no flags; it reads the same configuration file), plus
  // what makes it a node of this cluster. --cores none: the simulated nodes share this
  // machine's cores (a --daemon-arg=--cores=... still wins, CLI11 keeps the last).
  argv.insert(argv.end(),
              {state_.daemon, "--transport", "service", "--rendezvous", state_.rendezvous,
               "--instance", node.instance, "--runtime-dir", node.runtime_dir, "--cores", "none"});
  argv.insert(argv.end(), opts_.daemon_args.begin(), opts_.daemon_args.end());
  return argv;
}

std::string ServiceCluster::node_line(const ClusterNode& node, bool with_alive) const {
  const bool alive = node.pid > 0 && process_alive(ProcessRef{node.pid, node.start_time});
  std::string pid = node.pid > 0 ? fmt::format("pid {}", node.pid) : "not started";
  if (with_alive) {
    pid += " " + alive_text(alive);
    if (alive && !cluster_node_ready(node)) pid += " (not ready)";
  }
  return fmt::format("{} node {}: {}, instance {}, runtime dir {}{}\n", state_.name, node.index,
                     pid, node.instance, node.runtime_dir,
                     node.netns.empty() ? "" : ", netns " + node.netns);
}

std::string ServiceCluster::already_up_message() const {
  try {
    const ClusterState other = load_cluster(opts_.cluster);
    const auto alive =
        std::count_if(other.node_list.begin(), other.node_list.end(), [](const ClusterNode& n) {
          return process_alive(ProcessRef{n.pid, n.start_time});
        });
    return fmt::format(
        "cluster '{}' is already up ({} nodes, {} daemons alive; state in {}); take it down "
        "first with --service down --cluster {}",
        opts_.cluster, other.nodes, alive, other.dir, opts_.cluster);
  } catch (const std::exception& e) {
    return fmt::format(
        "cluster '{}' is already up or was left half-way ({}: {}); take it down "
        "first with --service down --cluster {}",
        opts_.cluster, cluster_dir(opts_.cluster), e.what(), opts_.cluster);
  }
}

void ServiceCluster::start_netsim() {
  for (const auto& line : netsim_->remove_stale()) {
    write_stderr(fmt::format("nodecomm-launch: netsim: {}\n", line));
  }
  // This cluster's names can only be left over from an `up` that was SIGKILLed.
  std::vector<std::string> errors;
  remove_namespaces(state_.namespaces, child_mask_, errors);
  for (const auto& error : errors) write_stderr(fmt::format("nodecomm-launch: {}\n", error));
  netsim_->create([this] {
    check_interrupted();
    return false;
  });
  verbose(fmt::format("netsim: namespaces {}h0..{} and {} (bridge br0), subnet {}",
                      netsim_->prefix(), state_.nodes - 1, netsim_->switch_name(),
                      netsim_->subnet()));
  const auto probe = netsim_->probe();
  write_stderr(fmt::format("netsim: {} hosts, link {}, probe {} Mbit/s\n", state_.nodes,
                           netsim_->rate(), format_mbit_number(probe.bits_per_second)));
  // As for a launch: below 80% of the rate the machine is too busy to simulate the link.
  if (probe.bits_per_second < 0.8 * netsim_->bits_per_second()) {
    write_stderr(fmt::format(
        "nodecomm-launch: warning: netsim probe from {} to {} got {}, below 80% of the link "
        "rate {}; the machine may be too busy to simulate the link faithfully\n",
        probe.from, probe.to, format_mbit(probe.bits_per_second), netsim_->rate()));
  }
}

void ServiceCluster::start_server() {
  const std::string path = find_executable(opts_.ompi_server);
  std::vector<std::string> argv;
  // Under --netsim it runs in the switch namespace, which every host reaches.
  auto extra = root_allowance();
  if (netsim_) {
    argv = netsim_->switch_exec_prefix();
    extra.emplace_back("OMPI_MCA_oob_tcp_if_include", netsim_->subnet());
  }
  argv.insert(argv.end(), {path, "--no-daemonize", "-r", state_.rendezvous});
  state_.server_argv = argv;
  const auto ref = spawn_detached(argv, detached_environment(extra), state_.server_log);
  state_.server_pid = ref.pid;
  state_.server_start_time = ref.start_time;
  save_state();
  // The URI file is complete once it ends with a newline.
  const auto until = Clock::now() + kServerTimeout;
  while (true) {
    const std::string uri = read_text_file(state_.rendezvous);
    if (!uri.empty() && uri.back() == '\n') {
      verbose(
          fmt::format("ompi-server (pid {}) is up: {}", ref.pid, uri.substr(0, uri.size() - 1)));
      return;
    }
    if (const auto status = exited(ref.pid)) {
      throw std::runtime_error(fmt::format("ompi-server (pid {}) {} before it wrote {}{}", ref.pid,
                                           describe_wait_status(*status), state_.rendezvous,
                                           log_tail(state_.server_log)));
    }
    if (Clock::now() >= until) {
      throw std::runtime_error(fmt::format(
          "ompi-server (pid {}) wrote no URI file {} within {} s{}", ref.pid, state_.rendezvous,
          std::chrono::duration_cast<std::chrono::seconds>(kServerTimeout).count(),
          log_tail(state_.server_log)));
    }
    check_interrupted();
    std::this_thread::sleep_for(kPollInterval);
  }
}

void ServiceCluster::start_node(ClusterNode& node, const std::vector<std::string>& env) {
  const auto ref = spawn_detached(node.argv, env, node.log);
  node.pid = ref.pid;
  node.start_time = ref.start_time;
  save_state();
}

void ServiceCluster::wait_ready(const std::vector<ClusterNode*>& nodes) {
  const auto until = Clock::now() + kReadyTimeout;
  while (true) {
    std::vector<std::string> unready;
    for (ClusterNode* node : nodes) {
      if (cluster_node_ready(*node)) continue;
      if (const auto status = exited(node->pid)) {
        throw std::runtime_error(fmt::format("node {}'s daemon (pid {}) {} before it was ready{}",
                                             node->index, node->pid, describe_wait_status(*status),
                                             log_tail(node->log)));
      }
      unready.push_back(std::to_string(node->index));
    }
    if (unready.empty()) return;
    if (Clock::now() >= until) {
      throw std::runtime_error(
          fmt::format("daemons not ready after {} s (node{} {} not ready; logs in {})",
                      std::chrono::duration_cast<std::chrono::seconds>(kReadyTimeout).count(),
                      unready.size() == 1 ? "" : "s", fmt::join(unready, ", "), state_.dir));
    }
    check_interrupted();
    std::this_thread::sleep_for(kPollInterval);
  }
}

std::vector<std::string> ServiceCluster::read_env_file() const {
  const std::string path = state_.dir + "/" + kEnvFile;
  try {
    return nlohmann::json::parse(read_text_file(path)).get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(fmt::format("daemon environment {}: {}", path, e.what()));
  }
}

int ServiceCluster::up() {
  const std::string dir = cluster_dir(opts_.cluster);
  // Everything that can be checked before anything exists.
  const std::string daemon = resolve_nodecommd(opts_.daemon);
  const std::string server = find_executable(opts_.ompi_server);
  if (server.empty()) {
    throw std::runtime_error(fmt::format(
        "--ompi-server {}: no such executable file{} (Open MPI's rendezvous server; Debian "
        "package openmpi-bin)",
        opts_.ompi_server, opts_.ompi_server.find('/') == std::string::npos ? " in PATH" : ""));
  }
  if (!opts_.netsim_rate.empty()) {
    // Named after the cluster, not a pid: the namespaces outlive this launcher.
    const auto hash = static_cast<unsigned>(std::hash<std::string>{}(opts_.cluster));
    netsim_ = std::make_unique<Netsim>(
        fmt::format("ncs-{}-", opts_.cluster),
        fmt::format("10.{}.{}.", 192 + ((hash >> 8U) % 64U), hash & 255U), opts_.nodes,
        opts_.netsim_rate, opts_.netsim_bits_per_second, child_mask_);
    netsim_->find_tools();
  }

  // Made under a temporary name, locked and given its state, then renamed into place only if
  // no cluster of that name exists: a concurrent `up` or `down` never sees it half-made.
  std::string tmp = dir + ".XXXXXX";
  if (::mkdtemp(tmp.data()) == nullptr) {
    throw std::system_error(errno, std::generic_category(), "mkdtemp " + tmp);
  }
  // 0755: jobs of other uids reach each node's runtime directory (the daemons make those 0711)
  // and read the state file.
  if (::chmod(tmp.c_str(), 0755) != 0) {
    const int err = errno;
    ::rmdir(tmp.c_str());
    throw std::system_error(err, std::generic_category(), "chmod " + tmp);
  }
  lock(tmp);
  state_.name = opts_.cluster;
  state_.dir = dir;
  state_.uid = ::geteuid();
  state_.nodes = opts_.nodes;
  state_.daemon = daemon;
  state_.rendezvous = dir + "/" + kUriFile;
  state_.server_log = dir + "/" + kServerLog;
  if (netsim_) {
    state_.link_rate = netsim_->rate();
    // All of them, before any exists: a failure half-way still has them removed.
    state_.namespaces = netsim_->namespace_names();
  }
  for (int i = 0; i < opts_.nodes; ++i) {
    ClusterNode node;
    node.index = i;
    node.instance = fmt::format("{}-node{}", opts_.cluster, i);
    node.runtime_dir = fmt::format("{}/node{}", dir, i);
    node.log = fmt::format("{}/node{}.log", dir, i);
    if (netsim_) node.netns = netsim_->host_name(i);
    state_.node_list.push_back(std::move(node));
  }
  for (int i = 0; i < opts_.nodes; ++i) {
    state_.node_list[static_cast<size_t>(i)].argv = node_argv(i);
  }

  try {
    save_cluster_state(state_, tmp);
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_NOREPLACE) != 0) {
      const int err = errno;
      std::error_code ec;
      std::filesystem::remove_all(tmp, ec);
      if (err == EEXIST) throw std::runtime_error(already_up_message());
      throw std::system_error(err, std::generic_category(), "rename " + tmp + " to " + dir);
    }
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove_all(tmp, ec);
    throw;
  }

  try {
    // The daemons' environment, kept for restart-node (which may run from another shell): 0600,
    // since an environment can hold what others must not read.
    std::vector<std::pair<std::string, std::string>> extra = root_allowance();
    // nodecommd sets this itself from --rendezvous; given here too, the singletons find the
    // server whichever daemon runs.
    extra.emplace_back("OMPI_MCA_pmix_server_uri", "file:" + state_.rendezvous);
    if (netsim_) {
      const auto mca = netsim_->mca_environment();
      extra.insert(extra.end(), mca.begin(), mca.end());
    }
    const auto env = detached_environment(extra);
    write_file_atomic(dir + "/" + kEnvFile, nlohmann::json(env).dump() + "\n", 0600);
    if (netsim_) start_netsim();
    start_server();
    std::vector<ClusterNode*> nodes;
    for (auto& node : state_.node_list) {
      check_interrupted();
      start_node(node, env);
      nodes.push_back(&node);
    }
    wait_ready(nodes);
  } catch (const std::exception& e) {
    const auto* interrupted = dynamic_cast<const Interrupted*>(&e);
    write_stderr(fmt::format(
        "nodecomm-launch: --service up: {}\nnodecomm-launch: taking cluster '{}' down again\n",
        e.what(), opts_.cluster));
    std::vector<std::string> errors;
    teardown(errors);
    for (const auto& error : errors)
      write_stderr(fmt::format("nodecomm-launch: cleanup: {}\n", error));
    return interrupted != nullptr ? 128 + interrupted->sig : 1;
  }
  if (netsim_) netsim_->release();  // the namespaces stay until --service down
  std::string lines;
  for (const auto& node : state_.node_list) lines += node_line(node, false);
  std::fputs(lines.c_str(), stdout);
  std::fflush(stdout);
  write_stderr(fmt::format(
      "nodecomm-launch: cluster '{}' is up: {} nodes, ompi-server pid {}, state {}/{}\n",
      state_.name, state_.nodes, state_.server_pid, state_.dir, kStateFile));
  return 0;
}

int ServiceCluster::down() {
  lock_own();
  const std::string dir = cluster_dir(opts_.cluster);
  try {
    state_ = load_cluster(opts_.cluster);
  } catch (const std::exception& e) {
    // A directory without a state file is what an `up` killed before it recorded anything
    // leaves; we hold its lock, so no `up` is still writing it.
    if (std::filesystem::exists(dir + "/" + kStateFile)) throw;
    write_stderr(fmt::format("nodecomm-launch: {}; removing {}\n", e.what(), dir));
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    if (ec) throw std::runtime_error(fmt::format("remove {}: {}", dir, ec.message()));
    return 0;
  }
  std::vector<std::string> errors;
  const std::string summary = teardown(errors);
  for (const auto& error : errors) {
    write_stderr(fmt::format("nodecomm-launch: cleanup: {}\n", error));
  }
  std::fputs(fmt::format("{} down: {}\n", opts_.cluster, summary).c_str(), stdout);
  std::fflush(stdout);
  return errors.empty() ? 0 : 1;
}

int ServiceCluster::status() {
  state_ = load_cluster(opts_.cluster);
  std::string lines;
  bool all = true;
  for (const auto& node : state_.node_list) {
    all = all && cluster_node_ready(node);
    lines += node_line(node, true);
  }
  const bool server = process_alive(ProcessRef{state_.server_pid, state_.server_start_time});
  all = all && server;
  lines += fmt::format("{} rendezvous: ompi-server pid {} {}, URI file {}\n", state_.name,
                       state_.server_pid, alive_text(server), state_.rendezvous);
  if (!state_.link_rate.empty()) {
    lines += fmt::format("{} netsim: link {}, namespaces {}\n", state_.name, state_.link_rate,
                         fmt::join(state_.namespaces, ", "));
  }
  std::fputs(lines.c_str(), stdout);
  std::fflush(stdout);
  return all ? 0 : 1;
}

int ServiceCluster::restart_node(int index) {
  lock_own();
  state_ = load_cluster(opts_.cluster);
  if (index >= state_.nodes) {
    throw std::runtime_error(fmt::format("cluster '{}' has nodes 0..{}, no node {}", state_.name,
                                         state_.nodes - 1, index));
  }
  ClusterNode& node = state_.node_list[static_cast<size_t>(index)];
  const auto env = read_env_file();
  std::vector<std::string> errors;
  // As a crash would: SIGKILL, no chance to clean up; then what systemd does for a unit with
  // Restart=on-failure (KillMode=control-group): the rest of its processes go too, and the
  // same command line starts again.
  const ProcessRef old{node.pid, node.start_time};
  if (node.pid > 0 && process_alive(old)) {
    const auto vader = mapped_vader_segments({old});
    stop_processes({old}, SIGKILL, errors);
    // Also reaped (by whoever inherited it), as systemd, its parent, would have it before the
    // restart: the new daemon takes over the instance's counters segment only from a pid that
    // no longer exists, and a zombie still does.
    const auto until = Clock::now() + kKillTimeout;
    while (Clock::now() < until) {
      const auto now = process_ref(old.pid);
      if (!now || now->start_time != old.start_time) break;
      std::this_thread::sleep_for(kPollInterval);
    }
    remove_vader_segments(vader, errors);
    verbose(fmt::format("killed node {}'s daemon (pid {})", index, node.pid));
  } else if (node.pid > 0) {
    verbose(fmt::format("node {}'s daemon (pid {}) was not running", index, node.pid));
  }
  for (const auto& error : errors) write_stderr(fmt::format("nodecomm-launch: {}\n", error));
  try {
    start_node(node, env);
    wait_ready({&node});
  } catch (const Interrupted& e) {
    write_stderr(
        fmt::format("nodecomm-launch: --service restart-node: {}; node {}'s daemon (pid "
                    "{}) is left as it is\n",
                    e.what(), index, node.pid));
    return 128 + e.sig;
  }
  std::fputs(node_line(node, false).c_str(), stdout);
  std::fflush(stdout);
  return 0;
}

std::vector<std::string> ServiceCluster::mapped_vader_segments(
    const std::vector<ProcessRef>& refs) const {
  std::vector<std::string> names;
  for (const auto& ref : refs) {
    if (!process_alive(ref)) continue;
    std::vector<ProcessRef> all = family(ref);
    all.push_back(ref);
    for (const auto& member : all) {
      for (auto& name : shm_files_mapped_by(member.pid)) {
        if (name.starts_with(kVaderPrefix)) names.push_back(std::move(name));
      }
    }
  }
  return names;
}

void ServiceCluster::remove_vader_segments(const std::vector<std::string>& names,
                                           std::vector<std::string>& errors) {
  for (const auto& name : names) {
    const std::string path = "/dev/shm/" + name;
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      errors.push_back(fmt::format("unlink {}: {}", path, std::strerror(errno)));
    }
  }
}

int ServiceCluster::stop_processes(const std::vector<ProcessRef>& refs, int sig,
                                   std::vector<std::string>& errors) {
  const auto live = [&] {
    std::vector<ProcessRef> out;
    for (const auto& ref : refs) {
      exited(ref.pid);  // reaps it if it is our child (an `up` that failed)
      if (process_alive(ref)) out.push_back(ref);
    }
    return out;
  };
  const auto wait_gone = [&](Clock::time_point until) {
    while (!live().empty() && Clock::now() < until) std::this_thread::sleep_for(kPollInterval);
  };
  // Their other processes (a singleton's orted, which makes a session of its own) are found
  // while they live.
  std::vector<ProcessRef> others;
  for (const auto& ref : refs) {
    if (!process_alive(ref)) continue;
    for (const auto& member : family(ref)) others.push_back(member);
  }
  int killed = 0;
  if (sig != SIGKILL) {
    for (const auto& ref : live()) signal_process(ref, sig);
    wait_gone(Clock::now() + kTermToKill);
    killed = static_cast<int>(live().size());
  }
  for (const auto& ref : live()) signal_process(ref, SIGKILL);
  wait_gone(Clock::now() + kKillTimeout);
  for (const auto& ref : live()) {
    errors.push_back(fmt::format("pid {} is still running after SIGKILL", ref.pid));
  }
  // Whatever is left of their sessions, found then or now (their children are orphans by now).
  for (const auto& ref : refs) {
    for (const auto& member : session_members(ref.pid, ref.start_time)) {
      if (member.pid != ref.pid) others.push_back(member);
    }
  }
  for (const auto& other : others) signal_process(other, SIGKILL);
  const auto until = Clock::now() + kKillTimeout;
  while (Clock::now() < until && std::any_of(others.begin(), others.end(),
                                             [](const auto& o) { return process_alive(o); })) {
    std::this_thread::sleep_for(kPollInterval);
  }
  return killed;
}

std::string ServiceCluster::teardown(std::vector<std::string>& errors) {
  std::vector<ProcessRef> daemons;
  int alive_daemons = 0;
  for (const auto& node : state_.node_list) {
    if (node.pid <= 0) continue;
    const ProcessRef ref{node.pid, node.start_time};
    daemons.push_back(ref);
    if (process_alive(ref)) ++alive_daemons;
  }
  const auto vader = mapped_vader_segments(daemons);
  verbose(fmt::format("sending SIGTERM to {} daemons", alive_daemons));
  const int daemons_killed = stop_processes(daemons, SIGTERM, errors);
  std::string server_note = "no ompi-server";
  if (state_.server_pid > 0) {
    const ProcessRef server{state_.server_pid, state_.server_start_time};
    const bool alive = process_alive(server);
    const int server_killed = stop_processes({server}, SIGTERM, errors);
    server_note = !alive          ? "ompi-server was not running"
                  : server_killed ? "ompi-server killed (SIGKILL)"
                                  : "ompi-server stopped";
    // What a live ompi-server removes itself.
    if (server_killed > 0) remove_ompi_session_dirs(state_.server_pid, errors);
  }
  remove_vader_segments(vader, errors);
  std::vector<std::string> prefixes;
  for (const auto& node : state_.node_list) {
    std::string prefix = ipc::segment_prefix(node.instance);
    if (prefix.starts_with('/')) prefix.erase(0, 1);  // shm_open names are /dev/shm/<name>
    prefixes.push_back(std::move(prefix));
  }
  const auto removed = remove_shm_entries(prefixes, errors);
  if (!removed.empty()) verbose(fmt::format("removed {} from /dev/shm", fmt::join(removed, ", ")));
  if (!state_.namespaces.empty()) {
    remove_namespaces(state_.namespaces, child_mask_, errors);
    // What the daemons' MPI left under their hosts' names if they were killed.
    const std::vector<std::string> hosts(state_.namespaces.begin() + 1, state_.namespaces.end());
    remove_ompi_host_dirs(hosts, errors);
    verbose(fmt::format("netsim: removed the namespaces {}", fmt::join(state_.namespaces, ", ")));
  }
  std::error_code ec;
  std::filesystem::remove_all(state_.dir, ec);
  if (ec) errors.push_back(fmt::format("remove {}: {}", state_.dir, ec.message()));
  const int dead = static_cast<int>(daemons.size()) - alive_daemons;
  std::string summary = fmt::format("{} daemon{} stopped", alive_daemons - daemons_killed,
                                    alive_daemons - daemons_killed == 1 ? "" : "s");
  if (daemons_killed > 0) summary += fmt::format(", {} killed (SIGKILL)", daemons_killed);
  if (dead > 0) summary += fmt::format(", {} not running", dead);
  summary += ", " + server_note;
  if (!state_.namespaces.empty()) {
    summary += fmt::format(", {} namespaces removed", state_.namespaces.size());
  }
  return summary;
}

}  // namespace

int run_service(const Options& opts) {
  try {
    ServiceCluster cluster(opts);
    return cluster.run();
  } catch (const Interrupted& e) {
    write_stderr(fmt::format("nodecomm-launch: {}\n", e.what()));
    return 128 + e.sig;
  } catch (const std::exception& e) {
    write_stderr(fmt::format("nodecomm-launch: {}\n", e.what()));
    return 1;
  }
}

}  // namespace nodecomm::launch
