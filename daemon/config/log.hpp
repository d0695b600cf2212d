// Daemon logging: one line per event on stderr, prefixed with the instance, the node and the
// job being served, so that lines from several simulated nodes in one terminal stay
// attributable. Under systemd (--log-format journal, or auto with JOURNAL_STREAM naming stderr)
// each line starts with its sd-daemon priority (<3> error, <4> warn, <6> info, <7> debug), which
// journald turns into the entry's priority.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <utility>

#include "nodecomm/ipc/printable.hpp"

namespace nodecomm::daemon {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

class Log {
 public:
  static Log& get() {
    static Log log;
    return log;
  }
  void set_level(LogLevel level) { level_ = level; }
  void set_context(std::string context) { context_ = std::move(context); }
  // The job being served, empty when none: shown in every line's prefix (its name is the
  // client's choice, so printable: no escape sequences or newlines reach the log).
  void set_job(const std::string& job) { job_ = ipc::printable(job); }
  void set_journal(bool journal) { journal_ = journal; }
  bool journal() const { return journal_; }
  bool enabled(LogLevel level) const { return level <= level_; }

  template <class... Args>
  void write(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
    if (!enabled(level)) return;
    static constexpr const char* kNames[] = {"error", "warn", "info", "debug"};
    static constexpr const char* kPriorities[] = {"<3>", "<4>", "<6>", "<7>"};
    const int index = static_cast<int>(level);
    // Messages quote names that clients chose (jobs, tensors): every one is made printable
    // here, at the one place all lines pass, so a name cannot forge a line or drive the
    // terminal. No message is multi-line by design.
    std::string text = ipc::printable(fmt::format(format, std::forward<Args>(args)...));
    const std::string line =
        fmt::format("{}nodecommd[{}{}{}] {}: {}\n", journal_ ? kPriorities[index] : "", context_,
                    job_.empty() ? "" : " job ", job_, kNames[index], text);
    std::fwrite(line.data(), 1, line.size(), stderr);
  }

 private:
  LogLevel level_ = LogLevel::kInfo;
  std::string context_ = "?";
  std::string job_;
  bool journal_ = false;
};

#define NC_LOG(level, ...) \
  ::nodecomm::daemon::Log::get().write(::nodecomm::daemon::LogLevel::level, __VA_ARGS__)

}  // namespace nodecomm::daemon
