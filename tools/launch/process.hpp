// Process plumbing for nodecomm-launch: spawning into fresh process groups, naming exit
// statuses, signalling processes we did not fork, and finding what is left to clean up.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nodecomm::launch {

struct SpawnSpec {
  std::string path;               // what to execve (already resolved)
  std::vector<std::string> argv;  // argv[0] is what the child sees as its name
  std::vector<std::string> env;   // complete "KEY=VALUE" environment
  bool new_session = false;       // setsid() instead of setpgid(0, 0)
  int stdin_fd = -1;              // -1: inherit
  int stdout_fd = -1;
  int stderr_fd = -1;
  int parent_death_signal = 0;  // 0: none
  sigset_t signal_mask;         // the mask the child runs with
  // Closes every fd above 2 in the child: a detached process (a service daemon that outlives
  // the launcher) must not hold on to pipes its caller waits on.
  bool close_other_fds = false;
};

// Forks and execs `spec`; the child leads its own process group (or session). Throws
// std::system_error when fork fails. An exec failure shows up as exit status 127.
pid_t spawn(const SpawnSpec& spec);

// "SIGSEGV"; "signal 42" where the C library has no name.
std::string signal_name(int sig);
// "exited with status 3" or "killed by signal SIGKILL", for a waitpid status.
std::string describe_wait_status(int status);
bool wait_status_ok(int status);
// A line of a sanitizer's report (ASan, LeakSanitizer, TSan, UBSan). The daemons run under
// mpirun --enable-recovery, which exits 0 whatever they exit with, so a report at a daemon's
// exit (a leak above all) is found in their output instead.
bool is_sanitizer_report(std::string_view line);

// A process we did not fork (a daemon, child of mpirun): its pid plus its start time, so a
// signal never reaches an unrelated process that reused the pid.
struct ProcessRef {
  pid_t pid = -1;
  unsigned long long start_time = 0;
};
std::optional<ProcessRef> process_ref(pid_t pid);
// Sends `sig` if the process still is the one `ref` names; false if it is gone.
bool signal_process(const ProcessRef& ref, int sig);
// True while the process `ref` names runs: it exists with the same start time and is not a
// zombie (an orphan whose new parent does not reap it still counts as gone).
bool process_alive(const ProcessRef& ref);
// Live processes of session `sid` (a setsid leader's pid) started no earlier than
// `not_before` (the leader's start time, so that a later session with a reused id is not hit).
std::vector<ProcessRef> session_members(pid_t sid, unsigned long long not_before);
// kill(-pgid, sig) and kill(pgid, sig); a group that is already gone is not an error.
void signal_group(pid_t pgid, int sig);

// True if `ancestor` is `pid`'s parent, grandparent, ... (following the live parent links).
bool is_descendant_of(pid_t pid, pid_t ancestor);

// Live processes whose parent is `parent`, with their command names.
std::vector<std::pair<pid_t, std::string>> children_of(pid_t parent);

// execvp's search: `name` itself if it contains '/', else the first executable regular file
// named `name` in $PATH. Empty if there is none.
std::string find_executable(const std::string& name);
// Directory of /proc/self/exe; empty if unreadable.
std::string self_exe_dir();
// nodecommd's absolute path: `daemon` (--daemon) if given, else next to the launcher, else from
// PATH. Throws std::runtime_error saying where it looked.
std::string resolve_nodecommd(const std::string& daemon);

// The current environment with `overrides` replacing or adding variables.
std::vector<std::string> environment_with(
    const std::vector<std::pair<std::string, std::string>>& overrides);

// Command line as a shell would need it typed, for --verbose and error messages.
std::string shell_join(const std::vector<std::string>& args);

// Removes /dev/shm entries whose names start with one of `prefixes` (no leading '/').
// Returns the names it removed; failures are appended to `errors`.
std::vector<std::string> remove_shm_entries(const std::vector<std::string>& prefixes,
                                            std::vector<std::string>& errors);

// Names (relative to /dev/shm) of the /dev/shm files `pid` has mapped.
std::vector<std::string> shm_files_mapped_by(pid_t pid);

// Removes Open MPI's session directory of a SIGKILLed mpirun (<tmp>/ompi.<host>.<uid>/pid.<pid>,
// which a live mpirun removes itself). Returns the paths it removed.
std::vector<std::string> remove_ompi_session_dirs(pid_t mpirun_pid,
                                                  std::vector<std::string>& errors);

// Removes the session directories that Open MPI's daemons on `hosts` (host names no other run
// uses) left in its temporary directory (<tmp>/ompi.<host>.<uid>). Returns the paths removed.
std::vector<std::string> remove_ompi_host_dirs(const std::vector<std::string>& hosts,
                                               std::vector<std::string>& errors);

// Writes all of `text` to fd 2 in one write where possible, so lines from the launcher, mpirun
// and the ranks do not interleave mid-line.
void write_stderr(const std::string& text);

}  // namespace nodecomm::launch
