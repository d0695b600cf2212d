#include "nodecomm/ipc/runtime_paths.hpp"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace nodecomm::ipc {

std::string default_runtime_base() {
  if (const char* base = std::getenv("NODECOMM_RUNTIME_BASE"); base != nullptr && *base != '\0') {
    return base;
  }
  if (::geteuid() == 0) return "/run/nodecomm";
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg != nullptr && *xdg != '\0') {
    return std::string(xdg) + "/nodecomm";
  }
  return fmt::format("/tmp/nodecomm-{}", ::geteuid());
}

std::string instance_runtime_dir(const std::string& instance) {
  return default_runtime_base() + "/" + instance;
}

std::string socket_path(const std::string& runtime_dir) {
  return runtime_dir + "/" + kSocketFileName;
}

std::string ready_path(const std::string& runtime_dir) {
  return runtime_dir + "/" + kReadyFileName;
}

std::string segment_prefix(const std::string& instance) {
  // One path component, no slashes: instance names may contain them only via runtime dirs.
  std::string clean;
  for (char c : instance) clean.push_back(c == '/' ? '_' : c);
  return "/nodecomm." + clean + ".";
}

std::string counters_shm_name(const std::string& instance) {
  return segment_prefix(instance) + "counters";
}

std::string trace_shm_name(const std::string& instance) {
  return segment_prefix(instance) + "trace";
}

}  // namespace nodecomm::ipc
