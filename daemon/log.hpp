// Daemon logging: one line per event on stderr, prefixed with the instance and node, so
// that lines from several simulated nodes in one terminal stay attributable.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <utility>

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
  bool enabled(LogLevel level) const { return level <= level_; }

  template <class... Args>
  void write(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
    if (!enabled(level)) return;
    static constexpr const char* kNames[] = {"error", "warn", "info", "debug"};
    const std::string line =
        fmt::format("nodecommd[{}] {}: {}\n", context_, kNames[static_cast<int>(level)],
                    fmt::format(format, std::forward<Args>(args)...));
    std::fwrite(line.data(), 1, line.size(), stderr);
  }

 private:
  LogLevel level_ = LogLevel::kInfo;
  std::string context_ = "?";
};

#define NC_LOG(level, ...) \
  ::nodecomm::daemon::Log::get().write(::nodecomm::daemon::LogLevel::level, __VA_ARGS__)

}  // namespace nodecomm::daemon
