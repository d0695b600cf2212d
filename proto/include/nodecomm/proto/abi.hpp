// The shared-memory ABI between nodecommd and libnodecomm.
//
// Everything a client and the daemon both read lives here and only here. Rules:
//  - fixed-width, standard-layout, trivially copyable structs; no pointers, no STL, no
//    process-shared mutexes (a process that dies holding one wedges the node);
//  - positions are monotonic uint64 counters with exactly one writer each, on their own
//    128-byte line (two 64-byte lines, because adjacent-line prefetch shares pairs);
//  - buffers are named by offsets into the client's arena or a region it registered (see
//    region_offset), never by address;
//  - the header's layout_version is written last with release semantics: a reader that
//    sees the expected version (acquire) sees a fully initialised segment.
// Changing any struct here means bumping kLayoutVersion.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "nodecomm/proto/types.hpp"

namespace nodecomm::proto {

inline constexpr uint64_t kSegmentMagic = 0x314d4d4f43444f4eULL;  // "NODCOMM1" little-endian
// 6: the segment is a sealed memfd passed with the hello reply, no longer a /dev/shm name.
// 7: the hello carries the job's node index and node count (the service forms groups from them).
inline constexpr uint32_t kLayoutVersion = 7;
inline constexpr size_t kLineBytes = 128;
inline constexpr size_t kTensorNameBytes = 40;
// Room for a mismatch report that lists every local rank's submission, or a failure that
// nests the operation, the culprit and its operation before the reason.
inline constexpr size_t kCompletionMessageBytes = 976;

// One single-writer monotonic position alone on its line.
struct alignas(kLineBytes) PaddedPosition {
  uint64_t value;
  uint8_t pad[kLineBytes - sizeof(uint64_t)];
};
static_assert(sizeof(PaddedPosition) == kLineBytes);

// Control block of a single-producer single-consumer ring. `tail` is written only by the
// producer, `head` only by the consumer. Entries follow at RingHeader's offset + sizeof.
struct RingHeader {
  PaddedPosition tail;  // next slot the producer will write; producer-owned
  PaddedPosition head;  // next slot the consumer will read; consumer-owned
};
static_assert(sizeof(RingHeader) == 2 * kLineBytes);
static_assert(offsetof(RingHeader, head) == kLineBytes);

// Registered regions: memory of the client's own (a memfd or /dev/shm file it passed over the
// control socket, ControlType::kRegister) that the daemon maps next to the arena. Descriptor
// offsets below 2^kRegionShift name the arena; (r + 1) << kRegionShift | x names byte x of
// region r. Arenas are far smaller than 2^40 bytes (--max-arena), so the two never meet.
inline constexpr unsigned kRegionShift = 40;
inline constexpr uint32_t kMaxRegions = 64;
inline constexpr uint64_t kRegionOffsetMask = (uint64_t{1} << kRegionShift) - 1;
constexpr uint64_t region_offset(uint32_t region, uint64_t within) {
  return (uint64_t{region} + 1) << kRegionShift | within;
}
// The region an offset names, or -1 for the arena.
constexpr int64_t region_of(uint64_t offset) {
  return static_cast<int64_t>(offset >> kRegionShift) - 1;
}
static_assert(region_offset(0, 5) >> kRegionShift == 1 && region_of(region_offset(63, 0)) == 63);
static_assert(region_of(kRegionOffsetMask) == -1);

// Flags of an OpDescriptor.
inline constexpr uint32_t kOpFlagInPlace = 1u << 0;  // send buffer is the receive buffer

// Color of a rank that opts out of a split (MPI_UNDEFINED).
inline constexpr int32_t kUndefinedColor = -32766;
inline constexpr uint32_t kNoComm = 0xffffffffu;

// A client's request for one collective. For Collective::kCommSplit, `root` carries the color
// (an int32 bit pattern; kUndefinedColor opts out) and `count` the key (an int64 bit
// pattern); no buffers are used. For kAllgatherv the arena at aux_offset holds uint64
// recv_counts[size] then displs[size] (count is this rank's send count); for kAlltoallv it
// holds send_counts, send_displs, recv_counts, recv_displs (size each). The daemon copies
// it out of shared memory
// before looking at any field and validates every field (see ipc/validate.hpp).
struct OpDescriptor {
  uint64_t correlation_id;      // client-chosen, echoed in the completion
  uint64_t seq;                 // per-communicator sequence number, 1, 2, 3, ...
  uint64_t count;               // elements
  uint64_t send_offset;         // arena offset of the send buffer
  uint64_t recv_offset;         // arena offset of the receive buffer
  uint32_t comm_id;             // 0 is the world communicator
  uint32_t root;                // rank within comm, for rooted collectives
  int32_t priority;             // higher runs first under the `direct` policy; 0 by default
  uint16_t collective;          // Collective
  uint8_t dtype;                // DType
  uint8_t redop;                // RedOp
  uint32_t flags;               // kOpFlag*
  uint8_t compression;          // Compression on the wire between nodes (allreduce only)
  uint8_t reserved[3];          // must be 0
  uint64_t aux_offset;          // allgatherv/alltoallv: arena offset of their uint64 count arrays
  char name[kTensorNameBytes];  // diagnostics only, NUL-padded, need not be terminated
};
static_assert(std::is_standard_layout_v<OpDescriptor> &&
              std::is_trivially_copyable_v<OpDescriptor>);
static_assert(sizeof(OpDescriptor) == 112);
static_assert(offsetof(OpDescriptor, comm_id) == 40);
static_assert(offsetof(OpDescriptor, collective) == 52);
static_assert(offsetof(OpDescriptor, aux_offset) == 64);
static_assert(offsetof(OpDescriptor, compression) == 60);
static_assert(offsetof(OpDescriptor, name) == 72);

// The daemon's answer to one OpDescriptor.
struct Completion {
  uint64_t correlation_id;
  uint64_t seq;
  int32_t status;  // Status
  uint32_t comm_id;
  uint64_t elapsed_ns;   // from the last local submission to delivery, for diagnostics
  uint32_t new_comm_id;  // kCommSplit: the new communicator, or kNoComm for opted-out ranks
  uint32_t new_comm_rank;
  uint32_t new_comm_size;
  uint32_t reserved;
  // NUL-terminated error text when status != 0. A success is published without it (see
  // completion_bytes), so then the slot holds whatever an earlier completion left here.
  char message[kCompletionMessageBytes];
};
static_assert(std::is_standard_layout_v<Completion> && std::is_trivially_copyable_v<Completion>);
static_assert(sizeof(Completion) == 1024);

// The bytes of `c` that the daemon writes into a completion slot and the client reads: the
// fields, plus the message through its NUL for an error. A success is one cache line, not
// sixteen, on the round trip's path.
inline size_t completion_bytes(const Completion& c) {
  if (c.status == 0) return offsetof(Completion, message);
  size_t n = 0;
  while (n + 1 < kCompletionMessageBytes && c.message[n] != '\0') ++n;
  return offsetof(Completion, message) + n + 1;
}
static_assert(offsetof(Completion, new_comm_id) == 32);
static_assert(offsetof(Completion, message) == 48);

// Wake-up words. Futex words are 32-bit; each group sits on the line of its writer.
struct Doorbells {
  // Daemon → client: bumped after the daemon publishes completions; the client futex-waits on
  // it. client_waiting tells the daemon a FUTEX_WAKE is worth a syscall.
  alignas(kLineBytes) uint32_t completion_futex;
  uint32_t daemon_parked;        // daemon sets before it sleeps; client swaps to 0 and sends a wake
  uint64_t daemon_heartbeat_ns;  // CLOCK_MONOTONIC, written by the daemon
  alignas(kLineBytes) uint32_t client_waiting;
  uint32_t client_reserved;
  uint64_t client_heartbeat_ns;  // CLOCK_MONOTONIC, written by the client
};
static_assert(sizeof(Doorbells) == 2 * kLineBytes);
static_assert(offsetof(Doorbells, client_waiting) == kLineBytes);

// Offsets and sizes of each section. Written by the daemon before layout_version.
struct SegmentHeader {
  uint64_t magic;
  uint32_t layout_version;  // written last (release); 0 while the segment is being built
  uint32_t header_bytes;
  uint64_t segment_bytes;
  uint64_t doorbells_offset;
  uint64_t submit_ring_offset;    // RingHeader, then submit_capacity OpDescriptors
  uint64_t complete_ring_offset;  // RingHeader, then complete_capacity Completions
  uint64_t arena_offset;
  uint64_t arena_bytes;
  uint32_t submit_capacity;    // power of two
  uint32_t complete_capacity;  // power of two, >= submit_capacity
  uint32_t client_id;
  uint32_t local_rank;
  uint8_t reserved[kLineBytes - 80];
};
static_assert(std::is_standard_layout_v<SegmentHeader>);
static_assert(sizeof(SegmentHeader) == kLineBytes);
static_assert(offsetof(SegmentHeader, layout_version) == 8);
static_assert(offsetof(SegmentHeader, arena_offset) == 48);

inline constexpr uint64_t kArenaAlignment = 4096;

// Where each section goes for given capacities and arena size. Both sides call this:
// the daemon to build a segment, the client to check that the header it maps agrees.
struct SegmentGeometry {
  uint64_t doorbells_offset;
  uint64_t submit_ring_offset;
  uint64_t complete_ring_offset;
  uint64_t arena_offset;
  uint64_t segment_bytes;
};

constexpr uint64_t align_up(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

constexpr bool is_power_of_two(uint64_t v) {
  return v != 0 && (v & (v - 1)) == 0;
}

constexpr SegmentGeometry segment_geometry(uint32_t submit_capacity, uint32_t complete_capacity,
                                           uint64_t arena_bytes) {
  SegmentGeometry g{};
  g.doorbells_offset = align_up(sizeof(SegmentHeader), kLineBytes);
  g.submit_ring_offset = align_up(g.doorbells_offset + sizeof(Doorbells), kLineBytes);
  g.complete_ring_offset = align_up(
      g.submit_ring_offset + sizeof(RingHeader) + uint64_t{submit_capacity} * sizeof(OpDescriptor),
      kLineBytes);
  g.arena_offset = align_up(g.complete_ring_offset + sizeof(RingHeader) +
                                uint64_t{complete_capacity} * sizeof(Completion),
                            kArenaAlignment);
  g.segment_bytes = align_up(g.arena_offset + arena_bytes, kArenaAlignment);
  return g;
}

}  // namespace nodecomm::proto
