#include "nodecommd/affinity.hpp"

#include <fmt/format.h>
#include <hwloc.h>

namespace nodecomm::daemon {

std::string pin_to_cores(const std::string& list) {
  hwloc_topology_t topology = nullptr;
  if (hwloc_topology_init(&topology) != 0 || hwloc_topology_load(topology) != 0) {
    return "hwloc could not load the machine topology";
  }
  hwloc_bitmap_t wanted = hwloc_bitmap_alloc();
  std::string error;
  if (hwloc_bitmap_list_sscanf(wanted, list.c_str()) != 0 || hwloc_bitmap_iszero(wanted)) {
    error = fmt::format("--cores '{}' is not a CPU list like 3 or 2-3,6", list);
  } else if (!hwloc_bitmap_isincluded(wanted, hwloc_topology_get_allowed_cpuset(topology))) {
    char* allowed = nullptr;
    hwloc_bitmap_list_asprintf(&allowed, hwloc_topology_get_allowed_cpuset(topology));
    error = fmt::format("--cores '{}' is outside the CPUs this process may use ({})", list,
                        allowed != nullptr ? allowed : "?");
    free(allowed);
  } else if (hwloc_set_cpubind(topology, wanted, HWLOC_CPUBIND_PROCESS) != 0) {
    error = fmt::format("binding to CPUs {} failed", list);
  }
  hwloc_bitmap_free(wanted);
  hwloc_topology_destroy(topology);
  return error;
}

std::string default_daemon_cores() {
  hwloc_topology_t topology = nullptr;
  if (hwloc_topology_init(&topology) != 0 || hwloc_topology_load(topology) != 0) return {};
  std::string list;
  hwloc_const_cpuset_t domain = hwloc_topology_get_allowed_cpuset(topology);
  if (hwloc_obj_t numa = hwloc_get_obj_by_type(topology, HWLOC_OBJ_NUMANODE, 0);
      numa != nullptr && numa->cpuset != nullptr && !hwloc_bitmap_iszero(numa->cpuset)) {
    domain = numa->cpuset;
  }
  hwloc_obj_t last = nullptr;
  for (hwloc_obj_t core =
           hwloc_get_next_obj_inside_cpuset_by_type(topology, domain, HWLOC_OBJ_CORE, nullptr);
       core != nullptr;
       core = hwloc_get_next_obj_inside_cpuset_by_type(topology, domain, HWLOC_OBJ_CORE, core)) {
    if (hwloc_bitmap_intersects(core->cpuset, hwloc_topology_get_allowed_cpuset(topology))) {
      last = core;
    }
  }
  if (last != nullptr) {
    hwloc_bitmap_t allowed = hwloc_bitmap_dup(last->cpuset);
    hwloc_bitmap_and(allowed, allowed, hwloc_topology_get_allowed_cpuset(topology));
    char* text = nullptr;
    if (hwloc_bitmap_list_asprintf(&text, allowed) >= 0 && text != nullptr) list = text;
    free(text);
    hwloc_bitmap_free(allowed);
  }
  hwloc_topology_destroy(topology);
  return list;
}

}  // namespace nodecomm::daemon
