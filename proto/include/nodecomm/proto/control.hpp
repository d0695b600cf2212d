// Messages on the daemon's Unix control socket (SOCK_SEQPACKET: one struct per message).
// The socket carries only set-up, wake-ups and liveness; operations go through the rings.
// Every message starts with its type; a receiver checks type and exact size before use.
#pragma once

#include <cstdint>
#include <type_traits>

#include "nodecomm/proto/abi.hpp"

namespace nodecomm::proto {

inline constexpr uint32_t kControlMagic = 0x4e43544cu;  // "NCTL"
inline constexpr size_t kJobNameBytes = 64;
inline constexpr size_t kControlMessageBytes = 256;
inline constexpr uint32_t kLocalSizeLimit = 1024;
inline constexpr uint32_t kMaxJobNodes = 65536;  // Hello::node_count
inline constexpr uint32_t kMaxJobWeight = 1000;  // JobTuning::weight

enum class ControlType : uint32_t {
  kHello = 1,           // client → daemon: who I am, what I need
  kHelloReply = 2,      // daemon → client, with the segment's memfd (SCM_RIGHTS), or why not
  kMapped = 3,          // client → daemon: segment mapped (the acknowledgement)
  kJobReady = 4,        // daemon → client: world placement, or why the job could not form
  kWake = 5,            // client → daemon: work was submitted while the daemon was parked
  kBye = 6,             // client → daemon: orderly finalize
  kAdminRequest = 7,    // nodecommctl → daemon: change a setting, start or stop a trace
  kAdminReply = 8,      // daemon → nodecommctl: done, or why not
  kRegister = 9,        // client → daemon, with one fd (SCM_RIGHTS): map it as a region
  kRegisterReply = 10,  // daemon → client: the region's index, or why not
};

// Scheduling parameters a job may set for itself (from its ranks' NODECOMM_* environment);
// a negative value (or kTuningDefault) keeps the daemon's setting. Node 0's values win: the
// daemons of a job negotiate with what node 0's ranks asked for.
inline constexpr int64_t kTuningDefault = -1;
struct JobTuning {
  int32_t priority_policy;         // PriorityPolicy, or -1
  int32_t fusion;                  // 0 off, 1 on, or -1
  int64_t fusion_threshold_bytes;  // or -1
  int64_t fusion_cycle_us;         // or -1
  // The job's share of each node's link against other jobs' (NODECOMM_JOB_WEIGHT), or -1; the
  // daemon caps it by its configuration (--job-weights).
  int32_t weight;
  int32_t reserved;
};
static_assert(sizeof(JobTuning) == 32 && std::is_trivially_copyable_v<JobTuning>);

struct Hello {
  uint32_t type;            // kHello
  uint32_t magic;           // kControlMagic
  uint32_t layout_version;  // kLayoutVersion the client was built with
  uint32_t local_rank;
  uint32_t local_size;
  // The job's node this rank runs on and the job's node count (NODECOMM_NODE, NODECOMM_NODES):
  // how a service daemon knows which daemons form the job. node_count 0: not given (a one-node
  // job, or daemons launched together for the job, which know their nodes).
  uint32_t node_index;
  uint32_t node_count;
  uint32_t reserved;
  uint64_t arena_bytes;     // requested; the daemon may refuse more than its limit
  char job[kJobNameBytes];  // NUL-terminated
  JobTuning tuning;         // the job's overrides of the daemon's scheduling parameters
};
static_assert(sizeof(Hello) == 104 + sizeof(JobTuning) && std::is_trivially_copyable_v<Hello>);

// On kOk the segment comes as one descriptor attached to this message (SCM_RIGHTS): a memfd
// sealed against shrinking and growing (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) and exactly
// segment_bytes long. It has no name: nothing in /dev/shm, nothing another process can open.
struct HelloReply {
  uint32_t type;  // kHelloReply
  int32_t status;
  uint64_t segment_bytes;
  char message[kControlMessageBytes];
};
static_assert(sizeof(HelloReply) == 16 + kControlMessageBytes &&
              std::is_trivially_copyable_v<HelloReply>);

struct Mapped {
  uint32_t type;  // kMapped
  uint32_t reserved;
};

struct JobReady {
  uint32_t type;  // kJobReady
  int32_t status;
  uint32_t world_rank;
  uint32_t world_size;
  uint32_t node_index;
  uint32_t node_count;
  uint32_t local_rank;
  uint32_t local_size;
  char message[kControlMessageBytes];
};
static_assert(sizeof(JobReady) == 32 + kControlMessageBytes);

struct Wake {
  uint32_t type;  // kWake
  uint32_t reserved;
};

struct Bye {
  uint32_t type;  // kBye
  uint32_t reserved;
};

// Registers `bytes` of the passed file from `file_offset` (page-aligned) as the client's next
// region. The file must be a regular file or memfd the daemon can map read-write.
struct Register {
  uint32_t type;  // kRegister
  uint32_t reserved;
  uint64_t file_offset;
  uint64_t bytes;
};
static_assert(sizeof(Register) == 24 && std::is_trivially_copyable_v<Register>);

struct RegisterReply {
  uint32_t type;  // kRegisterReply
  int32_t status;
  uint32_t region;  // on kOk: descriptors address it with region_offset(region, x)
  uint32_t reserved;
  char message[kControlMessageBytes];
};
static_assert(sizeof(RegisterReply) == 16 + kControlMessageBytes &&
              std::is_trivially_copyable_v<RegisterReply>);

// Administration (nodecommctl set / trace). Allowed for root, the daemon's uid and the
// admin-group, as SO_PEERCRED tells the daemon; anyone else gets kPermission.
inline constexpr uint32_t kAdminProtocolVersion = 1;
inline constexpr size_t kAdminKeyBytes = 48;
inline constexpr size_t kAdminValueBytes = 200;
enum class AdminVerb : uint32_t {
  kSet = 1,         // key = setting name, value = new value as on the command line
  kTraceStart = 2,  // value = buffer capacity in events ("" for the default)
  kTraceStop = 3,
};

struct AdminRequest {
  uint32_t type;                 // kAdminRequest
  uint32_t magic;                // kControlMagic
  uint32_t version;              // kAdminProtocolVersion
  uint32_t verb;                 // AdminVerb
  char key[kAdminKeyBytes];      // NUL-terminated
  char value[kAdminValueBytes];  // NUL-terminated
};
static_assert(sizeof(AdminRequest) == 16 + kAdminKeyBytes + kAdminValueBytes &&
              std::is_trivially_copyable_v<AdminRequest>);

struct AdminReply {
  uint32_t type;   // kAdminReply
  int32_t status;  // Status: kOk, kPermission, kInvalidArgument, kProtocol, ...
  uint32_t verb;   // echoed
  uint32_t reserved;
  char message[kControlMessageBytes];  // what was done, or why not; NUL-terminated
};
static_assert(sizeof(AdminReply) == 16 + kControlMessageBytes &&
              std::is_trivially_copyable_v<AdminReply>);

// The largest message either side sends (JobReady): receive buffers are this big.
inline constexpr size_t kMaxControlMessageBytes = sizeof(JobReady);
static_assert(sizeof(AdminRequest) <= kMaxControlMessageBytes &&
              sizeof(RegisterReply) <= kMaxControlMessageBytes &&
              sizeof(HelloReply) <= kMaxControlMessageBytes);
static_assert(sizeof(JobReady) <= kMaxControlMessageBytes &&
              sizeof(Hello) <= kMaxControlMessageBytes &&
              sizeof(AdminReply) <= kMaxControlMessageBytes);

}  // namespace nodecomm::proto
