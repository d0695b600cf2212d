// systemd integration: the sd_notify datagram protocol (READY=1, STATUS=, WATCHDOG=1,
// STOPPING=1) to $NOTIFY_SOCKET, and whether stderr is connected to the journal. Without
// NOTIFY_SOCKET every call does nothing, so the daemon behaves the same outside systemd.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace nodecomm::daemon {

class Notifier {
 public:
  Notifier() = default;
  ~Notifier();
  Notifier(const Notifier&) = delete;
  Notifier& operator=(const Notifier&) = delete;

  // Reads NOTIFY_SOCKET ("/path" or "@abstract"), WATCHDOG_USEC and WATCHDOG_PID, then removes
  // them from the environment so that the processes the daemon starts (Open MPI's) do not
  // notify in its name.
  static Notifier& from_environment();

  bool active() const { return fd_ >= 0; }
  // 0 when systemd expects no keep-alive pings.
  uint64_t watchdog_interval_ns() const { return watchdog_ns_; }

  // Sends one notification, e.g. "READY=1\nSTATUS=serving". Returns false if it was not sent.
  bool send(std::string_view message);
  void ready(const std::string& status);
  void status(const std::string& status);
  void stopping(const std::string& status);

  // Called from the daemon's main loop on every pass through its housekeeping: pings the
  // watchdog every half interval, so a loop that stops coming round (wedged in a call, spinning
  // in one place) stops the pings and systemd restarts the daemon; and sends a STATUS= line at
  // most once a second when describe() changed.
  template <class Describe>
  void tick(uint64_t now_ns, Describe&& describe) {
    if (fd_ < 0) return;
    if (watchdog_ns_ != 0 && now_ns - last_watchdog_ns_ >= watchdog_ns_ / 2) {
      last_watchdog_ns_ = now_ns;
      send("WATCHDOG=1");
    }
    if (now_ns - last_status_ns_ >= kStatusIntervalNs) {
      last_status_ns_ = now_ns;
      std::string text = describe();
      if (text != last_status_) status(text);
    }
  }

 private:
  static constexpr uint64_t kStatusIntervalNs = 1'000'000'000;
  int fd_ = -1;
  std::string address_;  // sun_path bytes; a leading '\0' for abstract sockets
  uint64_t watchdog_ns_ = 0;
  uint64_t last_watchdog_ns_ = 0;
  uint64_t last_status_ns_ = 0;
  std::string last_status_;
};

// True when stderr is the stream that systemd connected to the journal (JOURNAL_STREAM is
// "device:inode" of that stream), so priority prefixes reach journald.
bool stderr_is_journal();

}  // namespace nodecomm::daemon
