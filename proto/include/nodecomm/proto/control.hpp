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
inline constexpr size_t kSegmentNameBytes = 64;
inline constexpr size_t kControlMessageBytes = 256;
inline constexpr uint32_t kLocalSizeLimit = 1024;

enum class ControlType : uint32_t {
  kHello = 1,       // client → daemon: who I am, what I need
  kHelloReply = 2,  // daemon → client: segment name, or why not
  kMapped = 3,      // client → daemon: segment mapped; the daemon may unlink its name
  kJobReady = 4,    // daemon → client: world placement, or why the job could not form
  kWake = 5,        // client → daemon: work was submitted while the daemon was parked
  kBye = 6,         // client → daemon: orderly finalize
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
};
static_assert(sizeof(JobTuning) == 24 && std::is_trivially_copyable_v<JobTuning>);

struct Hello {
  uint32_t type;            // kHello
  uint32_t magic;           // kControlMagic
  uint32_t layout_version;  // kLayoutVersion the client was built with
  uint32_t local_rank;
  uint32_t local_size;
  uint32_t reserved;
  uint64_t arena_bytes;     // requested; the daemon may refuse more than its limit
  char job[kJobNameBytes];  // NUL-terminated
  JobTuning tuning;         // the job's overrides of the daemon's scheduling parameters
};
static_assert(sizeof(Hello) == 96 + sizeof(JobTuning) && std::is_trivially_copyable_v<Hello>);

struct HelloReply {
  uint32_t type;  // kHelloReply
  int32_t status;
  uint64_t segment_bytes;
  char segment_name[kSegmentNameBytes];  // shm name, NUL-terminated
  char message[kControlMessageBytes];
};
static_assert(sizeof(HelloReply) == 16 + kSegmentNameBytes + kControlMessageBytes);

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

inline constexpr size_t kMaxControlMessageBytes = sizeof(HelloReply);
static_assert(sizeof(JobReady) <= kMaxControlMessageBytes &&
              sizeof(Hello) <= kMaxControlMessageBytes);

}  // namespace nodecomm::proto
