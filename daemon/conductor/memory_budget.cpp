#include "conductor/memory_budget.hpp"

#include <fmt/format.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace nodecomm::daemon {
namespace {

constexpr uint64_t kUnlimited = uint64_t{1} << 62;  // v1 reports "no limit" as ~2^63

std::optional<uint64_t> read_number(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word == "max") return std::nullopt;
  try {
    return std::stoull(word);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// A "key value" line of a flat-keyed cgroup file (memory.stat, memory.oom_control).
uint64_t read_key(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string k;
  uint64_t v = 0;
  while (in >> k >> v) {
    if (k == key) return v;
  }
  return 0;
}

struct CgroupMount {
  std::string root;        // the cgroup path mounted there (not "/" inside a cgroup namespace)
  std::string mountpoint;  // where it is mounted
};

// The mounts of the v1 memory hierarchy and of the v2 unified hierarchy, from mountinfo.
void find_mounts(std::optional<CgroupMount>& v1, std::optional<CgroupMount>& v2) {
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream head(line.substr(0, dash));
    std::istringstream tail(line.substr(dash + 3));
    std::string id, parent, devno, root, mountpoint, fstype, source, options;
    head >> id >> parent >> devno >> root >> mountpoint;
    tail >> fstype >> source >> options;
    if (fstype == "cgroup2" && !v2) v2 = CgroupMount{root, mountpoint};
    if (fstype == "cgroup" && !v1 && ("," + options + ",").find(",memory,") != std::string::npos) {
      v1 = CgroupMount{root, mountpoint};
    }
  }
}

// Our cgroup path in the v1 memory hierarchy ("" if none) and in the v2 hierarchy.
void own_cgroups(std::string& v1_path, std::string& v2_path) {
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) v2_path = path;
    if (("," + controllers + ",").find(",memory,") != std::string::npos) v1_path = path;
  }
}

// The directory of `path` under `mount`, or "" when the path lies outside what is mounted.
std::string cgroup_dir(const CgroupMount& mount, std::string path) {
  if (mount.root != "/") {
    if (path.compare(0, mount.root.size(), mount.root) != 0) return {};
    path.erase(0, mount.root.size());
  }
  while (!path.empty() && path.back() == '/') path.pop_back();
  return mount.mountpoint + path;
}

// Checks `dir` and every level above it up to the mount point.
std::string check_levels(const CgroupMount& mount, std::string dir, bool v2, uint64_t need) {
  const size_t shown_from = mount.mountpoint.size();  // the text names the cgroup, not the mount
  while (dir.size() >= mount.mountpoint.size()) {
    const std::optional<uint64_t> limit =
        read_number(dir + (v2 ? "/memory.max" : "/memory.limit_in_bytes"));
    const std::optional<uint64_t> usage =
        read_number(dir + (v2 ? "/memory.current" : "/memory.usage_in_bytes"));
    const bool oom_killer_off =
        !v2 && read_key(dir + "/memory.oom_control", "oom_kill_disable") != 0;
    if (limit && usage && *limit < kUnlimited && !oom_killer_off) {
      // Inactive page cache is given back before the limit bites; the rest is not.
      const uint64_t cache =
          read_key(dir + "/memory.stat", v2 ? "inactive_file" : "total_inactive_file");
      const uint64_t used = *usage > cache ? *usage - cache : 0;
      const uint64_t room = *limit > used ? *limit - used : 0;
      if (need > room) {
        const std::string name = dir.size() > shown_from ? dir.substr(shown_from) : "/";
        return fmt::format("memory cgroup {} ({}) has {} of its {}-byte limit free", name,
                           v2 ? "v2" : "v1", room, *limit);
      }
    }
    if (dir == mount.mountpoint) break;
    dir.erase(dir.rfind('/'));
  }
  return {};
}

}  // namespace

std::string memory_shortfall(uint64_t bytes) {
  const uint64_t need = bytes + kMemoryReserveBytes;
  const uint64_t available_kib = [] {
    std::ifstream in("/proc/meminfo");
    std::string key;
    uint64_t value = 0;
    std::string unit;
    while (in >> key >> value) {
      if (key == "MemAvailable:") return value;
      std::getline(in, unit);
    }
    return uint64_t{0};
  }();
  if (available_kib != 0 && need > available_kib * 1024) {
    return fmt::format("the node has {} bytes available (MemAvailable)", available_kib * 1024);
  }
  std::optional<CgroupMount> v1;
  std::optional<CgroupMount> v2;
  find_mounts(v1, v2);
  std::string v1_path;
  std::string v2_path;
  own_cgroups(v1_path, v2_path);
  if (v1 && !v1_path.empty()) {
    if (const std::string dir = cgroup_dir(*v1, v1_path); !dir.empty()) {
      if (std::string why = check_levels(*v1, dir, false, need); !why.empty()) return why;
    }
  }
  if (v2 && !v2_path.empty()) {
    if (const std::string dir = cgroup_dir(*v2, v2_path); !dir.empty()) {
      if (std::string why = check_levels(*v2, dir, true, need); !why.empty()) return why;
    }
  }
  return {};
}

}  // namespace nodecomm::daemon
