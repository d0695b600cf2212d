#include "netsim.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <system_error>

#include "nodecomm/ipc/socket.hpp"
#include "process.hpp"

namespace nodecomm::launch {
namespace {

constexpr const char* kNetnsDir = "/run/netns";
// The shaper from the design notes: a 256 KiB bucket and at most 5 ms of queueing.
constexpr const char* kTbfBurst = "256kb";
constexpr const char* kTbfLatency = "5ms";
// Hosts take .1 to .250 of their /24 (kMaxNetsimHosts), the switch's bridge .254.
constexpr int kSwitchHostByte = 254;
// What a running launcher's /proc/<pid>/comm says (the kernel keeps 15 characters).
constexpr const char* kLauncherComm = "nodecomm-launch";

struct RateSuffix {
  const char* name;
  double scale;  // bit/s per unit
};
// iproute2's get_rate table (tc/tc_util.c), matched case-insensitively like tc does.
constexpr RateSuffix kRateSuffixes[] = {
    {"bit", 1.0},
    {"kibit", 1024.0},
    {"kbit", 1000.0},
    {"mibit", 1024.0 * 1024.0},
    {"mbit", 1e6},
    {"gibit", 1024.0 * 1024.0 * 1024.0},
    {"gbit", 1e9},
    {"tibit", 1024.0 * 1024.0 * 1024.0 * 1024.0},
    {"tbit", 1e12},
    {"bps", 8.0},
    {"kibps", 8.0 * 1024.0},
    {"kbps", 8.0 * 1000.0},
    {"mibps", 8.0 * 1024.0 * 1024.0},
    {"mbps", 8.0 * 1e6},
    {"gibps", 8.0 * 1024.0 * 1024.0 * 1024.0},
    {"gbps", 8.0 * 1e9},
    {"tibps", 8.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0},
    {"tbps", 8.0 * 1e12},
};

// Our namespace names: nc<pid>sw and nc<pid>h<i>. The pid, or -1 for other names.
long launcher_pid_of(const std::string& name) {
  if (!name.starts_with("nc")) return -1;
  size_t at = 2;
  while (at < name.size() && std::isdigit(static_cast<unsigned char>(name[at])) != 0) ++at;
  if (at == 2 || at > 12) return -1;
  const std::string_view rest(name.c_str() + at);
  bool ours = rest == "sw";
  if (!ours && rest.size() >= 2 && rest[0] == 'h') {
    ours = rest.find_first_not_of("0123456789", 1) == std::string_view::npos;
  }
  return ours ? std::stol(name.substr(2, at - 2)) : -1;
}

bool is_running_launcher(long pid) {
  std::ifstream in(fmt::format("/proc/{}/comm", pid));
  std::string comm;
  return in && std::getline(in, comm) && comm == kLauncherComm;
}

bool namespace_exists(const std::string& name) {
  struct stat st {};
  return ::lstat(fmt::format("{}/{}", kNetnsDir, name).c_str(), &st) == 0;
}

// Pids of the processes inside the network namespace mounted at /run/netns/<name>.
std::vector<std::pair<pid_t, std::string>> processes_in(const std::string& name) {
  std::vector<std::pair<pid_t, std::string>> found;
  struct stat ns {};
  if (::stat(fmt::format("{}/{}", kNetnsDir, name).c_str(), &ns) != 0) return found;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return found;
  while (const dirent* entry = ::readdir(dir)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || pid <= 0) continue;
    struct stat st {};
    // Zombies have left their namespaces already and fail here.
    if (::stat(fmt::format("/proc/{}/ns/net", pid).c_str(), &st) != 0) continue;
    if (st.st_ino != ns.st_ino || st.st_dev != ns.st_dev) continue;
    std::ifstream in(fmt::format("/proc/{}/comm", pid));
    std::string comm;
    std::getline(in, comm);
    found.emplace_back(static_cast<pid_t>(pid), comm);
  }
  ::closedir(dir);
  return found;
}

void write_file(const std::string& path, const std::string& text, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "create " + path);
  ipc::Fd file(fd);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::system_error(errno, std::generic_category(), "write " + path);
    done += static_cast<size_t>(n);
  }
  // O_CREAT's mode is subject to the umask; the agent must be executable whatever it is.
  if (::fchmod(fd, mode) != 0) {
    throw std::system_error(errno, std::generic_category(), "chmod " + path);
  }
}

// Runs ip or tc, waits for it, and throws with its output if it fails.
void run_tool(const std::string& path, const std::vector<std::string>& args,
              const sigset_t& child_mask) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe");
  ipc::Fd read_end(fds[0]);
  ipc::Fd write_end(fds[1]);
  ipc::Fd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  std::vector<std::string> argv{path};
  argv.insert(argv.end(), args.begin(), args.end());
  SpawnSpec spec;
  spec.path = path;
  spec.argv = argv;
  spec.env = environment_with({{"LC_ALL", "C"}});
  spec.stdin_fd = dev_null.get();
  spec.stdout_fd = write_end.get();
  spec.stderr_fd = write_end.get();
  spec.parent_death_signal = SIGKILL;
  spec.signal_mask = child_mask;
  const pid_t pid = spawn(spec);
  write_end.reset();
  std::string output;
  char buf[4096];
  while (true) {
    const ssize_t n = ::read(read_end.get(), buf, sizeof(buf));
    if (n > 0) {
      output.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw std::system_error(errno, std::generic_category(), "waitpid");
  }
  if (wait_status_ok(status)) return;
  while (!output.empty() && (output.back() == '\n' || output.back() == ' ')) output.pop_back();
  for (char& c : output) {
    if (c == '\n') c = ' ';
  }
  throw std::runtime_error(fmt::format("netsim: {} {}{}", shell_join(argv),
                                       describe_wait_status(status),
                                       output.empty() ? "" : ": " + output));
}

}  // namespace

void remove_namespaces(const std::vector<std::string>& names, const sigset_t& child_mask,
                       std::vector<std::string>& errors) {
  std::string ip = find_executable("ip");
  for (const char* dir : {"/usr/sbin/", "/sbin/", "/usr/bin/"}) {
    if (ip.empty()) ip = find_executable(std::string(dir) + "ip");
  }
  for (auto it = names.rbegin(); it != names.rend(); ++it) {
    if (!namespace_exists(*it)) continue;
    // Bounded: SIGKILLed processes leave their namespace within milliseconds.
    for (int round = 0; round < 100; ++round) {
      const auto inside = processes_in(*it);
      if (inside.empty()) break;
      for (const auto& [pid, comm] : inside) ::kill(pid, SIGKILL);
      ::usleep(50'000);
    }
    if (ip.empty()) {
      errors.push_back(fmt::format("netsim: cannot delete namespace {}: no ip command", *it));
      continue;
    }
    try {
      run_tool(ip, {"netns", "delete", *it}, child_mask);
    } catch (const std::exception& e) {
      errors.emplace_back(e.what());
    }
  }
}

std::optional<double> parse_tc_rate(std::string_view text) {
  double value = 0;
  const auto [ptr, ec] =
      std::from_chars(text.data(), text.data() + text.size(), value, std::chars_format::fixed);
  if (ec != std::errc() || ptr == text.data()) return std::nullopt;
  const std::string suffix(ptr, text.data() + text.size());
  double scale = 0;
  if (suffix.empty()) {
    scale = 1.0;  // tc: "bit or a bare number"
  } else {
    for (const auto& s : kRateSuffixes) {
      if (::strcasecmp(s.name, suffix.c_str()) == 0) scale = s.scale;
    }
  }
  const double bits = value * scale;
  // Below one byte per second tc has nothing to shape with.
  if (scale == 0 || !std::isfinite(bits) || bits < 8.0) return std::nullopt;
  return bits;
}

std::string format_mbit_number(double bits_per_second) {
  const double mbit = bits_per_second / 1e6;
  // Three decimals below 1 Mbit/s, where one would round a slow link to nothing.
  return mbit >= 1.0 ? fmt::format("{:.1f}", mbit) : fmt::format("{:.3f}", mbit);
}

std::string format_mbit(double bits_per_second) {
  return format_mbit_number(bits_per_second) + " Mbit/s";
}

Netsim::Netsim(int launcher_pid, int hosts, std::string rate, double bits_per_second,
               const sigset_t& child_mask)
    // Only the namespaces see these addresses, so they cannot clash with the machine's own; one
    // /24 per launcher pid keeps concurrent launches apart in logs and captures too.
    : Netsim(fmt::format("nc{}", launcher_pid),
             fmt::format("10.{}.{}.", 64 + ((static_cast<unsigned>(launcher_pid) >> 8U) % 128U),
                         static_cast<unsigned>(launcher_pid) & 255U),
             hosts, std::move(rate), bits_per_second, child_mask) {
  launcher_pid_ = launcher_pid;
}

Netsim::Netsim(std::string prefix, std::string net_base, int hosts, std::string rate,
               double bits_per_second, const sigset_t& child_mask)
    : launcher_pid_(-1),
      hosts_(hosts),
      rate_(std::move(rate)),
      bits_per_second_(bits_per_second),
      child_mask_(child_mask),
      prefix_(std::move(prefix)),
      switch_(prefix_ + "sw"),
      subnet_(net_base + "0/24"),
      net_base_(std::move(net_base)) {
  if (hosts_ < 1 || hosts_ > kMaxNetsimHosts) {
    throw std::invalid_argument(
        fmt::format("--netsim simulates at most {} hosts, not {}", kMaxNetsimHosts, hosts_));
  }
}

Netsim::~Netsim() {
  if (namespaces_.empty()) return;
  try {
    std::vector<std::string> errors;
    teardown(errors);
    for (const auto& error : errors) write_stderr(fmt::format("nodecomm-launch: {}\n", error));
  } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor has nowhere left to report to
  }
}

void Netsim::find_tools() {
  std::vector<std::string> missing;
  for (auto [name, path] : {std::pair{"ip", &ip_path_}, std::pair{"tc", &tc_path_},
                            std::pair{"unshare", &unshare_path_}}) {
    *path = find_executable(name);
    // Root's tools live in sbin, which a user's PATH may lack.
    for (const char* dir : {"/usr/sbin/", "/sbin/", "/usr/bin/"}) {
      if (path->empty()) *path = find_executable(std::string(dir) + name);
    }
    if (path->empty()) missing.emplace_back(name);
  }
  if (!missing.empty()) {
    throw std::runtime_error(fmt::format(
        "--netsim needs {} (packages iproute2 and util-linux), not found in PATH or /usr/sbin",
        fmt::join(missing, ", ")));
  }
}

std::vector<std::string> Netsim::remove_stale() {
  std::vector<std::string> report;
  DIR* dir = ::opendir(kNetnsDir);
  if (dir == nullptr) return report;  // no namespaces at all yet
  std::vector<std::pair<long, std::string>> stale;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name(entry->d_name);
    const long pid = launcher_pid_of(name);
    if (pid < 0) continue;
    // Our own pid can only be there from an earlier launcher that had it.
    if (pid == launcher_pid_ || !is_running_launcher(pid)) stale.emplace_back(pid, name);
  }
  ::closedir(dir);
  std::vector<std::string> errors;
  std::vector<long> pids;
  std::vector<std::string> stale_hosts;
  for (const auto& [pid, name] : stale) {
    delete_namespace(name, errors);
    if (!name.ends_with("sw")) stale_hosts.push_back(name);
    if (std::find(pids.begin(), pids.end(), pid) == pids.end()) pids.push_back(pid);
  }
  // What Open MPI's daemons on those hosts left when they were killed along with the launcher.
  remove_ompi_host_dirs(stale_hosts, errors);
  for (long pid : pids) {
    std::vector<std::string> names;
    for (const auto& [owner, name] : stale) {
      if (owner == pid) names.push_back(name);
    }
    report.push_back(fmt::format("removed namespaces {} left by launcher pid {}, which is gone",
                                 fmt::join(names, ", "), pid));
  }
  for (auto& error : errors) report.push_back(std::move(error));
  return report;
}

bool Netsim::create(const std::function<bool()>& interrupted) {
  const std::string tbf_rate = rate_;
  const auto qdisc = [&](const std::string& ns, const std::string& dev) {
    run(tc_path_, {"-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", tbf_rate, "burst",
                   kTbfBurst, "latency", kTbfLatency});
  };
  // The switch: a bridge holding the subnet's .254, which mpirun's out-of-band TCP uses.
  add_namespace(switch_);
  run(ip_path_, {"-n", switch_, "link", "set", "lo", "up"});
  run(ip_path_, {"-n", switch_, "link", "add", "br0", "type", "bridge"});
  run(ip_path_, {"-n", switch_, "addr", "add", switch_address() + "/24", "dev", "br0"});
  run(ip_path_, {"-n", switch_, "link", "set", "br0", "up"});
  for (int host = 0; host < hosts_; ++host) {
    if (interrupted()) return false;
    const std::string name = host_name(host);
    const std::string port = fmt::format("v{}", host);
    add_namespace(name);
    run(ip_path_, {"-n", name, "link", "set", "lo", "up"});
    // Born in the switch namespace, its peer born in the host's: the launcher's own namespace
    // never holds either end.
    run(ip_path_, {"-n", switch_, "link", "add", port, "type", "veth", "peer", "name", "eth0",
                   "netns", name});
    run(ip_path_, {"-n", switch_, "link", "set", port, "master", "br0"});
    run(ip_path_, {"-n", switch_, "link", "set", port, "up"});
    run(ip_path_, {"-n", name, "addr", "add", host_address(host) + "/24", "dev", "eth0"});
    run(ip_path_, {"-n", name, "link", "set", "eth0", "up"});
    // Both directions: the host's egress, and the switch's egress towards the host.
    qdisc(name, "eth0");
    qdisc(switch_, port);
  }
  return !interrupted();
}

void Netsim::write_launch_files(const std::string& dir, const std::vector<int>& slots) {
  agent_path_ = dir + "/netsim-agent.sh";
  hostfile_path_ = dir + "/netsim-hostfile";
  // mpirun calls the agent as an ssh: [options] HOST COMMAND..., where COMMAND is meant for a
  // remote shell. Drop the options, then run COMMAND in HOST's namespace under its own UTS
  // namespace named HOST, so that every orted reports the host name the hostfile lists.
  const std::string agent = fmt::format(
      R"(#!/bin/sh
# Written by nodecomm-launch for --netsim; removed when the launch ends.
while [ $# -gt 0 ]; do
  case $1 in
    -[bcDEeFIiJLlmOoPpQRSWw]) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
host=$1
shift
case $host in
  {0}h[0-9]*) ;;
  *) echo "nodecomm-launch netsim agent: unknown host '$host'" >&2; exit 255 ;;
esac
exec {1} netns exec "$host" {2} --uts sh -c 'hostname "$0" && exec sh -c "$*"' "$host" "$@"
)",
      prefix_, ip_path_, unshare_path_);
  write_file(agent_path_, agent, 0700);
  std::string hosts;
  for (int host = 0; host < hosts_; ++host) {
    hosts += fmt::format("{} slots={}\n", host_name(host), slots.at(static_cast<size_t>(host)));
  }
  write_file(hostfile_path_, hosts, 0600);
}

std::vector<std::string> Netsim::switch_exec_prefix() const {
  return {ip_path_, "netns", "exec", switch_};
}

std::vector<std::string> Netsim::mpirun_args() const {
  std::vector<std::string> args{"--hostfile", hostfile_path_};
  // mpirun reaches every host through the agent itself, not through other hosts' orteds.
  args.insert(args.end(),
              {"--mca", "plm_rsh_agent", agent_path_, "--mca", "plm_rsh_no_tree_spawn", "1"});
  // Every byte crosses the simulated network, even between two processes on one host: no
  // shared-memory transport, and only the simulated interfaces.
  args.insert(args.end(), {"--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", subnet_,
                           "--mca", "oob_tcp_if_include", subnet_});
  // The default put mode halves bidirectional throughput on shaped links.
  args.insert(args.end(), {"--mca", "btl_tcp_flags", "send,inplace,need-ack,need-csum"});
  return args;
}

std::vector<std::pair<std::string, std::string>> Netsim::mca_environment() const {
  return {{"OMPI_MCA_btl", "tcp,self"},
          {"OMPI_MCA_btl_tcp_if_include", subnet_},
          {"OMPI_MCA_oob_tcp_if_include", subnet_},
          {"OMPI_MCA_btl_tcp_flags", "send,inplace,need-ack,need-csum"}};
}

std::vector<std::string> Netsim::host_exec_prefix(int host) const {
  const std::string name = host_name(host);
  return {ip_path_, "netns",       "exec",
          name,     unshare_path_, "--uts",
          "sh",     "-c",          R"(hostname "$0" && exec "$@")",
          name};
}

std::vector<std::string> Netsim::namespace_names() const {
  std::vector<std::string> names{switch_};
  for (int host = 0; host < hosts_; ++host) names.push_back(host_name(host));
  return names;
}

std::vector<std::pair<pid_t, std::string>> Netsim::processes_inside(pid_t ancestor) const {
  std::vector<std::pair<pid_t, std::string>> found;
  for (const auto& name : namespaces_) {
    for (auto& process : processes_in(name)) {
      if (is_descendant_of(process.first, ancestor)) found.push_back(std::move(process));
    }
  }
  return found;
}

void Netsim::teardown(std::vector<std::string>& errors) {
  if (!namespaces_.empty()) {
    std::vector<std::string> hosts;
    hosts.reserve(static_cast<size_t>(hosts_));
    for (int host = 0; host < hosts_; ++host) hosts.push_back(host_name(host));
    remove_ompi_host_dirs(hosts, errors);
  }
  // Hosts first, the switch last, the reverse of creation.
  for (auto it = namespaces_.rbegin(); it != namespaces_.rend(); ++it) {
    const auto inside = processes_in(*it);
    if (!inside.empty()) {
      // Our own descendants are gone by now (the launcher is their subreaper); whatever is left
      // was not started by us, so it is named rather than killed. The namespace outlives its
      // name until they exit.
      std::vector<std::string> names;
      names.reserve(inside.size());
      for (const auto& [pid, comm] : inside) names.push_back(fmt::format("{} ({})", pid, comm));
      errors.push_back(fmt::format("netsim: namespace {} still holds processes {}", *it,
                                   fmt::join(names, ", ")));
    }
    delete_namespace(*it, errors);
  }
  namespaces_.clear();
}

std::string Netsim::host_name(int host) const {
  return fmt::format("{}h{}", prefix_, host);
}

std::string Netsim::host_address(int host) const {
  return net_base_ + std::to_string(host + 1);
}

std::string Netsim::switch_address() const {
  return net_base_ + std::to_string(kSwitchHostByte);
}

void Netsim::run(const std::string& path, const std::vector<std::string>& args) const {
  run_tool(path, args, child_mask_);
}

void Netsim::add_namespace(const std::string& name) {
  // Noted before it exists, so that a failure half-way still has it removed.
  namespaces_.push_back(name);
  run(ip_path_, {"netns", "add", name});
}

void Netsim::delete_namespace(const std::string& name, std::vector<std::string>& errors) const {
  if (!namespace_exists(name)) return;
  try {
    run(ip_path_, {"netns", "delete", name});
  } catch (const std::exception& e) {
    errors.emplace_back(e.what());
  }
}

}  // namespace nodecomm::launch
