// nodecomm-launch: simulates N nodes on one machine. See options.hpp for the command line,
// launcher.hpp for what a launch (and --attach) does and service_cluster.hpp for --service.
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <utility>

#include "launcher.hpp"
#include "options.hpp"
#include "service_cluster.hpp"

namespace {

// With fd 0, 1 or 2 closed, the next pipe() could land there and a child's dup2 onto it would
// then be a no-op that leaves the fd close-on-exec.
void ensure_standard_fds() {
  for (int fd = STDIN_FILENO; fd <= STDERR_FILENO; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1) continue;
    const int null_fd = ::open("/dev/null", fd == STDIN_FILENO ? O_RDONLY : O_WRONLY);
    if (null_fd >= 0 && null_fd != fd) {
      ::dup2(null_fd, fd);
      ::close(null_fd);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  ensure_standard_fds();
  // hwloc's GL component (libhwloc-plugins) opens X displays :0, :1, ... to look for GPUs,
  // resolving a host name for each; where /etc/hosts is missing (a bare root) every lookup
  // goes to DNS, and a lost answer costs 5 s. mpirun, every orted, daemon and MPI rank load a
  // topology, so a launch took 5-20 s longer there. Nothing here needs GPUs as hwloc objects.
  // An explicit setting still wins.
  setenv("HWLOC_COMPONENTS", "-gl", /*overwrite=*/0);
  auto parsed = nodecomm::launch::parse_options(argc, argv);
  if (!parsed.options) return parsed.exit_code;
  if (parsed.options->service != nodecomm::launch::ServiceAction::kNone) {
    return nodecomm::launch::run_service(*parsed.options);
  }
  nodecomm::launch::Launcher launcher(std::move(*parsed.options));
  return launcher.run();
}
