// nodecommd's settings. Each comes from, in rising precedence: its default, the configuration
// file (/etc/nodecomm/nodecommd.conf or --config FILE), the environment (NODECOMM_<NAME>, or
// NODECOMMD_<NAME> where the client library already uses NODECOMM_<NAME>), and the flags.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/log.hpp"
#include "config/tuning.hpp"

namespace nodecomm::daemon {

struct DaemonConfig {
  std::string instance = "default";
  std::string runtime_dir;     // empty: <default runtime base>/<instance>
  std::string cores = "auto";  // hwloc list ("3", "2-3,6"), "auto" or "none"
  // mpi: one daemon per node of one job, launched together (mpirun); loopback: one node's
  // jobs only; service: a persistent daemon that forms each multi-node job's group on demand
  // with the other nodes' service daemons, through the rendezvous server named below.
  std::string transport = "mpi";
  // The URI file the rendezvous server (ompi-server -r, nodecomm-rendezvous.service) writes.
  std::string rendezvous = "/run/nodecomm/rendezvous.uri";
  uint64_t default_arena_bytes = 64ULL << 20;
  uint64_t max_arena_bytes = 16ULL << 30;
  uint32_t max_clients = 256;
  // Jobs served at once (each with its own engine, staging and counters); a rank that would
  // start one more is refused with NC_ERR_QUEUE_FULL.
  uint32_t max_jobs = 32;
  // Connections one uid may hold at once (attached, attaching or idle), so that one user's
  // idle or flooding connections cannot use up max_clients for everyone else (the default is
  // half the default max_clients; it binds only where it is below max_clients).
  uint32_t max_clients_per_uid = 128;
  // Deadlines on the control socket (seconds; 0: none): a connection must say hello within
  // hello_timeout_sec, map its segment within map_timeout_sec of the reply, and its job's local
  // ranks must all attach within attach_timeout_sec of the first one's hello.
  double hello_timeout_sec = 10.0;
  double map_timeout_sec = 10.0;
  double attach_timeout_sec = 60.0;
  uint32_t ring_capacity = 256;
  uint64_t staging_cache_bytes = 1ULL << 30;
  // Staging that operations in flight may reserve, all jobs together and one job; 0: no cap.
  // An operation over either fails with NC_ERR_NO_MEMORY (staging.hpp).
  uint64_t max_staging_bytes = 16ULL << 30;
  uint64_t max_staging_per_job_bytes = 16ULL << 30;
  LogLevel log_level = LogLevel::kInfo;
  // Inter-node algorithms; `lanes` (duplicated communicators per node group) is fixed at
  // start, tuning.endpoints may use fewer of them.
  AlgorithmTuning tuning;
  uint32_t lanes = 4;
  // Sleeps between network polls while operations are in flight: first, then doubling to max.
  std::string idle = "auto";  // auto, spin or backoff (ipc::IdleConfig::for_mode)
  uint32_t net_park_min_us = 5;
  uint32_t net_park_max_us = 200;
  // Priorities, fusion and chunking of multi-node operations (schedule.hpp).
  SchedulerTuning sched;
  // Stall reports and operation timeouts (engine.hpp).
  EngineLimits limits;
  // Another node's daemon silent this long is lost (Transport::check_peers); 0: never.
  double peer_timeout_sec = 3.0;
  // A client whose library has not written its heartbeat this long is dropped; 0: never.
  double client_timeout_sec = 3.0;
  // Other uids, and members of these groups (names or gids), may join a job that another uid
  // started; by default a job admits only its first rank's uid.
  std::vector<std::string> allow_uids;
  std::vector<std::string> allow_groups;
  // Jobs' shares of the link (config/job_weights.hpp): `uid:U=W`, `group:G=W`, `*=W`.
  std::vector<std::string> job_weights;
  // Members of this group (name or gid) may change settings at run time (nodecommctl set,
  // trace), besides root and the daemon's own uid. Empty: nobody else.
  std::string admin_group;
  // auto (journal when stderr is the journal's stream, JOURNAL_STREAM), plain or journal
  // (sd-daemon priority prefixes such as <3>).
  std::string log_format = "auto";
  // The configuration file that was read, empty if none; and where the settings came from
  // ("3 from file, 1 from env, 2 from flags"), for the start-up log line.
  std::string config_file;
  std::string origin_summary;
  int settings_from_file_or_env = 0;
};
}  // namespace nodecomm::daemon
