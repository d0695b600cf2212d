// nodecommd: read the configuration, bring up the transport (MPI), pin, serve until
// SIGTERM/SIGINT, telling systemd (when it started us) when it is ready and stopping.
#include <fmt/format.h>
#include <malloc.h>
#include <sys/prctl.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "conductor/daemon.hpp"
#include "conductor/notify.hpp"
#include "config/log.hpp"
#include "kernels/reduce.hpp"
#include "net/job_groups.hpp"
#include "net/transport.hpp"
#include "nodecommd/affinity.hpp"
#include "nodecommd/parse_config.hpp"

namespace {
std::atomic<bool> g_stop{false};

extern "C" void on_stop_signal(int) {
  // relaxed: only a flag; the main loop polls it.
  g_stop.store(true, std::memory_order_relaxed);
}
}  // namespace

int main(int argc, char** argv) {
  using namespace nodecomm::daemon;
  DaemonConfig config = parse_config(argc, argv);  // exits 2 on a bad flag, before MPI starts
  Log::get().set_level(config.log_level);
  Log::get().set_journal(config.log_format == "journal" ||
                         (config.log_format == "auto" && stderr_is_journal()));
  Log::get().set_context(config.instance);
  // Before MPI starts: the notification variables are taken out of the environment it sees.
  Notifier& notifier = Notifier::from_environment();

  // MPI's non-blocking collectives allocate message-sized temporaries on every call. glibc
  // serves large ones with fresh mmaps, and first touch costs ~15 us a page here, so a 32 MiB
  // allreduce paid ~120 ms of page faults each time. Keep them on the (never trimmed) heap,
  // where freed blocks are reused warm.
  mallopt(M_MMAP_MAX, 0);
  // Open MPI polls its TCP sockets only every 10000th progress call unless a blocking call
  // is waiting. The daemon never blocks in MPI, and it sleeps between polls, so that would
  // leave small messages sitting in the socket for many sleeps: poll the sockets every call.
  // (0 is not the same: it hangs MPI_Init.) An explicit setting still wins.
  setenv("OMPI_MCA_mpi_event_tick_rate", "1", /*overwrite=*/0);
  // MPI_Init and the daemon's own topology load hwloc; its GL component probes X displays
  // :0, :1, ..., each with a host name lookup that on a system without /etc/hosts goes to DNS
  // (5 s per lost answer). The daemon has no use for GPUs as hwloc objects.
  setenv("HWLOC_COMPONENTS", "-gl", /*overwrite=*/0);
  mallopt(M_TRIM_THRESHOLD, INT32_MAX);
  // Short parks while the network is busy are only short with a small timer slack.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);

  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  // A service daemon is one node on its own (loopback) that forms a group with other nodes'
  // service daemons for each multi-node job (net/job_groups.hpp).
  std::unique_ptr<JobGroupFormer> job_groups;
  std::string no_groups_reason;
  if (config.transport == "service") {
    // Without a reachable rendezvous the daemon still serves one-node jobs; a multi-node job
    // is refused, naming why, until the daemon is restarted with one.
    try {
      job_groups = make_mpi_job_groups(&argc, &argv, config.lanes, config.rendezvous);
    } catch (const std::exception& e) {
      NC_LOG(kWarn, "serving one-node jobs only: {}", e.what());
      no_groups_reason = e.what();
    }
  }
  std::unique_ptr<Transport> transport = config.transport == "mpi"
                                             ? make_mpi_transport(&argc, &argv, config.lanes)
                                             : make_loopback_transport();
  const uint32_t node = transport->node_index();
  config.instance = expand_node(config.instance, node);
  config.runtime_dir = expand_node(config.runtime_dir, node);
  Log::get().set_context(
      fmt::format("{} node {}/{}", config.instance, node, transport->node_count()));
  // Said at info level when the file or the environment changed something.
  Log::get().write(config.settings_from_file_or_env > 0 ? LogLevel::kInfo : LogLevel::kDebug, "{}",
                   config.origin_summary);

  if (config.cores == "auto") config.cores = default_daemon_cores();
  if (!config.cores.empty() && config.cores != "none") {
    if (const std::string error = pin_to_cores(config.cores); !error.empty()) {
      NC_LOG(kError, "{}", error);
      notifier.status("failed: " + error);
      return 2;
    }
    NC_LOG(kInfo, "pinned to CPUs {}", config.cores);
  }
  int status = 0;
  try {
    Daemon daemon(config, *transport);
    daemon.set_job_groups(job_groups.get(), no_groups_reason);
    daemon.start();
    daemon.set_notifier(&notifier);
    notifier.ready(daemon.status_line());
    NC_LOG(kDebug, "reduction kernels: {}", reduction_target());
    status = daemon.run(g_stop);
    notifier.stopping(fmt::format("stopping: {}", daemon.status_line()));
  } catch (const std::exception& e) {
    NC_LOG(kError, "{}", e.what());
    notifier.status(fmt::format("failed: {}", e.what()));
    status = 1;
  }
  transport.reset();  // MPI_Finalize after every client is gone
  job_groups.reset();
  return status;
}
