// One launch: daemons under mpirun, then the ranks, then an orderly (or forced) teardown. With
// --attach, only the ranks, against the daemons of a running simulated service cluster
// (service_cluster.hpp), which the launch neither starts nor stops.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "netsim.hpp"
#include "nodecomm/ipc/socket.hpp"
#include "options.hpp"
#include "process.hpp"

namespace nodecomm::launch {

class Launcher {
 public:
  explicit Launcher(Options options);
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  // Runs the whole job and returns the launcher's exit status. Always cleans up.
  int run();

 private:
  using Clock = std::chrono::steady_clock;

  struct Rank {
    int world = 0;
    int node = 0;
    int local = 0;
    pid_t pid = -1;
    bool running = false;
    bool finished = false;
    int status = 0;
    int signalled_with = 0;  // the last signal the launcher sent it, 0 if none
  };

  // mpirun's stdout or stderr, forwarded line by line to our stderr with a prefix.
  struct OutputPipe {
    ipc::Fd fd;
    std::string partial;
  };

  int run_job();
  // --attach: the ranks alone, on the cluster's daemons (launcher_attach.cpp).
  int run_attached_job();
  // Reads the cluster's state and checks that the daemons the job uses are running and ready.
  void attach_to_cluster();
  // --backend mpi or gloo: the ranks under one mpirun, no daemons.
  int run_mpi_job();
  // The ranks are mpirun's own processes (--backend mpi or gloo), not ours to start.
  bool baseline() const { return opts_.backend != Backend::kNodecomm; }
  void setup();
  // Finds nodecommd (--daemon, next to the launcher, or in PATH).
  void resolve_daemon();
  // --netsim: creates the namespaces and links, probes them, writes the agent and hostfile.
  // False if a signal or --timeout ended the launch meanwhile.
  bool start_netsim();
  void start_mpirun();
  // mpirun's path and argv for the daemons, or for PROGRAM itself with --backend mpi or gloo
  // (launcher_mpi.cpp). Under --netsim it runs in the switch namespace.
  std::pair<std::string, std::vector<std::string>> mpirun_command() const;
  // The flags every mpirun of this launch gets.
  std::vector<std::string> mpirun_common_args() const;
  // -np 1 per rank with its NODECOMM_* variables, and its host under --netsim.
  std::vector<std::string> program_app_contexts() const;
  // Processes this launch runs at once (daemons and ranks), to compare with the CPUs.
  bool oversubscribed() const;
  bool wait_ready();
  bool try_read_ready(int node);
  void start_ranks();
  bool wait_ranks();
  bool stop_daemons();
  void finish();

  // True once a signal or --timeout has ended the job; the first call that sees it reports
  // what is still running and kills everything.
  bool aborting();
  // SIGKILLs ranks, daemons and mpirun, and waits until they are reaped.
  void kill_everything();
  void kill_running_ranks(int sig);
  // Notes the Open MPI shared-memory files the daemons map, while they are alive to tell, so
  // they can be removed once mpirun, which would remove them itself, has been SIGKILLed.
  void remember_mpi_segments();
  void kill_daemons(int sig);
  // Waits until `done()` or `until`, still reaping and forwarding output.
  template <typename Done>
  void wait_until(Clock::time_point until, Done done);
  // Kills whatever descendants are left (they were reparented to us as the subreaper).
  void sweep_leftovers();
  void cleanup_files();

  // One round of the event loop: waits for a signal, mpirun output or `until`, then reaps.
  void pump(Clock::time_point until);
  void reap();
  void on_rank_exit(Rank& rank, int status);
  void on_mpirun_exit(int status);
  void drain_output(OutputPipe& pipe);
  void forward_lines(OutputPipe& pipe, bool flush_partial);

  std::string describe_rank(const Rank& rank) const;
  std::string running_ranks_text() const;
  std::string unready_nodes_text() const;
  std::string instance(int node) const;
  std::string runtime_dir(int node) const;
  int total_ranks() const;
  void verbose(const std::string& message) const;

  Options opts_;
  pid_t self_pid_;
  std::string job_;
  Clock::time_point start_;
  Clock::time_point deadline_;
  std::string daemon_path_;
  std::string mpirun_path_;
  std::string program_path_;
  std::string base_dir_;
  std::unique_ptr<Netsim> netsim_;
  // NODECOMM_LINK_RATE for the ranks: --netsim's rate, or the attached cluster's.
  std::string link_rate_;
  // --attach: each job node's runtime directory (its cluster node's daemon), and how many
  // daemons the cluster runs on this machine's cores.
  std::vector<std::string> attached_dirs_;
  int attached_daemons_ = 0;

  sigset_t child_mask_{};  // the mask we started with, restored in every child
  ipc::Fd signal_fd_;
  ipc::Fd dev_null_;
  int caught_signal_ = 0;

  pid_t mpirun_pid_ = -1;
  bool mpirun_running_ = false;
  bool mpirun_exited_ = false;
  int mpirun_status_ = 0;
  OutputPipe mpirun_out_;
  OutputPipe mpirun_err_;
  bool mpirun_said_something_ = false;
  bool sanitizer_reported_ = false;
  bool mute_mpirun_ = false;
  bool mpirun_sigkilled_ = false;
  std::set<std::string> mpi_segments_;

  std::vector<std::optional<ProcessRef>> daemons_;  // per node, once its ready file is read
  std::vector<Rank> ranks_;
  std::unordered_map<pid_t, size_t> rank_by_pid_;
  bool ranks_started_ = false;
  bool quiet_rank_exits_ = false;
  bool daemons_failed_ = false;
  std::optional<Clock::time_point> first_failure_;

  int abort_code_ = 0;
};

}  // namespace nodecomm::launch
