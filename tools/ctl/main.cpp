// nodecommctl: the administrator's view of the nodecommd instances on this node. Read-only
// commands map the daemon's counters segment (/dev/shm/nodecomm.<instance>.counters) and never
// ask the daemon anything, so they answer even when it or its job is wedged. `set` and
// `trace` go through the daemon's control socket, which checks the caller with SO_PEERCRED.
// Exit status: 0 ok, 1 failure at run time (daemon not running, request refused), 2 usage.
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <set>
#include <thread>

#include "nodecomm/ipc/fixed_text.hpp"
#include "nodecomm/ipc/printable.hpp"
#include "nodecomm/ipc/runtime_paths.hpp"
#include "nodecomm/proto/types.hpp"
#include "reader.hpp"
#include "report.hpp"

namespace nodecomm::ctl {
namespace {

struct Options {
  std::string instance;
  std::string runtime_dir;
  std::string job;  // --job NAME: only that job's rows
  bool json = false;
  double watch = 0;
  uint64_t count = 0;
  std::string key;
  std::string value;
  std::string file;
  uint64_t events = 0;
  bool all = false;
};

void print(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
}
void print_json(const Json& j) {
  print(j.dump(2) + "\n");
}

// The selected instance, which must be running.
Snapshot read_instance(const Options& o) {
  const std::string name = resolve_counters_name(o.instance, o.runtime_dir);
  if (::access(("/dev/shm" + name).c_str(), F_OK) != 0) {
    throw RuntimeError(fmt::format(
        "instance '{}' is not running on this node (no /dev/shm{}); `nodecommctl list` shows "
        "the instances",
        instance_of(name), name));
  }
  const CountersView view(name);
  Snapshot s = view.read();
  if (!s.alive) {
    throw RuntimeError(
        fmt::format("instance '{}' is not running: /dev/shm{} was left by pid {}, which has exited",
                    s.instance(), name, s.daemon.pid));
  }
  return s;
}

// The selected instance, narrowed to --job's job when one is given.
Snapshot read_selected(const Options& o) {
  Snapshot s = read_instance(o);
  return o.job.empty() ? s : only_job(s, o.job);
}

int cmd_list(const Options& o) {
  std::vector<ListedInstance> found;
  for (const std::string& name : list_counters_names()) {
    ListedInstance item;
    item.shm_name = name;
    try {
      item.snapshot = CountersView(name).read();
      item.readable = true;
    } catch (const RuntimeError& e) {
      item.error = e.what();
    }
    found.push_back(std::move(item));
  }
  if (o.json) {
    print_json(list_json(found));
  } else if (found.empty()) {
    print("no nodecommd instances on this node (no /dev/shm/nodecomm.*.counters)\n");
  } else {
    print(list_text(found));
  }
  return 0;
}

int cmd_counters(const Options& o) {
  if (o.watch < 0) throw UsageError("--watch: must be a positive number of seconds");
  Snapshot previous = read_instance(o);
  if (o.watch == 0) {
    o.json ? print_json(counters_json(previous, nullptr)) : print(counters_text(previous, nullptr));
    return 0;
  }
  // --watch: a sample every interval, with rates over it (JSON: one object per line).
  for (uint64_t n = 1; o.count == 0 || n < o.count; ++n) {
    std::this_thread::sleep_for(std::chrono::duration<double>(o.watch));
    Snapshot now = read_instance(o);
    if (o.json) {
      print(counters_json(now, &previous).dump() + "\n");
    } else {
      print(fmt::format("--- {} ---\n", now.instance()) + counters_text(now, &previous));
    }
    std::fflush(stdout);
    previous = std::move(now);
  }
  return 0;
}

int cmd_get(const Options& o) {
  const Snapshot s = read_instance(o);
  const Json params = params_json(s);
  if (o.key.empty()) {
    if (o.json) {
      print_json(params);
    } else {
      for (const auto& [key, value] : params.items()) {
        print(fmt::format("{} = {}\n", key, value.get<std::string>()));
      }
    }
    return 0;
  }
  if (!params.contains(o.key)) {
    std::vector<std::string> keys;
    for (const auto& [key, value] : params.items()) keys.push_back(key);
    throw UsageError(
        fmt::format("get: unknown setting '{}'; known: {}", o.key, fmt::join(keys, ", ")));
  }
  o.json ? print_json(Json{{o.key, params[o.key]}})
         : print(params[o.key].get<std::string>() + "\n");
  return 0;
}

proto::AdminReply admin(const Snapshot& s, proto::AdminVerb verb, const std::string& key,
                        const std::string& value, const std::string& what) {
  const proto::AdminReply reply =
      admin_request(ipc::bounded_text(s.daemon.socket_path), verb, key, value);
  if (reply.status != static_cast<int32_t>(proto::Status::kOk)) {
    throw RuntimeError(fmt::format("{} refused by instance '{}' ({}): {}", what, s.instance(),
                                   proto::status_name(static_cast<proto::Status>(reply.status)),
                                   reply.message));
  }
  return reply;
}

int cmd_set(const Options& o) {
  const Snapshot s = read_instance(o);
  const proto::AdminReply reply =
      admin(s, proto::AdminVerb::kSet, o.key, o.value, fmt::format("set {}", o.key));
  o.json ? print_json(Json{{"instance", s.instance()},
                           {"key", o.key},
                           {"value", o.value},
                           {"message", reply.message}})
         : print(fmt::format("{}: {}\n", s.instance(), reply.message));
  return 0;
}

int cmd_trace_start(const Options& o) {
  const Snapshot s = read_instance(o);
  const proto::AdminReply reply =
      admin(s, proto::AdminVerb::kTraceStart, "",
            o.events == 0 ? std::string() : std::to_string(o.events), "trace start");
  o.json ? print_json(Json{{"instance", s.instance()}, {"message", reply.message}})
         : print(fmt::format("{}: {}\n", s.instance(), reply.message));
  return 0;
}

// The serials of the jobs called `name` in the trace and among the jobs served now (a job
// may have started after the trace's last event, or ended before trace stop).
std::set<uint32_t> traced_serials(const Snapshot& s, const TraceData& trace,
                                  const std::string& name) {
  std::set<uint32_t> serials;
  for (const proto::TraceJob& j : trace.jobs) {
    if (name_matches(j.name, name)) serials.insert(static_cast<uint32_t>(j.serial));
  }
  for (uint32_t i = 0; i < s.jobs.count; ++i) {
    if (name_matches(s.jobs.slots[i].name, name)) {
      serials.insert(static_cast<uint32_t>(s.jobs.slots[i].serial));
    }
  }
  return serials;
}

int cmd_trace_stop(const Options& o) {
  const Snapshot s = read_instance(o);
  const std::string shm = ipc::trace_shm_name(s.instance());
  if (!o.job.empty()) {
    // A job nobody knows is refused before the trace is stopped, so it can be stopped again.
    TraceData so_far;
    try {
      so_far = read_trace(shm);
    } catch (const RuntimeError&) {
      // No trace (yet): the jobs served now decide, and the stop below says what is wrong.
    }
    if (traced_serials(s, so_far, o.job).empty()) {
      std::string traced;
      for (const proto::TraceJob& j : so_far.jobs) {
        traced += fmt::format("{}'{}'", traced.empty() ? "" : ", ", ipc::printable_text(j.name));
      }
      throw RuntimeError(fmt::format(
          "trace stop: instance '{}' has no job '{}'; its jobs: {}; jobs in the trace: {}",
          s.instance(), ipc::printable(o.job), job_names(s), traced.empty() ? "none" : traced));
    }
  }
  // Open FILE first: once stopped, the buffer waits for us only until the next trace start.
  std::ofstream out;
  if (o.file != "-") {
    out.open(o.file, std::ios::trunc);
    if (!out) {
      throw RuntimeError(
          fmt::format("trace stop: cannot write {}: {}", o.file, std::strerror(errno)));
    }
  }
  admin(s, proto::AdminVerb::kTraceStop, "", "", "trace stop");
  TraceData trace = read_trace(shm);
  if (!o.job.empty()) {
    const std::set<uint32_t> keep = traced_serials(s, trace, o.job);
    std::erase_if(trace.events, [&](const proto::TraceEvent& e) { return keep.count(e.job) == 0; });
  }
  const std::string text = chrome_trace(trace).dump() + "\n";
  if (o.file == "-") {
    print(text);
    return 0;
  }
  out << text;
  out.close();
  if (!out) throw RuntimeError(fmt::format("trace stop: writing {} failed", o.file));
  const std::string summary =
      fmt::format("{}: wrote {} events{} to {} ({} dropped)", s.instance(), trace.events.size(),
                  o.job.empty() ? "" : fmt::format(" of job '{}'", ipc::printable(o.job)), o.file,
                  trace.header.dropped);
  o.json ? print_json(Json{{"instance", s.instance()},
                           {"file", o.file},
                           {"job", o.job.empty() ? Json(nullptr) : Json(ipc::printable(o.job))},
                           {"events", trace.events.size()},
                           {"dropped", trace.header.dropped}})
         : print(summary + "\n");
  return 0;
}

int cmd_metrics(const Options& o) {
  std::vector<Snapshot> snapshots;
  if (o.all) {
    std::string jobs;  // every instance's, for the message when none serves --job's
    for (const std::string& name : list_counters_names()) {
      try {
        Snapshot s = CountersView(name).read();
        if (!s.alive) continue;
        jobs += fmt::format("{}{}: {}", jobs.empty() ? "" : "; ", s.instance(), job_names(s));
        if (!o.job.empty()) s = only_job(s, o.job);
        snapshots.push_back(std::move(s));
      } catch (const RuntimeError&) {
        // An unreadable or half-built segment is not exported, nor one without the job.
      }
    }
    if (!o.job.empty() && snapshots.empty()) {
      throw RuntimeError(fmt::format("no instance on this node serves job '{}' ({})",
                                     ipc::printable(o.job), jobs.empty() ? "none runs" : jobs));
    }
  } else {
    snapshots.push_back(read_selected(o));
  }
  if (o.json) {  // the same numbers as `counters --json`, one object per instance
    Json all = Json::array();
    for (const Snapshot& s : snapshots) all.push_back(counters_json(s, nullptr));
    print_json(all);
    return 0;
  }
  print(metrics_text(snapshots));
  return 0;
}

int run(int argc, char** argv) {
  CLI::App app(
      "nodecommctl: status, counters, runtime settings and traces of the nodecommd instances on "
      "this node. Read-only commands map the daemon's counters segment and never ask the daemon "
      "anything; set and trace go through its control socket (root, the daemon's uid or its "
      "admin-group).",
      "nodecommctl");
  app.require_subcommand(1);
  // An option a command does not have goes to nodecommctl's own (`counters --job a` is then
  // refused below with a word on who takes it).
  app.fallthrough();
  Options o;
  const auto common = [&](CLI::App* sub) {
    sub->add_option("--instance", o.instance,
                    "Daemon instance (default: $NODECOMM_INSTANCE, else 'default' if it runs, "
                    "else the only one running)");
    sub->add_option("--runtime-dir", o.runtime_dir,
                    "The instance whose runtime directory (nodecommd.ready) is DIR");
    sub->add_flag("--json", o.json, "Print JSON instead of text");
    return sub;
  };
  const auto job_filter = [&](CLI::App* sub) {
    sub->add_option("--job", o.job,
                    "Only this job's rows (its name as given to the ranks, or as printed)");
    return sub;
  };
  // Before the command too: `nodecommctl --instance X status` as well as `... status --instance X`.
  job_filter(common(&app));
  common(app.add_subcommand("list", "Instances on this node (from /dev/shm)"));
  job_filter(common(app.add_subcommand("status", "Daemon, jobs, liveness, totals and settings")));
  job_filter(common(app.add_subcommand("jobs", "The jobs served: ranks, owner, operations, age")));
  job_filter(
      common(app.add_subcommand("clients", "Attached clients: ranks, pids, heartbeat, ops")));
  job_filter(common(
      app.add_subcommand("ops", "Operations in flight, oldest first, and whom they wait for")));
  CLI::App* counters =
      common(app.add_subcommand("counters", "Counters and latency per collective"));
  counters->add_option("--watch", o.watch,
                       "Print every SECONDS with rates (JSON Lines with --json)");
  counters->add_option("--count", o.count, "With --watch: stop after N samples");
  CLI::App* get = common(app.add_subcommand("get", "Current settings, or one setting's value"));
  get->add_option("KEY", o.key, "Setting name, as in nodecommd --print-config");
  CLI::App* set = common(app.add_subcommand("set", "Change a setting at run time"));
  set->add_option("KEY", o.key, "Setting name (chunk-size, log-level, ...)")->required();
  set->add_option("VALUE", o.value, "New value, as on nodecommd's command line")->required();
  CLI::App* metrics =
      job_filter(common(app.add_subcommand("metrics", "Prometheus text exposition")));
  metrics->add_flag("--all", o.all, "Every running instance on this node");
  CLI::App* trace = app.add_subcommand("trace", "Record a Chrome trace-event timeline");
  trace->require_subcommand(1);
  CLI::App* trace_start = common(trace->add_subcommand("start", "Start recording in the daemon"));
  trace_start->add_option("--events", o.events, "Buffer capacity in events (default 65536)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20));
  CLI::App* trace_stop =
      job_filter(common(trace->add_subcommand("stop", "Stop and write FILE ('-': stdout)")));
  trace_stop->add_option("FILE", o.file, "Chrome trace-event JSON file")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "nodecommctl: %s (see --help)\n", e.what());
    return 2;
  }
  const CLI::App* sub = app.get_subcommands().front();
  const std::string name = sub->get_name();
  const bool filters = name == "status" || name == "jobs" || name == "clients" || name == "ops" ||
                       name == "metrics" || (name == "trace" && trace_stop->parsed());
  if (!o.job.empty() && !filters) {
    throw UsageError(fmt::format(
        "--job: {} does not take it (status, jobs, clients, ops, metrics and trace stop do)",
        name == "trace" ? "trace start" : name));
  }
  if (name == "list") return cmd_list(o);
  if (name == "status") {
    const Snapshot s = read_selected(o);
    o.json ? print_json(status_json(s)) : print(status_text(s));
    return 0;
  }
  if (name == "jobs") {
    const Snapshot s = read_selected(o);
    o.json ? print_json(jobs_json(s)) : print(jobs_text(s));
    return 0;
  }
  if (name == "clients") {
    const Snapshot s = read_selected(o);
    o.json ? print_json(clients_json(s)) : print(clients_text(s));
    return 0;
  }
  if (name == "ops") {
    const Snapshot s = read_selected(o);
    o.json ? print_json(ops_json(s)) : print(ops_text(s));
    return 0;
  }
  if (name == "counters") return cmd_counters(o);
  if (name == "get") return cmd_get(o);
  if (name == "set") return cmd_set(o);
  if (name == "metrics") return cmd_metrics(o);
  if (name == "trace") {
    return trace_start->parsed() ? cmd_trace_start(o) : cmd_trace_stop(o);
  }
  throw UsageError("unknown command " + name);
}

}  // namespace
}  // namespace nodecomm::ctl

int main(int argc, char** argv) {
  try {
    return nodecomm::ctl::run(argc, argv);
  } catch (const nodecomm::ctl::UsageError& e) {
    std::fprintf(stderr, "nodecommctl: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nodecommctl: %s\n", e.what());
    return 1;
  }
}
