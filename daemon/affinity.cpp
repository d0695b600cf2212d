#include "affinity.hpp"

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

}  // namespace nodecomm::daemon
