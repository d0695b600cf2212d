// --netsim: a simulated cluster network for nodecomm-launch. Every simulated host gets its own
// network namespace, joined to a bridge in a "switch" namespace by a veth pair with a TBF
// shaper at the link rate on both ends. Nothing is created in the launcher's own namespace:
// deleting the namespaces removes the veths and the bridge with them.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nodecomm::launch {

// Every simulated host has an address in one /24: at most this many hosts.
inline constexpr int kMaxNetsimHosts = 250;

// A tc rate ("1gbit", "500mbit", "125MBps", "2.5Gibit"; a bare number is bit/s) in bit/s, as
// iproute2's get_rate reads it (suffixes are case-insensitive). Empty if it is not one or not
// positive; percentages are refused, since a veth has no speed to take one of.
std::optional<double> parse_tc_rate(std::string_view text);

// Kills whatever runs inside the named namespaces (a --service cluster's, after its daemons were
// stopped) and deletes them, hosts before the switch (the first). Problems go to `errors`.
void remove_namespaces(const std::vector<std::string>& names, const sigset_t& child_mask,
                       std::vector<std::string>& errors);

// "955.3" (Mbit/s; three decimals below 1), and the same with " Mbit/s".
std::string format_mbit_number(double bits_per_second);
std::string format_mbit(double bits_per_second);

class Netsim {
 public:
  // Names only; nothing exists until create(). `child_mask` is the signal mask the ip and tc
  // commands run with.
  Netsim(int launcher_pid, int hosts, std::string rate, double bits_per_second,
         const sigset_t& child_mask);
  // Namespaces named <prefix>sw and <prefix>h<i> on the subnet <net_base>0/24 (net_base
  // "a.b.c."), for a simulated cluster that outlives its launcher (--service up): no launcher
  // pid, so remove_stale() of later launches never takes them for a dead launcher's.
  Netsim(std::string prefix, std::string net_base, int hosts, std::string rate,
         double bits_per_second, const sigset_t& child_mask);
  Netsim(const Netsim&) = delete;
  Netsim& operator=(const Netsim&) = delete;
  ~Netsim();

  // Finds ip, tc and unshare; throws std::runtime_error naming what is missing.
  void find_tools();
  // Removes namespaces that earlier launchers left behind (nc<pid>sw, nc<pid>h<i>) when that
  // pid is no longer a running nodecomm-launch, e.g. after one was SIGKILLed. Returns one line
  // per launcher cleaned up, for the log.
  std::vector<std::string> remove_stale();
  // Creates the namespaces, bridge, veths and qdiscs. Calls `interrupted` between hosts and
  // stops (returning false) once it says true. Throws std::runtime_error with the failing
  // command and its output; whatever was created is still removed by teardown().
  bool create(const std::function<bool()>& interrupted);

  struct Probe {
    double bits_per_second = 0;
    std::string from;  // namespace names
    std::string to;
  };
  // Sends TCP for about a second from host 0 to host 1 (to host 0 from the switch with one
  // host) and measures the rate after a short warm-up. Throws if it cannot connect at all.
  Probe probe() const;

  // Writes the rsh agent script and the hostfile (one line per host, `slots` each) into `dir`.
  void write_launch_files(const std::string& dir, const std::vector<int>& slots);

  // Prefix that runs a command inside the switch namespace: ip netns exec <switch>.
  std::vector<std::string> switch_exec_prefix() const;
  // The Open MPI options every mpirun under --netsim gets (hostfile, agent, interfaces, TCP
  // flags); --timeout, -np and friends are the caller's.
  std::vector<std::string> mpirun_args() const;

  // The Open MPI settings (OMPI_MCA_* variables) of a process on a host outside mpirun, such
  // as a service daemon's MPI singleton: the same transports and interfaces mpirun_args() gives.
  std::vector<std::pair<std::string, std::string>> mca_environment() const;
  // Prefix that runs a command on host `host`: in its namespace, under a UTS namespace of its
  // own named after it (as the rsh agent does), exec'ing so the pid stays the command's.
  std::vector<std::string> host_exec_prefix(int host) const;
  // Every namespace this simulation creates, the switch's first.
  std::vector<std::string> namespace_names() const;
  // Keeps the namespaces when this object goes (a --service cluster's stay until `down`).
  void release() { namespaces_.clear(); }

  // Processes inside this launch's namespaces that descend from `ancestor` (orteds, daemons, and
  // the ranks under --backend mpi), with their command names.
  std::vector<std::pair<pid_t, std::string>> processes_inside(pid_t ancestor) const;

  // Deletes every namespace this launch created; the veths and the bridge go with them. Safe to
  // call twice and after a partial create(). Also removes the session directories that Open
  // MPI's daemons on the simulated hosts leave when killed. Problems are appended to `errors`.
  void teardown(std::vector<std::string>& errors);

  int hosts() const { return hosts_; }
  const std::string& rate() const { return rate_; }
  double bits_per_second() const { return bits_per_second_; }
  std::string host_name(int host) const;
  const std::string& switch_name() const { return switch_; }
  const std::string& subnet() const { return subnet_; }
  // Everything this launch names starts with this: nc<pid>.
  const std::string& prefix() const { return prefix_; }
  const std::string& agent_path() const { return agent_path_; }
  const std::string& hostfile_path() const { return hostfile_path_; }

 private:
  std::string host_address(int host) const;
  std::string switch_address() const;
  // Runs ip or tc, waits for it, and throws with its output if it fails.
  void run(const std::string& path, const std::vector<std::string>& args) const;
  void add_namespace(const std::string& name);
  void delete_namespace(const std::string& name, std::vector<std::string>& errors) const;

  int launcher_pid_;
  int hosts_;
  std::string rate_;
  double bits_per_second_;
  sigset_t child_mask_;
  std::string prefix_;
  std::string switch_;
  std::string subnet_;    // a.b.c.0/24
  std::string net_base_;  // a.b.c.
  std::string ip_path_;
  std::string tc_path_;
  std::string unshare_path_;
  std::vector<std::string> namespaces_;  // created (or being created), in order
  std::string agent_path_;
  std::string hostfile_path_;
};

}  // namespace nodecomm::launch
