// What nodecommctl prints: text tables for people, JSON for scripts, Prometheus text for
// scrapers, and Chrome trace-event JSON for chrome://tracing and Perfetto.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "reader.hpp"

namespace nodecomm::ctl {

using Json = nlohmann::ordered_json;

// One line per instance found in /dev/shm (dead ones marked).
struct ListedInstance {
  std::string shm_name;
  bool readable = false;
  std::string error;  // why not readable
  Snapshot snapshot;
};
Json list_json(const std::vector<ListedInstance>& instances);
std::string list_text(const std::vector<ListedInstance>& instances);

// "running", "not running" (stale segment) or "wedged" (no heartbeat for 5 s).
std::string daemon_state(const Snapshot& s);

Json status_json(const Snapshot& s);
std::string status_text(const Snapshot& s);
Json clients_json(const Snapshot& s);
std::string clients_text(const Snapshot& s);
Json ops_json(const Snapshot& s);
std::string ops_text(const Snapshot& s);
// The jobs table: name, state, owner uid, ranks attached, placement, operations, age.
Json jobs_json(const Snapshot& s);
std::string jobs_text(const Snapshot& s);
// `previous` (may be null) adds per-second rates over the interval between the two.
Json counters_json(const Snapshot& s, const Snapshot* previous);
std::string counters_text(const Snapshot& s, const Snapshot* previous);
Json params_json(const Snapshot& s);

// Prometheus text exposition format 0.0.4, every name prefixed nodecomm_, labelled with the
// instance and node.
std::string metrics_text(const std::vector<Snapshot>& snapshots);

// Chrome trace-event format: {"traceEvents": [...], "displayTimeUnit": "ms", ...}.
Json chrome_trace(const TraceData& trace);

std::string human_duration(double seconds);

}  // namespace nodecomm::ctl
