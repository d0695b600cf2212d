#include "launch_env.hpp"

#include <cstdlib>

namespace nodecomm::bench {

int env_index(const char* name, int max) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return -1;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  return *end == '\0' && value >= 0 && value < max ? static_cast<int>(value) : -1;
}

int env_count(const char* name, int max) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return 0;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  return *end == '\0' && value >= 1 && value <= max ? static_cast<int>(value) : 0;
}

LaunchLayout launch_layout(int world_size) {
  LaunchLayout layout;
  layout.nodes = env_count("NODECOMM_NODES", world_size);
  if (layout.nodes == 0) return layout;
  layout.local_size = env_count("NODECOMM_LOCAL_SIZE", world_size);
  if (layout.local_size == 0) layout.local_size = (world_size + layout.nodes - 1) / layout.nodes;
  layout.node = env_index("NODECOMM_NODE", layout.nodes);
  return layout;
}

}  // namespace nodecomm::bench
