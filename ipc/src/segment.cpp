#include "nodecomm/ipc/segment.hpp"

#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace bip = boost::interprocess;

namespace nodecomm::ipc {

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

void prefault(void* addr, uint64_t bytes) {
  madvise(addr, bytes, MADV_HUGEPAGE);  // best effort: shmem THP is often disabled
  if (madvise(addr, bytes, MADV_POPULATE_WRITE) == 0) return;
  // Older kernels: touch one byte per page. The segment is fresh, so writing zero is harmless.
  const long page = sysconf(_SC_PAGESIZE);
  auto* p = static_cast<volatile uint8_t*>(addr);
  for (uint64_t off = 0; off < bytes; off += static_cast<uint64_t>(page)) p[off] = 0;
}

namespace {
// Preferred (not strict) placement: a full node falls back to others instead of failing.
// A raw syscall keeps libnuma out of the client library, which links ipc too.
void bind_to_node(void* addr, uint64_t bytes, int node) {
  constexpr int kMpolPreferred = 1;
  if (node < 0 || node >= 64) return;
  const unsigned long mask = 1UL << node;
  syscall(SYS_mbind, addr, bytes, kMpolPreferred, &mask, 64UL, 0U);
}
}  // namespace

Segment Segment::create(const std::string& name, const SegmentSpec& spec, uint32_t client_id,
                        uint32_t local_rank, uid_t owner_uid, gid_t owner_gid) {
  if (!proto::is_power_of_two(spec.submit_capacity) ||
      !proto::is_power_of_two(spec.complete_capacity) ||
      spec.complete_capacity < spec.submit_capacity) {
    throw std::runtime_error(
        fmt::format("segment {}: ring capacities {}/{} must be powers of two "
                    "with completion >= submission",
                    name, spec.submit_capacity, spec.complete_capacity));
  }
  const proto::SegmentGeometry g =
      proto::segment_geometry(spec.submit_capacity, spec.complete_capacity, spec.arena_bytes);
  Segment seg;
  try {
    bip::permissions perm(0600);
    bip::shared_memory_object shm(bip::create_only, name.c_str(), bip::read_write, perm);
    const int fd = shm.get_mapping_handle().handle;
    // The umask may have narrowed 0600 further and the daemon may run as root: set both.
    if (fchmod(fd, 0600) != 0 || fchown(fd, owner_uid, owner_gid) != 0) {
      const int err = errno;
      bip::shared_memory_object::remove(name.c_str());
      throw std::runtime_error(fmt::format("segment {}: cannot set owner {} mode 0600: {}", name,
                                           owner_uid, std::strerror(err)));
    }
    shm.truncate(static_cast<bip::offset_t>(g.segment_bytes));
    seg.region_ = bip::mapped_region(shm, bip::read_write);
  } catch (const bip::interprocess_exception& e) {
    bip::shared_memory_object::remove(name.c_str());
    throw std::runtime_error(
        fmt::format("segment {} ({} bytes): {}", name, g.segment_bytes, e.what()));
  }
  if (spec.numa_node >= 0) bind_to_node(seg.base(), g.segment_bytes, spec.numa_node);
  prefault(seg.base(), g.segment_bytes);

  auto& h = seg.header();
  h.magic = proto::kSegmentMagic;
  h.header_bytes = sizeof(proto::SegmentHeader);
  h.segment_bytes = g.segment_bytes;
  h.doorbells_offset = g.doorbells_offset;
  h.submit_ring_offset = g.submit_ring_offset;
  h.complete_ring_offset = g.complete_ring_offset;
  h.arena_offset = g.arena_offset;
  h.arena_bytes = spec.arena_bytes;
  h.submit_capacity = spec.submit_capacity;
  h.complete_capacity = spec.complete_capacity;
  h.client_id = client_id;
  h.local_rank = local_rank;
  seg.layout_ =
      Layout{g.doorbells_offset, g.submit_ring_offset, g.complete_ring_offset, g.arena_offset,
             spec.arena_bytes,   spec.submit_capacity, spec.complete_capacity};
  // release: a client that acquires the version sees every field written above.
  std::atomic_ref<uint32_t>(h.layout_version)
      .store(proto::kLayoutVersion, std::memory_order_release);
  return seg;
}

Segment Segment::open(const std::string& name) {
  Segment seg;
  try {
    bip::shared_memory_object shm(bip::open_only, name.c_str(), bip::read_write);
    seg.region_ = bip::mapped_region(shm, bip::read_write);
  } catch (const bip::interprocess_exception& e) {
    throw std::runtime_error(fmt::format("cannot map segment {}: {}", name, e.what()));
  }
  if (seg.size() < sizeof(proto::SegmentHeader)) {
    throw std::runtime_error(
        fmt::format("segment {} is {} bytes, smaller than its header", name, seg.size()));
  }
  const auto& h = seg.header();
  // acquire: pairs with the creator's release store of the version.
  const uint32_t version =
      std::atomic_ref<const uint32_t>(h.layout_version).load(std::memory_order_acquire);
  if (h.magic != proto::kSegmentMagic || version != proto::kLayoutVersion) {
    throw std::runtime_error(
        fmt::format("segment {}: magic {:#x} layout version {}, expected "
                    "{:#x} version {}",
                    name, h.magic, version, proto::kSegmentMagic, proto::kLayoutVersion));
  }
  const proto::SegmentGeometry g =
      proto::segment_geometry(h.submit_capacity, h.complete_capacity, h.arena_bytes);
  if (!proto::is_power_of_two(h.submit_capacity) || !proto::is_power_of_two(h.complete_capacity) ||
      g.segment_bytes != h.segment_bytes || g.segment_bytes > seg.size() ||
      g.arena_offset != h.arena_offset || g.submit_ring_offset != h.submit_ring_offset ||
      g.complete_ring_offset != h.complete_ring_offset ||
      g.doorbells_offset != h.doorbells_offset) {
    throw std::runtime_error(
        fmt::format("segment {}: header geometry does not match layout "
                    "version {}",
                    name, version));
  }
  seg.layout_ =
      Layout{g.doorbells_offset, g.submit_ring_offset, g.complete_ring_offset, g.arena_offset,
             h.arena_bytes,      h.submit_capacity,    h.complete_capacity};
  prefault(seg.base(), g.segment_bytes);
  return seg;
}

bool Segment::unlink(const std::string& name) {
  return bip::shared_memory_object::remove(name.c_str());
}

}  // namespace nodecomm::ipc
