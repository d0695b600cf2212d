// The counters segment: what nodecommd publishes about itself for nodecommctl and monitoring,
// in the spirit of Aeron's CnC/counters file. One POSIX shared-memory object per instance,
// /dev/shm/nodecomm.<instance>.counters (counters_shm_name), mode 0644, written by the daemon
// alone and mapped read-only by any reader. Reading it never asks the daemon anything, so it
// still answers when the daemon's loop or a trainer is wedged.
//
// Rules (as abi.hpp): fixed-width standard-layout structs, no pointers, no STL, no mutexes.
//  - The header's layout_version is written last with a release store: a reader that sees
//    kCountersLayoutVersion (acquire) sees an initialised segment. Any change to a struct here
//    bumps kCountersLayoutVersion; readers refuse other versions.
//  - Counters and gauges are single-writer uint64 words, stored with relaxed atomics (each is
//    an independent statistic; no reader infers anything about other memory from one).
//  - Sections that must be read as a whole (parameters, jobs, clients, in-flight operations)
//    are rewritten under a seqlock: the writer makes `sequence` odd, rewrites the section,
//    makes it even again; a reader copies the section and retries while the sequence was odd
//    or changed (seqlock_write / seqlock_read below).
//  - The jobs, clients and operations sections of one housekeeping pass carry the same
//    `snapshot` number. Clients and operations name their job by its slot in the jobs
//    section, so a reader that joins them re-reads until the three numbers agree.
// Timestamps are CLOCK_MONOTONIC nanoseconds (comparable across processes on one machine)
// unless a name says realtime (CLOCK_REALTIME, ns since the epoch).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace nodecomm::proto {

inline constexpr uint64_t kCountersMagic = 0x31524e43444f4e4eULL;  // "NNODCNR1" little-endian
// 2: Totals::sched_eager. 3: one daemon serves many jobs, so the one JobSection became a
// jobs table (JobsSection, with each job's owner uid, serial and completed operations), and
// clients and operations name their job (ClientSlot::job, OpSlot::job), TraceEvent::job.
// 4: Totals::comms_retired and late_messages_dropped, in what were reserved words.
inline constexpr uint32_t kCountersLayoutVersion = 4;
inline constexpr uint64_t kTraceMagic = 0x3145435254434e4eULL;  // "NNCTRCE1" little-endian
// 2: TraceEvent::job and the trace's jobs table (TraceJob) between the header and the events.
inline constexpr uint32_t kTraceLayoutVersion = 2;

inline constexpr uint32_t kCounterCollectives = 16;  // >= Collective::kCount
inline constexpr uint32_t kLatencyBuckets = 32;      // log2 microsecond buckets, see below
inline constexpr uint32_t kCounterJobs = 32;         // jobs listed: nodecommd's default --max-jobs
inline constexpr uint32_t kCounterClients = 64;      // client slots listed (more are counted)
inline constexpr uint32_t kCounterOps = 64;          // in-flight operations listed
inline constexpr uint32_t kMissingListed = 16;       // missing ranks / late nodes per operation
inline constexpr uint32_t kCounterParams = 40;       // runtime parameters (key = value text)
inline constexpr size_t kCounterNameBytes = 64;
inline constexpr size_t kCounterPathBytes = 176;
inline constexpr uint32_t kTraceJobs = 32;         // job names a trace records (TraceJob)
inline constexpr uint32_t kNoOwner = 0xffffffffu;  // JobSlot::owner_uid before any rank said hello

// Latency histogram bucket of an operation that took `ns`: bucket 0 holds < 1 us, bucket b
// (1 <= b < 31) holds [2^(b-1), 2^b) us, and bucket 31 everything from 2^30 us (~18 min) up.
constexpr uint32_t latency_bucket(uint64_t ns) {
  uint64_t us = ns / 1000;
  uint32_t b = 0;
  while (us > 0 && b < kLatencyBuckets - 1) {
    us >>= 1;
    ++b;
  }
  return b;
}
// Upper bound (exclusive) of bucket b in microseconds; the last bucket has none (0).
constexpr uint64_t latency_bucket_limit_us(uint32_t b) {
  return b + 1 < kLatencyBuckets ? uint64_t{1} << b : 0;
}

struct CountersHeader {
  uint64_t magic;           // kCountersMagic
  uint32_t layout_version;  // kCountersLayoutVersion, written last (release); 0 while built
  uint32_t header_bytes;
  uint64_t segment_bytes;  // sizeof(CountersSegment)
  uint32_t collectives;    // kCounterCollectives
  uint32_t latency_buckets;
  uint32_t client_slots;
  uint32_t op_slots;
  uint32_t param_slots;
  uint32_t job_slots;  // kCounterJobs
  uint8_t reserved[128 - 48];
};
static_assert(sizeof(CountersHeader) == 128);
static_assert(offsetof(CountersHeader, layout_version) == 8);

// Who publishes: written once before layout_version, never changed afterwards.
struct DaemonInfo {
  uint64_t pid;
  uint64_t uid;
  uint64_t start_realtime_ns;
  uint64_t start_monotonic_ns;
  uint32_t node_index;  // MPI rank of the daemon
  uint32_t node_count;
  uint32_t lanes;  // endpoints opened at start
  uint32_t reserved;
  char instance[kCounterNameBytes];
  char transport[16];
  char version[16];                     // nodecomm version, e.g. "0.1.0"
  char runtime_dir[kCounterPathBytes];  // holds the control socket and the ready file
  char socket_path[kCounterPathBytes];
};
static_assert(sizeof(DaemonInfo) == 48 + kCounterNameBytes + 32 + 2 * kCounterPathBytes);

// Liveness: one cache line the daemon rewrites every housekeeping pass (about every 10 ms,
// at most ~100 ms apart while it sleeps). A heartbeat that stops moving means the loop is
// wedged; a last_progress that stops moving while operations are in flight means it is stuck.
struct alignas(128) Liveness {
  uint64_t heartbeat;               // +1 per housekeeping pass
  uint64_t heartbeat_monotonic_ns;  // when
  uint64_t heartbeat_realtime_ns;
  uint64_t last_progress_monotonic_ns;  // last loop pass that did work (engine or sockets)
  uint64_t last_progress_realtime_ns;
  uint64_t snapshot_monotonic_ns;  // last rewrite of the seqlocked sections
  uint8_t reserved[128 - 48];
};
static_assert(sizeof(Liveness) == 128);

// Daemon-wide counters (monotonic) and gauges (current values).
struct Totals {
  // Counters.
  uint64_t ops_completed;  // every collective, successful or not
  uint64_t ops_failed;
  uint64_t bytes_completed;  // count x dtype size of each successful operation (per rank)
  uint64_t stalls_reported;  // operations that waited longer than stall-sec
  uint64_t op_timeouts;      // operations failed by op-timeout-sec
  uint64_t sched_rounds;     // negotiation rounds started (multi-node communicators)
  uint64_t sched_units;      // scheduled transfers started: chunks, fused packs, whole ops
  uint64_t sched_chunks;     // of which parts of one allreduce
  uint64_t sched_fused;      // of which fused packs of several small allreduces
  uint64_t sched_unit_bytes;
  uint64_t ring_allreduces;  // inter-node allreduces run by the ring algorithm
  uint64_t ring_slices;      // their slices (each moves ~chunk-size bytes per step)
  uint64_t rd_allreduces;    // recursive doubling
  uint64_t clients_accepted;
  uint64_t jobs_formed;
  uint64_t admin_requests;  // set / trace requests over the control socket
  uint64_t admin_refused;   // refused: permission, or an invalid key or value
  uint64_t settings_changed;
  uint64_t trace_events;  // events written to the trace buffer
  // Gauges.
  uint64_t clients;                // connected (admin connections included)
  uint64_t submission_backlog;     // descriptors published by clients, not yet taken
  uint64_t completion_backlog;     // completions waiting for room in clients' rings
  uint64_t ops_in_flight;          // operations submitted by some rank and not yet complete
  uint64_t units_in_flight;        // scheduled transfers on the network
  uint64_t bytes_in_flight;        // their bytes
  uint64_t busbw_last_bps;         // allreduce bus bandwidth over the last interval, bytes/s
  uint64_t busbw_ewma_bps;         // its exponentially weighted moving average (alpha 1/4)
  uint64_t busbw_interval_ns;      // length of that interval
  uint64_t tracing;                // 1 while a trace is being recorded
  uint64_t sched_eager;            // counter: small allreduces completed inside a scheduling round
  uint64_t comms_retired;          // communicators of groups this daemon left, not yet freed
  uint64_t late_messages_dropped;  // counter: messages peers sent into them after it left
};
static_assert(sizeof(Totals) == size_t{32} * 8);

// Per collective (index = Collective value).
struct CollectiveCounters {
  uint64_t ops;
  uint64_t bytes;
  uint64_t errors;
  uint64_t latency_sum_ns;  // first submission to completion, every completed operation
  uint64_t latency_buckets[kLatencyBuckets];  // counts per latency_bucket()
};
static_assert(sizeof(CollectiveCounters) == (size_t{4} + kLatencyBuckets) * 8);

// Seqlocked sections start with their sequence word.
struct ParamEntry {
  char key[32];    // setting name, as `nodecommd --print-config` ("chunk-size")
  char value[88];  // current value as text ("512K", "direct", "auto")
  int64_t number;  // the value as a number where it is one (bytes, us, s), else -1
};
static_assert(sizeof(ParamEntry) == 128);

struct ParamsSection {
  uint64_t sequence;
  uint32_t count;
  uint32_t reserved;
  uint64_t generation;  // +1 per accepted `set`
  uint64_t reserved2;
  ParamEntry entries[kCounterParams];
};
static_assert(sizeof(ParamsSection) == 32 + 128 * kCounterParams);

enum class CountersJobState : uint32_t { kNone = 0, kAttaching, kForming, kRunning, kFailed };

// One job the daemon serves. Its slot index changes as other jobs come and go; `serial` does not.
struct JobSlot {
  uint64_t serial;  // the daemon's number for the job (1, 2, ...; TraceEvent::job)
  char name[kCounterNameBytes];
  uint32_t state;  // CountersJobState
  uint32_t local_size;
  uint32_t attached;
  uint32_t world_size;
  uint32_t world_offset;  // world rank of this node's local rank 0
  uint32_t node_index;
  uint32_t node_count;
  uint32_t communicators;
  uint32_t owner_uid;            // uid of local rank 0's client (until it says hello, the lowest
                                 // local rank's that has; kNoOwner while none has)
  uint32_t ops_in_flight;        // submitted by some local rank, not yet complete
  uint64_t started_realtime_ns;  // its first rank's hello (to within one snapshot, 100 ms)
  uint64_t ops_posted;           // the most any local rank has posted
  uint64_t ops_completed;        // its operations completed here, successful or not
  uint64_t ops_failed;
  uint64_t bytes_completed;  // count x dtype size of each successful operation (per rank)
  char failure[128];
};
static_assert(sizeof(JobSlot) == 8 + kCounterNameBytes + size_t{10} * 4 + size_t{5} * 8 + 128);

struct JobsSection {
  uint64_t sequence;
  uint64_t snapshot;  // the housekeeping pass that wrote it (see the rules above)
  uint32_t count;     // slots filled, oldest job (lowest serial) first
  uint32_t total;     // jobs served (count is at most kCounterJobs)
  JobSlot slots[kCounterJobs];
};
static_assert(sizeof(JobsSection) == 24 + sizeof(JobSlot) * kCounterJobs);

// Values are fixed (nodecommctl reads them); kBacking came later and so comes last.
enum class CountersClientState : uint32_t { kHello = 0, kMapping, kJoined, kClosed, kBacking };

struct ClientSlot {
  uint32_t client_id;
  uint32_t state;  // CountersClientState
  uint32_t local_rank;
  uint32_t world_rank;  // valid once the job formed
  uint32_t pid;
  uint32_t uid;
  uint32_t gid;
  uint32_t job;  // its job's slot in JobsSection + 1; 0: in no job (or in one not listed)
  uint64_t connected_monotonic_ns;
  uint64_t heartbeat_monotonic_ns;  // the client library's own heartbeat word; 0 if it writes none
  uint64_t last_seen_monotonic_ns;  // last time the daemon saw it act (submission taken, connect)
  uint64_t ops_submitted;
  uint64_t ops_completed;
  uint64_t submission_backlog;  // descriptors in its ring not yet taken
  uint64_t completion_backlog;  // completions waiting for room in its ring
};
static_assert(sizeof(ClientSlot) == 88);

struct ClientsSection {
  uint64_t sequence;
  uint64_t snapshot;  // as JobsSection::snapshot
  uint32_t count;     // slots filled
  uint32_t total;     // clients connected (count is at most kCounterClients)
  ClientSlot slots[kCounterClients];
};
static_assert(sizeof(ClientsSection) == 24 + 88 * kCounterClients);

enum class CountersOpPhase : uint8_t { kGathering = 0, kReady, kInterNode, kDone };

struct OpSlot {
  uint64_t seq;
  uint64_t bytes;             // count x dtype size
  uint64_t first_arrival_ns;  // first local submission (monotonic): age = now - this
  uint32_t comm;
  uint16_t collective;  // Collective
  uint8_t dtype;
  uint8_t phase;     // CountersOpPhase
  uint32_t stalled;  // 1 once older than stall-sec
  uint32_t arrived;  // local members that submitted it
  uint32_t local_members;
  uint32_t missing_count;    // local members that have not (all counted, kMissingListed listed)
  uint32_t late_node_count;  // ready here; nodes of the communicator that had not offered it
  uint32_t job;              // its job's slot in JobsSection + 1 (0: a job not listed)
  uint32_t missing_local_ranks[kMissingListed];  // job local ranks
  uint32_t missing_world_ranks[kMissingListed];
  uint32_t late_nodes[kMissingListed];  // node indices within the communicator
  char name[40];                        // tensor name from the descriptor, NUL-terminated
};
static_assert(sizeof(OpSlot) == 56 + 12 * kMissingListed + 40);

struct OpsSection {
  uint64_t sequence;
  uint64_t snapshot;  // as JobsSection::snapshot
  uint32_t count;     // slots filled (oldest first, every job's)
  uint32_t total;     // operations in flight (count is at most kCounterOps)
  OpSlot slots[kCounterOps];
};
static_assert(sizeof(OpsSection) == 24 + sizeof(OpSlot) * kCounterOps);

struct CountersSegment {
  CountersHeader header;
  DaemonInfo daemon;
  Liveness liveness;
  Totals totals;
  CollectiveCounters collectives[kCounterCollectives];
  ParamsSection params;
  JobsSection jobs;
  ClientsSection clients;
  OpsSection ops;
};
static_assert(std::is_standard_layout_v<CountersSegment> &&
              std::is_trivially_copyable_v<CountersSegment>);
static_assert(offsetof(CountersSegment, daemon) == 128);
static_assert(offsetof(CountersSegment, liveness) % 128 == 0);
static_assert(offsetof(CountersSegment, totals) == offsetof(CountersSegment, liveness) + 128);
static_assert(offsetof(CountersSegment, params) % 8 == 0 &&
              offsetof(CountersSegment, jobs) % 8 == 0);
static_assert(offsetof(CountersSegment, clients) % 8 == 0 &&
              offsetof(CountersSegment, ops) % 8 == 0);
static_assert(offsetof(CountersSegment, liveness) == 640);
static_assert(offsetof(CountersSegment, params) == 1024 + 288 * kCounterCollectives);
static_assert(offsetof(CountersSegment, jobs) == 10784);
static_assert(offsetof(CountersSegment, clients) == 19768 &&
              offsetof(CountersSegment, ops) == 25424);
static_assert(sizeof(CountersSegment) == 43904);  // a multiple of 128 (Liveness)

// ---- The trace buffer: /dev/shm/nodecomm.<instance>.trace, mode 0644 -----------------------
// Created by `nodecommctl trace start` (through the daemon), filled while tracing is on,
// read by `nodecommctl trace stop`, which writes the Chrome trace-event JSON. The buffer is
// TraceHeader, TraceJob[kTraceJobs], then the events. Events are appended in completion order;
// `count` is published with a release store after each event, `jobs` after each TraceJob.

enum class TraceKind : uint8_t { kOperation = 0, kChunk, kFused, kWhole };

struct TraceEvent {
  uint64_t begin_ns;  // monotonic: operation's first submission, or unit's start
  uint64_t end_ns;    // completion
  uint64_t seq;       // the operation (a fused pack: its first operation)
  uint64_t bytes;
  uint64_t first;  // kChunk: first element of the range
  uint32_t comm;
  uint16_t collective;
  uint8_t kind;    // TraceKind
  uint8_t status;  // Status of an operation (0 ok)
  uint32_t ops;    // operations the unit carries
  uint32_t job;    // the job's serial (JobSlot::serial, TraceJob), its low 32 bits
  char name[40];
};
static_assert(sizeof(TraceEvent) == 96);

// The jobs a trace saw, in the order it first saw them: what TraceEvent::job means after the
// job has gone. A job beyond kTraceJobs is counted in TraceHeader::jobs_dropped, unnamed.
struct TraceJob {
  uint64_t serial;
  char name[kCounterNameBytes];
};
static_assert(sizeof(TraceJob) == 72);

struct TraceHeader {
  uint64_t magic;           // kTraceMagic
  uint32_t layout_version;  // written last (release)
  uint32_t state;           // 1 recording, 2 stopped
  uint64_t capacity;        // events
  uint64_t count;           // events written (release after each)
  uint64_t dropped;         // events lost because the buffer was full
  uint64_t start_monotonic_ns;
  uint64_t start_realtime_ns;
  uint64_t stop_monotonic_ns;
  uint32_t node_index;
  uint32_t pid;
  char instance[kCounterNameBytes];
  uint32_t jobs;          // TraceJob entries written (release after each)
  uint32_t jobs_dropped;  // jobs seen once the table was full
  uint8_t reserved[256 - 80 - kCounterNameBytes];
};
static_assert(sizeof(TraceHeader) == 256);

// ---- Access helpers -----------------------------------------------------------------------

// Single-writer counter update: relaxed, because each counter is an independent statistic
// and readers only need to see some recent value of it.
inline void counter_store(uint64_t& word, uint64_t value) {
  std::atomic_ref<uint64_t>(word).store(value, std::memory_order_relaxed);
}
inline void counter_add(uint64_t& word, uint64_t n) {
  // relaxed: single writer, so load + store cannot lose an update; see counter_store.
  std::atomic_ref<uint64_t> ref(word);
  ref.store(ref.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}
inline uint64_t counter_load(const uint64_t& word) {
  // relaxed: an independent statistic (see counter_store); const_cast because atomic_ref<const
  // T> is C++26, and a relaxed load writes nothing.
  return std::atomic_ref<uint64_t>(const_cast<uint64_t&>(word)).load(std::memory_order_relaxed);
}

namespace detail {
// Word-wise copies through relaxed atomics, so that a reader racing with the writer reads torn
// data (which the sequence check discards) instead of having a C++ data race.
inline void store_words(void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<uint64_t*>(dst);
  const auto* s = static_cast<const uint64_t*>(src);
  for (size_t i = 0; i < bytes / 8; ++i) {
    std::atomic_ref<uint64_t>(d[i]).store(s[i], std::memory_order_relaxed);
  }
}
inline void load_words(void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<uint64_t*>(dst);
  auto* s = static_cast<uint64_t*>(const_cast<void*>(src));
  for (size_t i = 0; i < bytes / 8; ++i) {
    d[i] = std::atomic_ref<uint64_t>(s[i]).load(std::memory_order_relaxed);
  }
}
}  // namespace detail

// Rewrites a seqlocked section (T starts with uint64_t sequence). Single writer.
template <class T>
void seqlock_write(T& shared, const T& value) {
  static_assert(sizeof(T) % 8 == 0 && offsetof(T, sequence) == 0);
  const uint64_t seq = counter_load(shared.sequence);
  // relaxed store + release fence: the odd sequence is visible before any of the new data.
  std::atomic_ref<uint64_t>(shared.sequence).store(seq + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  detail::store_words(reinterpret_cast<uint8_t*>(&shared) + 8,
                      reinterpret_cast<const uint8_t*>(&value) + 8, sizeof(T) - 8);
  // release: the data is visible before the even sequence that says it is complete.
  std::atomic_ref<uint64_t>(shared.sequence).store(seq + 2, std::memory_order_release);
}

// Copies a consistent snapshot of a seqlocked section into `out`; false if the writer kept
// it busy for `tries` attempts (or died in the middle of a rewrite).
template <class T>
bool seqlock_read(const T& shared, T& out, int tries = 10000) {
  static_assert(sizeof(T) % 8 == 0 && offsetof(T, sequence) == 0);
  auto& seq = const_cast<uint64_t&>(shared.sequence);
  for (int i = 0; i < tries; ++i) {
    // acquire: the data read below is at least as new as this sequence.
    const uint64_t before = std::atomic_ref<uint64_t>(seq).load(std::memory_order_acquire);
    if ((before & 1) != 0) continue;
    detail::load_words(reinterpret_cast<uint8_t*>(&out) + 8,
                       reinterpret_cast<const uint8_t*>(&shared) + 8, sizeof(T) - 8);
    // acquire fence: the data loads above complete before the sequence is read again.
    std::atomic_thread_fence(std::memory_order_acquire);
    const uint64_t after = std::atomic_ref<uint64_t>(seq).load(std::memory_order_relaxed);
    if (before == after) {
      out.sequence = before;
      return true;
    }
  }
  return false;
}

}  // namespace nodecomm::proto
