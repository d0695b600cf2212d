// A client's shared-memory segment: created by the daemon, mapped by the client, and
// unlinked as soon as the client has mapped it so that a crash leaves nothing in /dev/shm.
#pragma once

#include <sys/types.h>

#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cstdint>
#include <string>

#include "nodecomm/proto/abi.hpp"

namespace nodecomm::ipc {

struct SegmentSpec {
  uint32_t submit_capacity = 256;
  uint32_t complete_capacity = 256;
  uint64_t arena_bytes = 64ULL << 20;
  int numa_node = -1;  // >= 0: place the pages on this NUMA node (the daemon's)
};

class Segment {
 public:
  Segment() = default;
  Segment(Segment&&) noexcept = default;
  Segment& operator=(Segment&&) noexcept = default;

  // Daemon side: creates the named segment with mode 0600 owned by `owner_uid`, lays out the
  // header, rings and doorbells, pre-faults the whole mapping and publishes the layout
  // version last. Throws std::runtime_error with the name and the reason on failure.
  static Segment create(const std::string& name, const SegmentSpec& spec, uint32_t client_id,
                        uint32_t local_rank, uid_t owner_uid, gid_t owner_gid);
  // Client side: maps an existing segment and checks magic, version and geometry.
  static Segment open(const std::string& name);
  static bool unlink(const std::string& name);

  void* base() const { return region_.get_address(); }
  uint64_t size() const { return region_.get_size(); }
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
  boost::interprocess::mapped_region region_;
  Layout layout_;
};

// Populates page tables for [addr, addr+bytes) so the first real use does not pay the
// first-touch cost, and asks for transparent huge pages where the kernel allows them.
void prefault(void* addr, uint64_t bytes);

}  // namespace nodecomm::ipc
