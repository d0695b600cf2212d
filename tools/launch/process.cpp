#include "process.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <system_error>

extern char** environ;

namespace nodecomm::launch {
namespace {

// Fields of /proc/<pid>/stat after the parenthesised command name (which may itself contain
// spaces and parentheses), plus the name. False if the process is gone.
bool read_proc_stat(pid_t pid, std::string& comm, std::vector<std::string>& fields) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!in || !std::getline(in, line)) return false;
  const size_t open = line.find('(');
  const size_t close = line.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return false;
  comm = line.substr(open + 1, close - open - 1);
  std::istringstream rest(line.substr(close + 1));
  fields.clear();
  for (std::string field; rest >> field;) fields.push_back(field);
  return true;
}

// Indices into read_proc_stat's fields: proc(5) numbers them from 1, starting at the pid.
constexpr size_t kStatState = 0;       // field 3
constexpr size_t kStatPpid = 1;        // field 4
constexpr size_t kStatSession = 3;     // field 6
constexpr size_t kStatStartTime = 19;  // field 22

bool executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

pid_t spawn(const SpawnSpec& spec) {
  // Everything the child needs is built before fork; the launcher has a single thread, but the
  // child still only does what is needed between fork and exec.
  std::vector<char*> argv;
  for (const auto& arg : spec.argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& var : spec.env) envp.push_back(const_cast<char*>(var.c_str()));
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();

  const pid_t pid = ::fork();
  if (pid < 0) {
    throw std::system_error(errno, std::generic_category(), fmt::format("fork for {}", spec.path));
  }
  if (pid == 0) {
    if (spec.new_session) {
      ::setsid();
    } else {
      ::setpgid(0, 0);
    }
    if (spec.parent_death_signal != 0) {
      ::prctl(PR_SET_PDEATHSIG, spec.parent_death_signal);
      // The launcher may have died before prctl took effect; then nobody would clean up.
      if (::getppid() != parent) ::_exit(127);
    }
    if (spec.stdin_fd >= 0) ::dup2(spec.stdin_fd, STDIN_FILENO);
    if (spec.stdout_fd >= 0) ::dup2(spec.stdout_fd, STDOUT_FILENO);
    if (spec.stderr_fd >= 0) ::dup2(spec.stderr_fd, STDERR_FILENO);
    if (spec.close_other_fds) ::close_range(3, ~0U, 0);
    ::sigprocmask(SIG_SETMASK, &spec.signal_mask, nullptr);
    ::execve(spec.path.c_str(), argv.data(), envp.data());
    const int err = errno;
    char message[512];
    const int n =
        std::snprintf(message, sizeof(message), "nodecomm-launch: cannot execute %s: %s\n",
                      spec.path.c_str(), std::strerror(err));
    if (n > 0) (void)!::write(STDERR_FILENO, message, std::min<size_t>(n, sizeof(message) - 1));
    ::_exit(127);
  }
  // Also from the parent, so the group exists before anyone tries to signal it.
  if (!spec.new_session) ::setpgid(pid, pid);
  return pid;
}

std::string signal_name(int sig) {
  if (const char* abbrev = ::sigabbrev_np(sig); abbrev != nullptr) {
    return fmt::format("SIG{}", abbrev);
  }
  return fmt::format("signal {}", sig);
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {}", signal_name(WTERMSIG(status)));
  return fmt::format("ended with wait status {:#x}", status);
}

bool wait_status_ok(int status) {
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

bool is_sanitizer_report(std::string_view line) {
  // The daemons' own log lines quote what clients send (tensor names), so they never count.
  if (line.starts_with("nodecommd[")) return false;
  for (const char* mark : {"ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                           "WARNING: ThreadSanitizer", ": runtime error: "}) {
    if (line.find(mark) != std::string_view::npos) return true;
  }
  return false;
}

std::optional<ProcessRef> process_ref(pid_t pid) {
  std::string comm;
  std::vector<std::string> fields;
  if (pid <= 0 || !read_proc_stat(pid, comm, fields) || fields.size() <= kStatStartTime) {
    return std::nullopt;
  }
  return ProcessRef{pid, std::strtoull(fields[kStatStartTime].c_str(), nullptr, 10)};
}

bool signal_process(const ProcessRef& ref, int sig) {
  const auto now = process_ref(ref.pid);
  if (!now || now->start_time != ref.start_time) return false;
  return ::kill(ref.pid, sig) == 0;
}

bool process_alive(const ProcessRef& ref) {
  std::string comm;
  std::vector<std::string> fields;
  if (ref.pid <= 0 || !read_proc_stat(ref.pid, comm, fields) || fields.size() <= kStatStartTime) {
    return false;
  }
  if (std::strtoull(fields[kStatStartTime].c_str(), nullptr, 10) != ref.start_time) return false;
  return fields[kStatState] != "Z" && fields[kStatState] != "X";
}

std::vector<ProcessRef> session_members(pid_t sid, unsigned long long not_before) {
  std::vector<ProcessRef> members;
  if (sid <= 1) return members;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return members;
  while (const dirent* entry = ::readdir(dir)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || pid <= 0) continue;
    std::string comm;
    std::vector<std::string> fields;
    if (!read_proc_stat(static_cast<pid_t>(pid), comm, fields) || fields.size() <= kStatStartTime ||
        fields[kStatState] == "Z") {
      continue;
    }
    if (std::atol(fields[kStatSession].c_str()) != sid) continue;
    const auto start = std::strtoull(fields[kStatStartTime].c_str(), nullptr, 10);
    if (start < not_before) continue;
    members.push_back(ProcessRef{static_cast<pid_t>(pid), start});
  }
  ::closedir(dir);
  return members;
}

void signal_group(pid_t pgid, int sig) {
  if (pgid <= 1) return;  // kill(-1) and kill(0) would hit far more than our own processes
  ::kill(-pgid, sig);
  ::kill(pgid, sig);
}

bool is_descendant_of(pid_t pid, pid_t ancestor) {
  // Bounded, in case the links change under us.
  for (int depth = 0; depth < 64 && pid > 1; ++depth) {
    std::string comm;
    std::vector<std::string> fields;
    if (!read_proc_stat(pid, comm, fields) || fields.size() <= kStatPpid) return false;
    pid = static_cast<pid_t>(std::atol(fields[kStatPpid].c_str()));
    if (pid == ancestor) return true;
  }
  return false;
}

std::vector<std::pair<pid_t, std::string>> children_of(pid_t parent) {
  std::vector<std::pair<pid_t, std::string>> children;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return children;
  while (const dirent* entry = ::readdir(dir)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || pid <= 0) continue;
    std::string comm;
    std::vector<std::string> fields;
    if (!read_proc_stat(static_cast<pid_t>(pid), comm, fields) || fields.size() <= kStatPpid) {
      continue;
    }
    // Zombies are already dead; whoever their parent is reaps them.
    if (fields[kStatState] == "Z" || std::atol(fields[kStatPpid].c_str()) != parent) continue;
    children.emplace_back(static_cast<pid_t>(pid), comm);
  }
  ::closedir(dir);
  return children;
}

std::string find_executable(const std::string& name) {
  if (name.empty()) return {};
  if (name.find('/') != std::string::npos) return executable_file(name) ? name : std::string();
  const char* path_env = std::getenv("PATH");
  const std::string path = path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin";
  size_t begin = 0;
  while (begin <= path.size()) {
    const size_t end = std::min(path.find(':', begin), path.size());
    // An empty PATH element means the current directory, as for execvp.
    const std::string dir = end == begin ? "." : path.substr(begin, end - begin);
    std::string candidate = dir;
    candidate.append("/").append(name);
    if (executable_file(candidate)) return candidate;
    begin = end + 1;
  }
  return {};
}

std::string self_exe_dir() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return {};
  std::string exe(buf, static_cast<size_t>(n));
  const size_t slash = exe.rfind('/');
  return slash == std::string::npos ? std::string() : exe.substr(0, slash);
}

std::string resolve_nodecommd(const std::string& daemon) {
  std::string path;
  if (daemon.empty()) {
    const std::string dir = self_exe_dir();
    path = dir.empty() ? std::string() : find_executable(dir + "/nodecommd");
    if (path.empty()) path = find_executable("nodecommd");
    if (path.empty()) {
      throw std::runtime_error(
          fmt::format("cannot find nodecommd next to {} or in PATH; pass --daemon",
                      dir.empty() ? "/proc/self/exe" : dir));
    }
  } else {
    path = find_executable(daemon);
    if (path.empty()) {
      throw std::runtime_error(
          fmt::format("--daemon {}: no such executable file{}", daemon,
                      daemon.find('/') == std::string::npos ? " in PATH" : ""));
    }
  }
  // An absolute path makes --verbose, error output and a state file unambiguous.
  return std::filesystem::absolute(path).lexically_normal().string();
}

std::vector<std::string> environment_with(
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::vector<std::string> env;
  for (char** var = environ; var != nullptr && *var != nullptr; ++var) {
    const std::string_view entry(*var);
    const std::string_view key = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& [name, value] : overrides) replaced = replaced || key == name;
    if (!replaced) env.emplace_back(entry);
  }
  for (const auto& [name, value] : overrides)
    env.push_back(std::string(name).append("=").append(value));
  return env;
}

std::string shell_join(const std::vector<std::string>& args) {
  std::string out;
  for (const auto& arg : args) {
    if (!out.empty()) out += ' ';
    const bool plain = !arg.empty() && arg.find_first_not_of(
                                           "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                           "0123456789_-+=/.,:@%{}") == std::string::npos;
    if (plain) {
      out += arg;
      continue;
    }
    out += '\'';
    for (char c : arg) {
      if (c == '\'') {
        out += "'\\''";
      } else {
        out += c;
      }
    }
    out += '\'';
  }
  return out;
}

std::vector<std::string> remove_shm_entries(const std::vector<std::string>& prefixes,
                                            std::vector<std::string>& errors) {
  std::vector<std::string> removed;
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) {
    if (errno != ENOENT)
      errors.push_back(fmt::format("opendir /dev/shm: {}", std::strerror(errno)));
    return removed;
  }
  std::vector<std::string> doomed;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string_view name(entry->d_name);
    for (const auto& prefix : prefixes) {
      if (name.starts_with(prefix)) {
        doomed.emplace_back(name);
        break;
      }
    }
  }
  ::closedir(dir);
  for (const auto& name : doomed) {
    const std::string path = "/dev/shm/" + name;
    if (::unlink(path.c_str()) == 0 || errno == ENOENT) {
      removed.push_back(name);
    } else {
      errors.push_back(fmt::format("unlink {}: {}", path, std::strerror(errno)));
    }
  }
  return removed;
}

std::vector<std::string> shm_files_mapped_by(pid_t pid) {
  std::vector<std::string> names;
  std::ifstream maps(fmt::format("/proc/{}/maps", pid));
  for (std::string line; std::getline(maps, line);) {
    constexpr std::string_view kShm = "/dev/shm/";
    const size_t at = line.find(kShm);
    // Already unlinked segments show up with a " (deleted)" suffix and need nothing from us.
    if (at == std::string::npos || line.ends_with(" (deleted)")) continue;
    std::string name = line.substr(at + kShm.size());
    if (std::find(names.begin(), names.end(), name) == names.end())
      names.push_back(std::move(name));
  }
  return names;
}

namespace {

// Where Open MPI 4 looks for its temporary directory, in its order of preference.
std::vector<std::string> ompi_tmp_bases() {
  std::vector<std::string> bases;
  for (const char* var : {"OMPI_MCA_orte_tmpdir_base", "TMPDIR", "TEMP", "TMP"}) {
    if (const char* value = std::getenv(var); value != nullptr && *value != '\0') {
      bases.emplace_back(value);
    }
  }
  bases.emplace_back("/tmp");
  return bases;
}

}  // namespace

std::vector<std::string> remove_ompi_session_dirs(pid_t mpirun_pid,
                                                  std::vector<std::string>& errors) {
  const std::string uid_suffix = fmt::format(".{}", ::geteuid());
  std::vector<std::string> removed;
  for (const auto& base : ompi_tmp_bases()) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(base, ec)) {
      const std::string name = entry.path().filename().string();
      if (!name.starts_with("ompi.") || !name.ends_with(uid_suffix)) continue;
      const auto dir = entry.path() / fmt::format("pid.{}", mpirun_pid);
      if (!std::filesystem::exists(dir, ec)) continue;
      std::filesystem::remove_all(dir, ec);
      if (ec) {
        errors.push_back(fmt::format("remove {}: {}", dir.string(), ec.message()));
        continue;
      }
      removed.push_back(dir.string());
      // Shared by every mpirun of this user; like mpirun itself, remove it only once empty.
      ::rmdir(entry.path().c_str());
    }
  }
  return removed;
}

std::vector<std::string> remove_ompi_host_dirs(const std::vector<std::string>& hosts,
                                               std::vector<std::string>& errors) {
  std::vector<std::string> removed;
  for (const auto& base : ompi_tmp_bases()) {
    for (const auto& host : hosts) {
      const std::string dir = fmt::format("{}/ompi.{}.{}", base, host, ::geteuid());
      std::error_code ec;
      if (!std::filesystem::exists(dir, ec)) continue;
      std::filesystem::remove_all(dir, ec);
      if (ec) {
        errors.push_back(fmt::format("remove {}: {}", dir, ec.message()));
      } else {
        removed.push_back(dir);
      }
    }
  }
  return removed;
}

void write_stderr(const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(STDERR_FILENO, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // stderr is gone; nothing better to report it on
    done += static_cast<size_t>(n);
  }
}

}  // namespace nodecomm::launch
