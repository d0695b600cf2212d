#include "nodecommd/parse_config.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <stdexcept>
#include <vector>

#include "config/job_weights.hpp"
#include "nodecomm/ipc/byte_size.hpp"
#include "nodecomm/proto/abi.hpp"

#ifndef NODECOMM_DEFAULT_CONFIG_FILE
#define NODECOMM_DEFAULT_CONFIG_FILE "/etc/nodecomm/nodecommd.conf"
#endif

namespace nodecomm::daemon {

const char* const kDefaultConfigFile = NODECOMM_DEFAULT_CONFIG_FILE;

std::string expand_node(std::string text, uint32_t node) {
  const std::string token = "{node}";
  for (size_t pos = text.find(token); pos != std::string::npos; pos = text.find(token, pos)) {
    text.replace(pos, token.size(), std::to_string(node));
  }
  return text;
}

namespace {

// Flags whose NODECOMM_<NAME> the client library or nodecomm-launch read with a meaning of their
// own (which daemon a client attaches to, how a client waits, what a job asks for). The daemon
// inherits its starter's environment (mpirun passes the launcher's on), so it must not take
// those as its own settings: it reads NODECOMMD_<NAME> for them instead.
const std::set<std::string> kClientVariables = {
    "instance", "runtime-dir",      "idle",           "priority-policy",
    "fusion",   "fusion-threshold", "fusion-cycle-us"};

// Options that are not settings: they are never read from the file or the environment.
const std::set<std::string> kMetaOptions = {"help", "config", "print-config", "json"};

[[noreturn]] void usage_error(const std::string& text) {
  std::fprintf(stderr, "nodecommd: %s (see --help)\n", text.c_str());
  std::exit(2);
}

// Every setting, bound to a DaemonConfig or to the text of a value parsed after CLI11.
struct Vars {
  DaemonConfig c;
  std::string default_arena = "64M";
  std::string max_arena = "16G";
  std::string staging_cache = "1G";
  std::string max_staging = "16G";
  std::string max_staging_per_job = "16G";
  std::string log_level = "info";
  std::string algorithm = "auto";
  std::string collective_algorithm = "auto";
  std::string small_bytes = "auto";
  std::string latency_bytes = std::to_string(c.tuning.latency_bytes);
  std::string chunk_bytes = std::to_string(c.tuning.chunk_bytes);
  std::string priority_policy = "direct";
  std::string fusion = "on";
  std::string fusion_threshold = std::to_string(c.sched.fusion_threshold_bytes);
  std::string sched_chunk = "auto";
  std::string sched_window = "auto";
  std::string max_feedback_bytes = "4G";
};

struct Meta {
  std::string config;
  bool print = false;
  bool json = false;
};

void define_settings(CLI::App& app, Vars& v) {
  DaemonConfig& c = v.c;
  app.add_option("--instance", c.instance,
                 "Instance name; '{node}' is replaced by the node index (MPI rank)")
      ->capture_default_str();
  app.add_option("--runtime-dir", c.runtime_dir,
                 "Directory for the socket and ready file (default: <runtime base>/<instance>); "
                 "'{node}' is replaced by the node index");
  app.add_option("--cores", c.cores,
                 "CPUs to pin the daemon to: a list such as 3 or 2-3 (hwloc syntax), 'auto' (the "
                 "last core of the first NUMA domain) or 'none'")
      ->capture_default_str();
  app.add_option("--transport", c.transport,
                 "Inter-node transport: mpi (daemons launched together for one job), loopback "
                 "(one node's jobs only) or service (a persistent daemon that forms each "
                 "multi-node job's group on demand through --rendezvous)")
      ->check(CLI::IsMember({"mpi", "loopback", "service"}))
      ->capture_default_str();
  app.add_option("--rendezvous", c.rendezvous,
                 "--transport service: the URI file of the rendezvous server (ompi-server -r, run "
                 "by nodecomm-rendezvous.service); on a cluster a path every node reads")
      ->capture_default_str();
  app.add_option("--default-arena", v.default_arena, "Arena size for clients that ask for none")
      ->capture_default_str();
  app.add_option("--max-arena", v.max_arena, "Largest arena one client may ask for")
      ->capture_default_str();
  app.add_option("--max-clients", c.max_clients, "Clients attached at once")
      ->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  app.add_option("--max-jobs", c.max_jobs,
                 "Jobs served at once; a rank that would start one more is refused with "
                 "NC_ERR_QUEUE_FULL")
      ->check(CLI::Range(1u, 1024u))
      ->capture_default_str();
  app.add_option("--max-clients-per-uid", c.max_clients_per_uid,
                 "Connections one uid may hold at once; one more is refused at once with "
                 "NC_ERR_QUEUE_FULL (binds where it is below --max-clients)")
      ->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  app.add_option("--hello-timeout-sec", c.hello_timeout_sec,
                 "Drop a connection that has not said hello after this many seconds (0: never)")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  app.add_option("--map-timeout-sec", c.map_timeout_sec,
                 "Drop a client that has not mapped its segment this many seconds after the "
                 "hello reply (0: never)")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  app.add_option("--attach-timeout-sec", c.attach_timeout_sec,
                 "Fail a job whose local ranks have not all attached this many seconds after the "
                 "first one's hello, with NC_ERR_TIMEOUT naming the missing ranks (0: never)")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  app.add_option("--max-in-flight", c.limits.max_in_flight,
                 "Operations one client may have in the daemon at once; one more fails with "
                 "NC_ERR_QUEUE_FULL and poisons its communicator (at least --ring-capacity)")
      ->check(CLI::Range(1u, 1u << 24))
      ->capture_default_str();
  app.add_option("--max-feedback-tensors", c.limits.max_feedback_tensors,
                 "int8 error feedback: residuals kept per job; past this the least recently "
                 "used is dropped (its tensor restarts from zero error)")
      ->check(CLI::Range(1u, 1u << 24))
      ->capture_default_str();
  app.add_option("--max-feedback-bytes", v.max_feedback_bytes,
                 "int8 error feedback: residual bytes kept per job (K, M, G suffixes)")
      ->capture_default_str();
  app.add_option("--ring-capacity", c.ring_capacity,
                 "Submission and completion ring entries per client (power of two)")
      ->check(CLI::Range(2u, 1u << 16))
      ->capture_default_str();
  app.add_option("--staging-cache", v.staging_cache, "Staging memory kept for reuse")
      ->capture_default_str();
  app.add_option("--max-staging", v.max_staging,
                 "Staging memory that operations in flight may hold, all jobs together (0: no "
                 "cap); an operation over it fails with NC_ERR_NO_MEMORY")
      ->capture_default_str();
  app.add_option("--max-staging-per-job", v.max_staging_per_job,
                 "Staging memory that one job's operations in flight may hold (0: no cap)")
      ->capture_default_str();
  app.add_option("--log-level", v.log_level, "error, warn, info or debug")
      ->check(CLI::IsMember({"error", "warn", "info", "debug"}))
      ->capture_default_str();
  app.add_option("--log-format", c.log_format,
                 "auto (journal when stderr goes to the systemd journal), plain, or journal "
                 "(each line starts with its sd-daemon priority, <3> error ... <7> debug)")
      ->check(CLI::IsMember({"auto", "plain", "journal"}))
      ->capture_default_str();
  app.add_option("--allreduce-algorithm", v.algorithm,
                 "Inter-node allreduce: auto (rd up to --small-bytes, ring above), ring, rd "
                 "(recursive doubling) or mpi (MPI_Iallreduce)")
      ->check(CLI::IsMember({"auto", "ring", "rd", "recursive-doubling", "mpi"}))
      ->capture_default_str();
  app.add_option("--collective-algorithm", v.collective_algorithm,
                 "Inter-node reduce_scatter, allgather(v), broadcast and reduce: auto (mpi up to "
                 "--small-bytes on 3 nodes or more, pipelined above), pipelined (ring "
                 "reduce-scatter and allgather, chain broadcast and reduce) or mpi (Open MPI's "
                 "non-blocking collectives)")
      ->check(CLI::IsMember({"auto", "pipelined", "mpi"}))
      ->capture_default_str();
  app.add_option("--small-bytes", v.small_bytes,
                 "auto: allreduces of at most this many bytes use recursive doubling (auto: the "
                 "cost model's switch for the node count and --latency-bytes; the other "
                 "collectives' native ones up to 64K)")
      ->capture_default_str();
  app.add_option("--latency-bytes", v.latency_bytes,
                 "The link's latency times its rate, in bytes (K, M suffixes): --small-bytes "
                 "auto's recursive-doubling/ring switch scales with it (docs/SCALING.md)")
      ->capture_default_str();
  app.add_option("--chunk-size", v.chunk_bytes, "Ring slice size in bytes (K, M suffixes)")
      ->capture_default_str();
  app.add_option("--pipeline-depth", c.tuning.pipeline_depth, "Ring slices in flight per node")
      ->check(CLI::Range(1u, 1024u))
      ->capture_default_str();
  app.add_option("--endpoints", c.tuning.endpoints,
                 "Lanes (MPI communicators) the ring spreads its slices over, like MLSL's epNum")
      ->check(CLI::Range(1u, 64u))
      ->capture_default_str();
  app.add_option("--lanes", c.lanes,
                 "Lanes opened at start; --endpoints can later use at most this many")
      ->check(CLI::Range(1u, 64u))
      ->capture_default_str();
  app.add_option("--idle", c.idle,
                 "How the daemon waits for clients: auto (spin unless its clients outnumber "
                 "the CPUs), spin (a dedicated core) or backoff (a shared machine)")
      ->check(CLI::IsMember({"auto", "spin", "backoff"}))
      ->capture_default_str();
  app.add_option("--net-park-min-us", c.net_park_min_us,
                 "While the network is busy: first sleep between polls (microseconds)")
      ->check(CLI::Range(0u, 100000u))
      ->capture_default_str();
  app.add_option("--net-park-max-us", c.net_park_max_us,
                 "While the network is busy: longest sleep between polls (microseconds)")
      ->check(CLI::Range(0u, 100000u))
      ->capture_default_str();
  app.add_option("--allow-uids", c.allow_uids,
                 "Uids (numbers or user names) that may join a job another uid started")
      ->delimiter(',');
  app.add_option("--allow-groups", c.allow_groups,
                 "Groups (names or gids) whose members may join a job another uid started")
      ->delimiter(',');
  app.add_option("--job-weights", c.job_weights,
                 "Jobs' shares of the node's link when several move data between nodes at once: "
                 "uid:USER=W, group:GROUP=W or *=W (comma-separated); a job gets the largest "
                 "weight of a rule for its rank 0's uid or groups, else *'s, else 1, or less if "
                 "it asks (NODECOMM_JOB_WEIGHT)")
      ->delimiter(',')
      ->check([](const std::string& entry) {
        try {
          parse_job_weights({entry});
          return std::string();
        } catch (const std::invalid_argument& e) {
          return std::string(e.what());
        }
      });
  app.add_option("--admin-group", c.admin_group,
                 "Group (name or gid) whose members may change settings at run time with "
                 "nodecommctl set and trace, besides root and the daemon's uid");
  app.add_option("--stall-sec", c.limits.stall_sec,
                 "Log a stall report for an operation still incomplete after this many seconds, "
                 "naming the ranks and nodes it waits for (0: never)")
      ->check(CLI::Range(0u, 86400u))
      ->capture_default_str();
  app.add_option("--peer-timeout-sec", c.peer_timeout_sec,
                 "Declare another node's daemon lost after this many seconds without its "
                 "heartbeat (sent every tenth of this): the job's operations that span nodes fail "
                 "naming that node (0: never)")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  app.add_option("--client-timeout-sec", c.client_timeout_sec,
                 "Drop a client whose library has not written its heartbeat (every 0.2 s) for "
                 "this many seconds: a stopped, frozen or starved process; its operations fail "
                 "for every peer, naming it (0: never)")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  app.add_option("--op-timeout-sec", c.limits.op_timeout_sec,
                 "Fail an operation that has not reached the network after this many seconds "
                 "(0: never)")
      ->check(CLI::Range(0u, 864000u))
      ->capture_default_str();
  app.add_option("--priority-policy", v.priority_policy,
                 "Order of ready operations on the network: none (submission order), direct "
                 "(the caller's priority, higher first) or lifo (latest submission first)")
      ->check(CLI::IsMember({"none", "direct", "lifo"}))
      ->capture_default_str();
  app.add_option("--fusion", v.fusion, "Pack small ready allreduces into one transfer")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  app.add_option("--fusion-threshold", v.fusion_threshold,
                 "Largest fused transfer in bytes (K, M suffixes), as HOROVOD_FUSION_THRESHOLD")
      ->capture_default_str();
  app.add_option("--fusion-cycle-us", c.sched.fusion_cycle_us,
                 "Shortest time between two scheduling rounds (microseconds), as "
                 "HOROVOD_CYCLE_TIME")
      ->check(CLI::Range(0u, 10000000u))
      ->capture_default_str();
  app.add_option("--sched-chunk-size", v.sched_chunk,
                 "Large operations go out in chunks of this many bytes, and a higher-priority "
                 "operation overtakes at the next chunk; auto: a quarter of the window")
      ->capture_default_str();
  app.add_option("--sched-window", v.sched_window,
                 "Scheduled bytes on the network above which no new round starts; auto: the "
                 "measured rate times --sched-target-us")
      ->capture_default_str();
  app.add_option("--sched-target-us", c.sched.target_delay_us,
                 "auto window: how long the bytes already on the network may delay a newly "
                 "ready operation (microseconds)")
      ->check(CLI::Range(100u, 1000000u))
      ->capture_default_str();
  app.add_option("--sched-hold-us", c.sched.hold_us,
                 "While an operation is more urgent than others on the network (higher "
                 "priority, or newer under lifo), their transfers pause so that it does not "
                 "queue behind them: until it completes, at most this long (microseconds) "
                 "after it was posted here; 0: never pause")
      ->check(CLI::Range(0u, 10000000u))
      ->capture_default_str();
  app.add_option("--sched-hold-max-nodes", c.sched.hold_max_nodes,
                 "Communicators over more nodes than this never pause transfers for a more "
                 "urgent operation: each pause leaves the links idle while the urgent "
                 "operation's own message steps run, which grow with the node count; 0: never "
                 "pause")
      ->check(CLI::Range(0u, 1u << 20))
      ->capture_default_str();
  app.add_option("--sched-hold-stream-us", c.sched.hold_stream_us,
                 "A more urgent operation arriving while transfers pause for another starts a "
                 "stream (a training step's gradients): no pause until this long "
                 "(microseconds) passes without a newer more urgent one, then a pause for the "
                 "most urgent only; 0: pause for every one")
      ->check(CLI::Range(0u, 10000000u))
      ->capture_default_str();
  app.add_option("--sched-urgent-target-us", c.sched.urgent_target_us,
                 "auto window: --sched-target-us for a communicator that has paused transfers "
                 "for a more urgent operation within the last second (microseconds); 0: off")
      ->check(CLI::Range(0u, 1000000u))
      ->capture_default_str();
  app.add_option("--sched-eager-bytes", c.sched.eager_bytes,
                 "Allreduces of at most this many bytes travel inside the scheduling round and "
                 "complete with it, without a transfer of their own; 0: never")
      ->check(CLI::Range(size_t{0}, kMaxEagerBytes))
      ->capture_default_str();
  app.add_option("--sched-gather-nodes", c.sched.gather_nodes,
                 "Communicators over at most this many nodes exchange scheduling records "
                 "all-to-all (one step); larger ones combine them by recursive doubling (log2 N "
                 "steps); node 0's setting applies to the job")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
}

void define_meta(CLI::App& app, Meta& m) {
  app.add_option("--config", m.config,
                 fmt::format("Configuration file, NAME = VALUE lines (default {}, or "
                             "$NODECOMMD_CONFIG; 'none' reads no file)",
                             kDefaultConfigFile));
  app.add_flag("--print-config", m.print,
               "Print every effective setting and where it came from (default, file, env, "
               "flag), then exit");
  app.add_flag("--json", m.json, "With --print-config: print one JSON object");
}

std::string setting_name(const CLI::Option* opt) {
  return opt->get_lnames().empty() ? std::string() : opt->get_lnames().front();
}

// The settings, in --help order.
std::vector<CLI::Option*> settings_of(CLI::App& app) {
  std::vector<CLI::Option*> out;
  for (CLI::Option* opt : app.get_options()) {
    const std::string name = setting_name(opt);
    if (!name.empty() && kMetaOptions.count(name) == 0) out.push_back(opt);
  }
  return out;
}

std::unique_ptr<CLI::App> make_app(Vars& vars, Meta& meta) {
  auto app = std::make_unique<CLI::App>(
      "nodecommd: the nodecomm node daemon. Runs collectives for the training processes "
      "of this node over shared memory and drives the network (MPI) for them.",
      "nodecommd");
  define_settings(*app, vars);
  define_meta(*app, meta);
  for (CLI::Option* opt : settings_of(*app)) {
    opt->description(
        fmt::format("{} [env {}]", opt->get_description(), env_name_for(setting_name(opt))));
    // A flag given twice keeps its last value, as launchers that add their own defaults
    // before the user's (nodecomm-launch --daemon-arg) expect; lists keep every value.
    if (opt->get_items_expected_max() <= 1) {
      opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    }
  }
  app->footer(fmt::format(
      "Every setting can also be given in the configuration file as NAME = VALUE (NAME as the "
      "flag, without dashes) and in the environment variable shown. Precedence: default < "
      "file < environment < flag. --print-config shows the result. File: {}",
      kDefaultConfigFile));
  return app;
}

std::string trim(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return {};
  const size_t last = text.find_last_not_of(" \t\r\n");
  return text.substr(first, last - first + 1);
}

struct FileValue {
  std::string value;
  int line = 0;
};

// Reads NAME = VALUE lines. '#' or ';' start a comment line; '#' after blanks ends an unquoted
// value; values may be quoted with "..." (\" and \\ escapes) or '...'; an optional
// [nodecommd] section line is allowed. Unknown names and repeated names are errors.
std::map<std::string, FileValue> read_config_file(const std::string& path,
                                                  const std::set<std::string>& known) {
  std::ifstream in(path);
  if (!in) usage_error(fmt::format("config file {}: {}", path, std::strerror(errno)));
  std::map<std::string, FileValue> values;
  std::string raw;
  int line = 0;
  while (std::getline(in, raw)) {
    ++line;
    const std::string text = trim(raw);
    const auto where = [&] { return fmt::format("{}:{}", path, line); };
    if (text.empty() || text[0] == '#' || text[0] == ';') continue;
    if (text.front() == '[') {
      if (text != "[nodecommd]") {
        usage_error(fmt::format("{}: unknown section {} (only [nodecommd])", where(), text));
      }
      continue;
    }
    const size_t eq = text.find('=');
    if (eq == std::string::npos) usage_error(fmt::format("{}: expected NAME = VALUE", where()));
    std::string name = trim(text.substr(0, eq));
    std::replace(name.begin(), name.end(), '_', '-');
    if (known.count(name) == 0) {
      usage_error(fmt::format("{}: unknown setting '{}'", where(), name));
    }
    std::string value = trim(text.substr(eq + 1));
    std::string rest;
    if (!value.empty() && (value[0] == '"' || value[0] == '\'')) {
      const char quote = value[0];
      std::string unquoted;
      size_t i = 1;
      bool closed = false;
      for (; i < value.size(); ++i) {
        if (value[i] == quote) {
          closed = true;
          break;
        }
        if (quote == '"' && value[i] == '\\' && i + 1 < value.size()) ++i;
        unquoted.push_back(value[i]);
      }
      if (!closed) usage_error(fmt::format("{}: unterminated quote", where()));
      rest = trim(value.substr(i + 1));
      if (!rest.empty() && rest[0] != '#') {
        usage_error(fmt::format("{}: unexpected text after the quoted value", where()));
      }
      value = unquoted;
    } else {
      for (size_t i = 1; i < value.size(); ++i) {
        if (value[i] == '#' && (value[i - 1] == ' ' || value[i - 1] == '\t')) {
          value = trim(value.substr(0, i));
          break;
        }
      }
      if (value.empty()) usage_error(fmt::format("{}: '{}' has no value", where(), name));
    }
    if (const auto it = values.find(name); it != values.end()) {
      usage_error(
          fmt::format("{}: '{}' is already set on line {}", where(), name, it->second.line));
    }
    values[name] = FileValue{value, line};
  }
  return values;
}

enum class Source { kDefault, kFile, kEnv, kFlag };
constexpr const char* kSourceNames[] = {"default", "file", "env", "flag"};

struct Origin {
  Source source = Source::kDefault;
  std::string where;  // "FILE:LINE", "NODECOMM_X" or "--x"; empty for defaults
  std::string value;  // the text as given
};

std::string quote_if_needed(const std::string& value) {
  const bool plain = !value.empty() && value.find_first_of(" \t#;\"'\\") == std::string::npos;
  if (plain) return value;
  std::string out = "\"";
  for (char ch : value) {
    if (ch == '"' || ch == '\\') out.push_back('\\');
    out.push_back(ch);
  }
  return out + "\"";
}

void print_config(CLI::App& app, const std::map<std::string, Origin>& origins,
                  const std::string& file, const std::string& file_status, bool json) {
  if (json) {
    nlohmann::ordered_json out;
    out["config_file"] = file;
    out["config_file_status"] = file_status;
    nlohmann::ordered_json settings = nlohmann::ordered_json::object();
    for (CLI::Option* opt : settings_of(app)) {
      const std::string name = setting_name(opt);
      const Origin& o = origins.at(name);
      settings[name] = {{"value", o.value},
                        {"source", kSourceNames[static_cast<int>(o.source)]},
                        {"from", o.where},
                        {"env", env_name_for(name)}};
    }
    out["settings"] = std::move(settings);
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::printf(
      "# nodecommd settings: each value and where it came from (default, file, env or "
      "flag)\n");
  std::printf("# config file: %s (%s)\n", file.c_str(), file_status.c_str());
  for (CLI::Option* opt : settings_of(app)) {
    const std::string name = setting_name(opt);
    const Origin& o = origins.at(name);
    std::string line = fmt::format("{} = {}", name, quote_if_needed(o.value));
    if (line.size() < 40) line.resize(40, ' ');
    line += fmt::format(" # {}", kSourceNames[static_cast<int>(o.source)]);
    if (!o.where.empty()) line += " " + o.where;
    std::printf("%s\n", line.c_str());
  }
}

}  // namespace

std::string env_name_for(const std::string& name) {
  std::string env = kClientVariables.count(name) != 0 ? "NODECOMMD_" : "NODECOMM_";
  for (char ch : name) {
    env.push_back(ch == '-' ? '_'
                            : static_cast<char>(std::toupper(static_cast<unsigned char>(ch))));
  }
  return env;
}

DaemonConfig parse_config(int argc, char** argv) {
  // 1. The flags alone: bad flags fail here, before any file or variable is looked at, and
  //    this says which settings the flags give.
  Vars flag_vars;
  Meta meta;
  std::unique_ptr<CLI::App> app = make_app(flag_vars, meta);
  try {
    app->parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app->help().c_str(), stdout);
    std::exit(0);
  } catch (const CLI::ParseError& e) {
    usage_error(e.what());
  }
  std::set<std::string> names;
  std::map<std::string, Origin> origins;
  for (CLI::Option* opt : settings_of(*app)) {
    const std::string name = setting_name(opt);
    names.insert(name);
    if (opt->count() > 0) {
      // A list shows every value; a repeated single value its last (TakeLast, above).
      const bool list = opt->get_items_expected_max() > 1;
      origins[name] =
          Origin{Source::kFlag, "--" + name,
                 list ? fmt::format("{}", fmt::join(opt->results(), ",")) : opt->results().back()};
    } else {
      origins[name] = Origin{Source::kDefault, {}, opt->get_default_str()};
    }
  }

  // 2. The configuration file: --config, else $NODECOMMD_CONFIG, else the default, which may
  //    be missing. 'none' reads no file.
  std::string file = kDefaultConfigFile;
  bool explicit_file = false;
  if (app->get_option("--config")->count() > 0) {
    file = meta.config;
    explicit_file = true;
  } else if (const char* env = std::getenv("NODECOMMD_CONFIG"); env != nullptr && *env != '\0') {
    file = env;
    explicit_file = true;
  }
  std::string file_status;
  std::map<std::string, FileValue> file_values;
  const std::string shown_file = file;
  if (file == "none") {
    file_status = "not read";
    file.clear();
  } else if (!explicit_file && ::access(file.c_str(), F_OK) != 0 && errno == ENOENT) {
    file_status = "not found";
    file.clear();
  } else {
    file_values = read_config_file(file, names);
    file_status = "read";
  }

  // 3. Environment and file values for the settings no flag gave; each is checked on its own
  //    so that an error names the variable or the file line it came from.
  std::vector<std::string> args;
  args.emplace_back(argc > 0 ? argv[0] : "nodecommd");
  for (const std::string& name : names) {
    Origin& o = origins[name];
    if (o.source == Source::kFlag) continue;
    const std::string env_name = env_name_for(name);
    if (const char* value = std::getenv(env_name.c_str()); value != nullptr && *value != '\0') {
      o = Origin{Source::kEnv, env_name, value};
    } else if (const auto it = file_values.find(name); it != file_values.end()) {
      o = Origin{Source::kFile, fmt::format("{}:{}", file, it->second.line), it->second.value};
    } else {
      continue;
    }
    if (o.value.empty()) {
      // Only a setting whose default is empty (runtime-dir) may be set to it.
      if (!app->get_option("--" + name)->get_default_str().empty()) {
        usage_error(fmt::format("{} ({}): empty value", o.where, name));
      }
      continue;
    }
    Vars check_vars;
    Meta check_meta;
    std::unique_ptr<CLI::App> check = make_app(check_vars, check_meta);
    const std::string arg = fmt::format("--{}={}", name, o.value);
    const char* check_argv[] = {"nodecommd", arg.c_str()};
    try {
      check->parse(2, check_argv);
    } catch (const CLI::ParseError& e) {
      usage_error(fmt::format("{} ({}): {}", o.where, name, e.what()));
    }
    args.push_back(arg);
  }
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);

  // 4. Everything together: file and environment values as flags first, then the real flags.
  Vars v;
  Meta final_meta;
  app = make_app(v, final_meta);
  std::vector<const char*> final_argv;
  final_argv.reserve(args.size());
  for (const std::string& a : args) final_argv.push_back(a.c_str());
  try {
    app->parse(static_cast<int>(final_argv.size()), final_argv.data());
  } catch (const CLI::ParseError& e) {
    usage_error(e.what());
  }

  const auto label = [&](const std::string& name) {
    const Origin& o = origins.at(name);
    return o.source == Source::kFile ? fmt::format("{} ({})", o.where, name)
           : o.where.empty()         ? "--" + name
                                     : o.where;
  };
  const auto bytes = [&](const std::string& name, const std::string& text) {
    std::string why;
    const std::optional<uint64_t> value = ipc::parse_byte_size(text, why);
    if (!value) usage_error(fmt::format("{}: bad size '{}': {}", label(name), text, why));
    return *value;
  };
  DaemonConfig& c = v.c;
  c.sched.policy = parse_priority_policy(v.priority_policy);
  c.sched.fusion = v.fusion == "on";
  c.sched.fusion_threshold_bytes = bytes("fusion-threshold", v.fusion_threshold);
  // 0: adaptive (SchedulerTuning).
  c.sched.chunk_bytes = v.sched_chunk == "auto" ? 0 : bytes("sched-chunk-size", v.sched_chunk);
  c.sched.window_bytes = v.sched_window == "auto" ? 0 : bytes("sched-window", v.sched_window);
  c.tuning.allreduce = parse_algorithm(v.algorithm);
  c.tuning.collectives = parse_collective_algorithm(v.collective_algorithm);
  c.tuning.small_bytes =
      v.small_bytes == "auto" ? kAutoSmallBytes : bytes("small-bytes", v.small_bytes);
  c.tuning.latency_bytes = bytes("latency-bytes", v.latency_bytes);
  if (c.tuning.latency_bytes > (uint64_t{1} << 32) - 1) {
    usage_error(label("latency-bytes") + ": at most 4G - 1");
  }
  c.tuning.chunk_bytes = bytes("chunk-size", v.chunk_bytes);
  if (c.tuning.chunk_bytes == 0) usage_error(label("chunk-size") + ": must be > 0");
  c.lanes = std::max(c.lanes, c.tuning.endpoints);
  if (!proto::is_power_of_two(c.ring_capacity)) {
    usage_error(label("ring-capacity") + ": must be a power of two");
  }
  if (c.limits.max_in_flight < c.ring_capacity) {
    // The library lets a client have a ring's worth in flight: a lower cap would fail
    // correct programs. Raised silently only when nobody asked for the lower one.
    if (origins.at("max-in-flight").source != Source::kDefault) {
      usage_error(fmt::format(
          "{}: {} is below {} {} (a client may have that many operations in "
          "flight)",
          label("max-in-flight"), c.limits.max_in_flight, label("ring-capacity"), c.ring_capacity));
    }
    c.limits.max_in_flight = c.ring_capacity;
  }
  c.limits.max_feedback_bytes = bytes("max-feedback-bytes", v.max_feedback_bytes);
  c.default_arena_bytes = bytes("default-arena", v.default_arena);
  c.max_arena_bytes = bytes("max-arena", v.max_arena);
  c.staging_cache_bytes = bytes("staging-cache", v.staging_cache);
  c.max_staging_bytes = bytes("max-staging", v.max_staging);
  c.max_staging_per_job_bytes = bytes("max-staging-per-job", v.max_staging_per_job);
  const std::string levels[] = {"error", "warn", "info", "debug"};
  for (int i = 0; i < 4; ++i) {
    if (levels[i] == v.log_level) c.log_level = static_cast<LogLevel>(i);
  }

  if (meta.print) {
    print_config(*app, origins, shown_file, file_status, meta.json);
    std::exit(0);
  }
  if (meta.json) usage_error("--json goes with --print-config");

  int counts[4] = {0, 0, 0, 0};
  for (const auto& [name, o] : origins) ++counts[static_cast<int>(o.source)];
  c.config_file = file;
  c.settings_from_file_or_env = counts[1] + counts[2];
  c.origin_summary = fmt::format(
      "config file {} ({}); {} setting(s) from the file, {} from the environment, "
      "{} from flags",
      shown_file, file_status, counts[1], counts[2], counts[3]);
  return c;
}

}  // namespace nodecomm::daemon
