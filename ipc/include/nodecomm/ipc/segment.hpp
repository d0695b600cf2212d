// A client's shared-memory segment: an anonymous memfd the daemon creates, backs with real
// pages (fallocate), seals against resizing and hands to the client over the control socket
// (SCM_RIGHTS). It has no name anywhere, so nobody else can open it, and neither side can
// shrink or grow it: the daemon can touch every byte of it at any time without a SIGBUS.
#pragma once

#include <fcntl.h>
#include <sys/types.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "nodecomm/ipc/socket.hpp"
#include "nodecomm/proto/abi.hpp"

namespace nodecomm::ipc {

struct SegmentSpec {
  uint32_t submit_capacity = 256;
  uint32_t complete_capacity = 256;
  uint64_t arena_bytes = 64ULL << 20;
  int numa_node = -1;  // >= 0: place the pages on this NUMA node (the daemon's)
};

// The seals every segment carries: no shrinking (the SIGBUS attack), no growing, no change.
inline constexpr int kSegmentSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

// Why Segment::create failed. `no_memory` is set when the memory could not be backed
// (ENOMEM/ENOSPC from fallocate, or a mapping that did not fit): a refusal for that client,
// not a fault of the daemon.
class SegmentError : public std::runtime_error {
 public:
  SegmentError(const std::string& what, bool no_memory)
      : std::runtime_error(what), no_memory_(no_memory) {}
  bool no_memory() const { return no_memory_; }

 private:
  bool no_memory_;
};

class Segment {
 public:
  Segment() = default;
  Segment(Segment&& o) noexcept { *this = std::move(o); }
  Segment& operator=(Segment&& o) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment();

  // Daemon side, in three steps so that a large segment never stalls the daemon's loop for
  // long (a peer declares a daemon lost after --peer-timeout-sec):
  //  reserve: creates a memfd, sizes it, maps it and places it on the NUMA node; no pages yet,
  //           and nothing may touch the mapping until back() has returned true;
  //  back:    backs up to `max_bytes` more with fallocate (never a touching loop: a page that
  //           cannot be had is an error return, not a SIGBUS or an OOM kill of the daemon)
  //           and populates them; true once every page is there;
  //  finish:  seals it (kSegmentSeals), lays out the header, rings and doorbells, and
  //           publishes the layout version last.
  // The descriptor stays open (fd()) until the daemon has passed it to the client. Each step
  // throws SegmentError naming the bytes and the reason.
  static Segment reserve(const SegmentSpec& spec, uint32_t local_rank);
  bool back(uint64_t max_bytes);
  void finish(uint32_t client_id);
  // Bytes back() has not backed yet (what this segment will still take from memory).
  uint64_t unbacked_bytes() const { return size_ - backed_; }
  // All three at once (tests, fuzzers).
  static Segment create(const SegmentSpec& spec, uint32_t client_id, uint32_t local_rank);
  // Client side: maps the descriptor the daemon passed, after checking that it is shared memory
  // (tmpfs or hugetlbfs) carrying kSegmentSeals and exactly `expected_bytes` long (what the
  // hello reply announced); then checks magic, version and geometry. The caller keeps `fd`
  // (close it once mapped). Throws std::runtime_error with the reason.
  static Segment open(int fd, uint64_t expected_bytes);

  // The memfd, from create until close_fd(); -1 after, and always on the client side.
  int fd() const { return fd_.get(); }
  void close_fd() { fd_.reset(); }

  void* base() const { return base_; }
  uint64_t size() const { return size_; }
  // The shared header: only for writing it at creation and for diagnostics. Everything
  // below uses the geometry copied into private memory at create/open time, because the
  // client can rewrite the shared header at any moment.
  proto::SegmentHeader& header() const { return *static_cast<proto::SegmentHeader*>(base()); }
  proto::Doorbells& doorbells() const { return *at<proto::Doorbells>(layout_.doorbells_offset); }
  proto::RingHeader& submit_ring() const {
    return *at<proto::RingHeader>(layout_.submit_ring_offset);
  }
  proto::OpDescriptor* submit_slots() const {
    return at<proto::OpDescriptor>(layout_.submit_ring_offset + sizeof(proto::RingHeader));
  }
  proto::RingHeader& complete_ring() const {
    return *at<proto::RingHeader>(layout_.complete_ring_offset);
  }
  proto::Completion* complete_slots() const {
    return at<proto::Completion>(layout_.complete_ring_offset + sizeof(proto::RingHeader));
  }
  uint8_t* arena() const { return at<uint8_t>(layout_.arena_offset); }
  uint64_t arena_bytes() const { return layout_.arena_bytes; }
  uint32_t submit_capacity() const { return layout_.submit_capacity; }
  uint32_t complete_capacity() const { return layout_.complete_capacity; }

 private:
  template <class T>
  T* at(uint64_t offset) const {
    return reinterpret_cast<T*>(static_cast<uint8_t*>(base()) + offset);
  }
  // Private copy of the validated geometry.
  struct Layout {
    uint64_t doorbells_offset = 0;
    uint64_t submit_ring_offset = 0;
    uint64_t complete_ring_offset = 0;
    uint64_t arena_offset = 0;
    uint64_t arena_bytes = 0;
    uint32_t submit_capacity = 0;
    uint32_t complete_capacity = 0;
  };
  SegmentError failure(const char* step, int err, bool no_memory) const;

  void* base_ = nullptr;
  uint64_t size_ = 0;
  Fd fd_;
  Layout layout_;
  uint64_t backed_ = 0;  // bytes fallocate has backed, from the start
  uint32_t local_rank_ = 0;
};

// Populates page tables for [addr, addr+bytes) so the first real use does not pay the
// first-touch cost, and asks for transparent huge pages where the kernel allows them. Only
// MADV_POPULATE_WRITE, which fails cleanly; never a loop that touches pages (on memory that
// cannot be backed, that raises SIGBUS or wakes the OOM killer). Returns whether it populated.
bool prefault(void* addr, uint64_t bytes);

}  // namespace nodecomm::ipc
