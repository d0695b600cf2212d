// nodecommd speaks systemd's notify protocol: the test owns a datagram socket, starts the daemon
// with NOTIFY_SOCKET pointing at it (and WATCHDOG_USEC), and checks READY=1 (once the socket is
// there), STATUS= lines that follow the clients, WATCHDOG=1 pings while the loop runs and none
// while it is stopped, STOPPING=1 on SIGTERM with exit status 0, and that WATCHDOG_PID naming
// another process turns the pings off (over an abstract socket).
//   notify_check PATH/TO/nodecommd
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

int g_failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAIL", what.c_str());
  if (!ok) ++g_failures;
}

using Clock = std::chrono::steady_clock;

class NotifySocket {
 public:
  // path starting with '@': abstract.
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::string raw = path;
    if (raw[0] == '@') raw[0] = '\0';
    std::memcpy(addr.sun_path, raw.data(), raw.size());
    const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + raw.size());
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
      std::perror("bind notify socket");
      std::exit(1);
    }
    timeval tv{0, 50'000};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  ~NotifySocket() {
    ::close(fd_);
    if (path_[0] == '/') ::unlink(path_.c_str());
  }
  // Every message that arrives within `ms`, or until `until` returns true for one.
  std::vector<std::string> collect(int ms, const std::function<bool(const std::string&)>& until) {
    std::vector<std::string> got;
    const auto end = Clock::now() + std::chrono::milliseconds(ms);
    while (Clock::now() < end) {
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) continue;
      got.emplace_back(buf, static_cast<size_t>(n));
      if (until && until(got.back())) break;
    }
    return got;
  }

 private:
  std::string path_;
  int fd_ = -1;
};

bool has_line(const std::string& message, const std::string& prefix) {
  size_t pos = 0;
  while (pos <= message.size()) {
    const size_t end = message.find('\n', pos);
    const std::string line = message.substr(pos, end == std::string::npos ? end : end - pos);
    if (line.rfind(prefix, 0) == 0) return true;
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return false;
}

int count_lines(const std::vector<std::string>& messages, const std::string& prefix) {
  int n = 0;
  for (const auto& m : messages) n += has_line(m, prefix) ? 1 : 0;
  return n;
}

std::string joined(const std::vector<std::string>& messages) {
  std::string out;
  for (const auto& m : messages) {
    std::string one = m;
    for (char& ch : one) ch = ch == '\n' ? '|' : ch;
    out += "[" + one + "] ";
  }
  return out;
}

pid_t start_daemon(const std::string& daemon, const std::string& runtime_dir,
                   const std::vector<std::string>& env) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    for (const auto& e : env) ::putenv(const_cast<char*>(e.c_str()));
    ::unsetenv("JOURNAL_STREAM");
    const char* argv[] = {
        daemon.c_str(),   "--transport=loopback", "--cores=none",      "--config=none",
        "--idle=backoff", "--runtime-dir",        runtime_dir.c_str(), nullptr};
    ::execv(daemon.c_str(), const_cast<char* const*>(argv));
    std::perror("exec nodecommd");
    ::_exit(127);
  }
  return pid;
}

int wait_exit(pid_t pid, int timeout_ms) {
  const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
  int status = 0;
  while (Clock::now() < end) {
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    ::usleep(10'000);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: notify_check PATH/TO/nodecommd\n");
    return 2;
  }
  const std::string daemon = argv[1];
  char dir_template[] = "/tmp/nc-notify.XXXXXX";
  const std::string dir = ::mkdtemp(dir_template);
  const std::string runtime_dir = dir + "/rt";
  const std::string socket_path = runtime_dir + "/nodecommd.sock";

  {
    // 1. Path socket, watchdog every 200 ms (pings every 100 ms).
    NotifySocket notify(dir + "/notify.sock");
    const pid_t pid = start_daemon(
        daemon, runtime_dir, {"NOTIFY_SOCKET=" + dir + "/notify.sock", "WATCHDOG_USEC=200000"});
    bool socket_at_ready = false;
    auto got = notify.collect(20'000, [&](const std::string& m) {
      if (!has_line(m, "READY=1")) return false;
      struct stat st {};
      socket_at_ready = ::stat(socket_path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
      return true;
    });
    check(count_lines(got, "READY=1") == 1, "READY=1 arrives: " + joined(got));
    check(socket_at_ready, "the control socket exists when READY=1 arrives");
    check(!got.empty() && has_line(got.back(), "STATUS=waiting for a job: 0 client(s)"),
          "READY=1 carries STATUS= with the clients");

    got = notify.collect(1000, nullptr);
    const int pings = count_lines(got, "WATCHDOG=1");
    check(pings >= 4 && pings <= 30,
          "WATCHDOG=1 every ~100 ms while running: " + std::to_string(pings) + " in 1 s");

    // A client connects: STATUS= follows within about a second.
    const int client = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, socket_path.c_str(), sizeof(addr.sun_path) - 1);
    check(::connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0,
          "a client connects");
    got = notify.collect(5000, [](const std::string& m) {
      return has_line(m, "STATUS=waiting for a job: 1 client(s)");
    });
    check(count_lines(got, "STATUS=waiting for a job: 1 client(s)") == 1,
          "STATUS= shows 1 client: " + joined(got));
    ::close(client);
    got = notify.collect(5000, [](const std::string& m) {
      return has_line(m, "STATUS=waiting for a job: 0 client(s)");
    });
    check(count_lines(got, "STATUS=waiting for a job: 0 client(s)") == 1,
          "STATUS= shows the client gone");

    // A loop that does not come round sends no pings (SIGSTOP stands in for a wedged loop).
    ::kill(pid, SIGSTOP);
    notify.collect(100, nullptr);  // what was already queued
    got = notify.collect(600, nullptr);
    check(count_lines(got, "WATCHDOG=1") == 0,
          "no WATCHDOG=1 while the loop is stopped: " + joined(got));
    ::kill(pid, SIGCONT);
    got = notify.collect(1000, [](const std::string& m) { return has_line(m, "WATCHDOG=1"); });
    check(count_lines(got, "WATCHDOG=1") == 1, "WATCHDOG=1 again once it runs");

    ::kill(pid, SIGTERM);
    got = notify.collect(10'000, [](const std::string& m) { return has_line(m, "STOPPING=1"); });
    check(count_lines(got, "STOPPING=1") == 1, "STOPPING=1 on SIGTERM: " + joined(got));
    check(!got.empty() && has_line(got.back(), "STATUS=stopping"), "STOPPING=1 carries STATUS=");
    check(wait_exit(pid, 10'000) == 0, "exit status 0 after SIGTERM");
  }
  {
    // 2. Abstract socket; WATCHDOG_PID names another process: no pings.
    const std::string name = "@nodecomm-notify-check-" + std::to_string(::getpid());
    NotifySocket notify(name);
    const pid_t pid = start_daemon(daemon, runtime_dir,
                                   {"NOTIFY_SOCKET=" + name, "WATCHDOG_USEC=100000",
                                    "WATCHDOG_PID=" + std::to_string(::getpid())});
    auto got = notify.collect(20'000, [](const std::string& m) { return has_line(m, "READY=1"); });
    check(count_lines(got, "READY=1") == 1, "READY=1 over an abstract socket");
    got = notify.collect(500, nullptr);
    check(count_lines(got, "WATCHDOG=1") == 0, "no WATCHDOG=1 when WATCHDOG_PID is another pid");
    ::kill(pid, SIGTERM);
    got = notify.collect(10'000, [](const std::string& m) { return has_line(m, "STOPPING=1"); });
    check(count_lines(got, "STOPPING=1") == 1, "STOPPING=1 over an abstract socket");
    check(wait_exit(pid, 10'000) == 0, "exit status 0");
  }
  ::unlink((runtime_dir + "/nodecommd.lock").c_str());
  ::rmdir(runtime_dir.c_str());
  ::rmdir(dir.c_str());
  std::printf("notify_check: %d failure(s)\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}
