// The launcher's MPI side: the --netsim network, and the mpirun of a launch (the daemons', one
// per node, or PROGRAM's own with --backend mpi or gloo), on this machine or inside the --netsim
// switch namespace.
#include <fcntl.h>
#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <system_error>

#include "launcher.hpp"
#include "process.hpp"

namespace nodecomm::launch {
namespace {

// Below this share of the link rate, the probe warns that the simulation is off.
constexpr double kProbeWarnShare = 0.8;
// mpirun's own --timeout trails ours: it only matters if the launcher itself was SIGKILLed.
constexpr int kMpirunTimeoutSlackSeconds = 30;

int online_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

}  // namespace

bool Launcher::start_netsim() {
  if (opts_.netsim_rate.empty()) return true;
  netsim_ = std::make_unique<Netsim>(self_pid_, opts_.nodes, opts_.netsim_rate,
                                     opts_.netsim_bits_per_second, child_mask_);
  netsim_->find_tools();
  for (const auto& line : netsim_->remove_stale()) {
    write_stderr(fmt::format("nodecomm-launch: netsim: {}\n", line));
  }
  const auto created = netsim_->create([this] {
    pump(Clock::now());  // picks up a Ctrl-C without waiting
    return aborting();
  });
  if (!created) return false;
  link_rate_ = netsim_->rate();
  // The daemons take one slot per host; with --backend mpi or gloo the ranks take them.
  std::vector<int> slots(static_cast<size_t>(opts_.nodes), 1);
  if (baseline()) slots = opts_.ranks_per_node;
  netsim_->write_launch_files(base_dir_, slots);
  verbose(fmt::format(
      "netsim: namespaces {}h0..{} and {} (bridge br0), subnet {}, agent {}, hostfile {}",
      netsim_->prefix(), opts_.nodes - 1, netsim_->switch_name(), netsim_->subnet(),
      netsim_->agent_path(), netsim_->hostfile_path()));
  const auto probe = netsim_->probe();
  write_stderr(fmt::format("netsim: {} hosts, link {}, probe {} Mbit/s\n", opts_.nodes,
                           netsim_->rate(), format_mbit_number(probe.bits_per_second)));
  if (probe.bits_per_second < kProbeWarnShare * netsim_->bits_per_second()) {
    write_stderr(fmt::format(
        "nodecomm-launch: warning: netsim probe from {} to {} got {}, below {:.0f}% of the link "
        "rate {} ({}); the machine may be too busy to simulate the link faithfully\n",
        probe.from, probe.to, format_mbit(probe.bits_per_second), kProbeWarnShare * 100,
        netsim_->rate(), format_mbit(netsim_->bits_per_second())));
  }
  pump(Clock::now());  // a signal that came during the probe
  return !aborting();
}

bool Launcher::oversubscribed() const {
  const int daemons = baseline() ? 0 : opts_.attach ? attached_daemons_ : opts_.nodes;
  return daemons + total_ranks() > online_cpus();
}

std::vector<std::string> Launcher::mpirun_common_args() const {
  std::vector<std::string> args;
  if (::geteuid() == 0) args.emplace_back("--allow-run-as-root");
  args.insert(args.end(),
              {"--timeout", std::to_string(opts_.timeout_s + kMpirunTimeoutSlackSeconds),
               "--bind-to", "none"});
  if (netsim_) {
    // The hostfile gives every host exactly the slots it needs; more processes than CPUs on
    // the machine is what still calls for --oversubscribe and yielding.
    const auto netsim_args = netsim_->mpirun_args();
    args.insert(args.end(), netsim_args.begin(), netsim_args.end());
    if (oversubscribed()) {
      args.insert(args.end(), {"--oversubscribe", "--mca", "mpi_yield_when_idle", "1"});
    }
  } else {
    // Everything on one host: no slot limit, and only the transports one machine has. The
    // daemons share a few cores with the ranks, so they always yield when idle.
    args.insert(args.end(), {"--oversubscribe", "--mca", "btl", "self,vader,tcp"});
    if (opts_.backend == Backend::kNodecomm || oversubscribed()) {
      args.insert(args.end(), {"--mca", "mpi_yield_when_idle", "1"});
    }
  }
  return args;
}

std::pair<std::string, std::vector<std::string>> Launcher::mpirun_command() const {
  std::string path = mpirun_path_;
  std::vector<std::string> args{opts_.mpirun};
  if (netsim_) {
    // mpirun runs in the switch namespace, which holds the bridge's address: its out-of-band
    // TCP reaches every host from there.
    args = netsim_->switch_exec_prefix();
    path = args.front();
    args.push_back(mpirun_path_);
  }
  const auto common = mpirun_common_args();
  args.insert(args.end(), common.begin(), common.end());
  if (baseline()) {
    const auto contexts = program_app_contexts();
    args.insert(args.end(), contexts.begin(), contexts.end());
    return {path, args};
  }
  // A daemon that dies must not take the others down with it: they detect the loss
  // themselves (heartbeats) and tell their ranks which node was lost.
  args.emplace_back("--enable-recovery");
  // The daemon replaces {node} with its MPI rank, which is its node index.
  args.insert(args.end(), {"-np", std::to_string(opts_.nodes), daemon_path_});
  args.emplace_back("--instance");
  args.push_back(job_ + "-node{node}");
  args.emplace_back("--runtime-dir");
  args.push_back(base_dir_ + "/node{node}");
  // The simulated nodes share this machine's cores: the daemons' default pinning (one core
  // per real node) would stack them all on one core. CLI11 keeps the last --cores given, so
  // a --daemon-arg=--cores=... still wins.
  args.emplace_back("--cores=none");
  // Several daemons and all their ranks share these cores: spinning would starve them.
  if (oversubscribed()) args.emplace_back("--idle=backoff");
  args.insert(args.end(), opts_.daemon_args.begin(), opts_.daemon_args.end());
  return {path, args};
}

std::vector<std::string> Launcher::program_app_contexts() const {
  // One application context per rank, so that each gets its own node and local rank; on this
  // machine alone Open MPI's local rank would count every rank as on one node. Ranks are
  // numbered as under the nodecomm backend: node by node.
  const std::string program = std::filesystem::absolute(program_path_).lexically_normal().string();
  std::vector<std::string> args;
  for (const Rank& rank : ranks_) {
    if (!args.empty()) args.emplace_back(":");
    args.insert(args.end(), {"-np", "1"});
    if (netsim_) args.insert(args.end(), {"--host", netsim_->host_name(rank.node)});
    const auto local_size = opts_.ranks_per_node[static_cast<size_t>(rank.node)];
    std::vector<std::pair<std::string, std::string>> env{
        {"NODECOMM_BACKEND", backend_name(opts_.backend)},
        {"NODECOMM_NODE", std::to_string(rank.node)},
        {"NODECOMM_NODES", std::to_string(opts_.nodes)},
        {"NODECOMM_LOCAL_RANK", std::to_string(rank.local)},
        {"NODECOMM_LOCAL_SIZE", std::to_string(local_size)},
        {"NODECOMM_WORLD_RANK_HINT", std::to_string(rank.world)},
    };
    if (netsim_) env.emplace_back("NODECOMM_LINK_RATE", netsim_->rate());
    if (opts_.backend == Backend::kGloo) {
      // Gloo's rendezvous: a file store every rank reaches (one filesystem, whatever the
      // network namespace), and the interface to listen on: the host's only link under
      // --netsim, loopback when every node is this machine.
      env.emplace_back("NODECOMM_GLOO_STORE", base_dir_ + "/gloo-store");
      env.emplace_back("GLOO_SOCKET_IFNAME", netsim_ ? "eth0" : "lo");
    }
    for (const auto& [name, value] : env) {
      args.emplace_back("-x");
      args.push_back(fmt::format("{}={}", name, value));
    }
    args.push_back(program);
    args.insert(args.end(), opts_.program.begin() + 1, opts_.program.end());
  }
  return args;
}

void Launcher::start_mpirun() {
  const auto [path, args] = mpirun_command();
  // With --backend mpi or gloo, mpirun's output is PROGRAM's: it goes to our stdout and stderr
  // as is.
  const bool forward = !baseline();

  int out[2];
  int err[2];
  ipc::Fd out_write;
  ipc::Fd err_write;
  if (forward) {
    if (::pipe2(out, O_CLOEXEC) != 0) {
      throw std::system_error(errno, std::generic_category(), "pipe");
    }
    out_write = ipc::Fd(out[1]);
    mpirun_out_.fd = ipc::Fd(out[0]);
    if (::pipe2(err, O_CLOEXEC) != 0) {
      throw std::system_error(errno, std::generic_category(), "pipe");
    }
    err_write = ipc::Fd(err[1]);
    mpirun_err_.fd = ipc::Fd(err[0]);
    for (int fd : {out[0], err[0]}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }

  SpawnSpec spec;
  spec.path = path;
  spec.argv = args;
  spec.env = environment_with({{"OMPI_MCA_rmaps_base_oversubscribe", "1"}});
  spec.new_session = true;
  // Like mpirun itself, PROGRAM's rank 0 gets our stdin, but never a terminal (see start_ranks).
  spec.stdin_fd = !forward && ::isatty(STDIN_FILENO) == 0 ? -1 : dev_null_.get();
  spec.stdout_fd = out_write.get();
  spec.stderr_fd = err_write.get();
  // SIGTERM, not SIGKILL: should the launcher die, mpirun still takes its processes down.
  spec.parent_death_signal = SIGTERM;
  spec.signal_mask = child_mask_;
  verbose(fmt::format("starting {}: {}", forward ? "daemons" : "ranks", shell_join(args)));
  mpirun_pid_ = spawn(spec);
  mpirun_running_ = true;
}

}  // namespace nodecomm::launch
