#include "nodecomm/ipc/segment.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace nodecomm::ipc {

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

bool prefault(void* addr, uint64_t bytes) {
  madvise(addr, bytes, MADV_HUGEPAGE);  // best effort: shmem THP is often disabled
  // Older kernels (before 5.14) lack it: the first real use then pays the first touch.
  return madvise(addr, bytes, MADV_POPULATE_WRITE) == 0;
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

// What an errno from backing the segment means to the operator.
const char* backing_reason(int err) {
  switch (err) {
    case ENOMEM:
      return "nodecommd's memory cgroup limit or the node's memory is exhausted";
    case ENOSPC:
      return "the shared-memory filesystem has no space left";
    case EINTR:
      return "interrupted by a signal";
    default:
      return "the kernel refused the memory";
  }
}
}  // namespace

Segment& Segment::operator=(Segment&& o) noexcept {
  if (this != &o) {
    if (base_ != nullptr) munmap(base_, size_);
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
    fd_ = std::move(o.fd_);
    layout_ = o.layout_;
    backed_ = o.backed_;
    local_rank_ = o.local_rank_;
  }
  return *this;
}

Segment::~Segment() {
  if (base_ != nullptr) munmap(base_, size_);
}

SegmentError Segment::failure(const char* step, int err, bool no_memory) const {
  return SegmentError(
      fmt::format("cannot create a segment of {} bytes ({}-byte arena) for local rank {}: {}: "
                  "{}{}{}",
                  size_, layout_.arena_bytes, local_rank_, step, std::strerror(err),
                  no_memory ? "; " : "", no_memory ? backing_reason(err) : ""),
      no_memory);
}

Segment Segment::reserve(const SegmentSpec& spec, uint32_t local_rank) {
  if (!proto::is_power_of_two(spec.submit_capacity) ||
      !proto::is_power_of_two(spec.complete_capacity) ||
      spec.complete_capacity < spec.submit_capacity) {
    throw SegmentError(fmt::format("segment for local rank {}: ring capacities {}/{} must be "
                                   "powers of two with completion >= submission",
                                   local_rank, spec.submit_capacity, spec.complete_capacity),
                       false);
  }
  const proto::SegmentGeometry g =
      proto::segment_geometry(spec.submit_capacity, spec.complete_capacity, spec.arena_bytes);
  Segment seg;
  seg.size_ = g.segment_bytes;
  seg.local_rank_ = local_rank;
  seg.layout_ =
      Layout{g.doorbells_offset, g.submit_ring_offset, g.complete_ring_offset, g.arena_offset,
             spec.arena_bytes,   spec.submit_capacity, spec.complete_capacity};
  // MFD_CLOEXEC: no child of the daemon inherits it. MFD_ALLOW_SEALING: the seals in finish().
  seg.fd_ = Fd(::memfd_create("nodecomm-segment", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!seg.fd_.valid()) {
    throw seg.failure("memfd_create", errno, errno == ENOMEM || errno == EMFILE);
  }
  if (::ftruncate(seg.fd_.get(), static_cast<off_t>(seg.size_)) != 0) {
    throw seg.failure("ftruncate", errno, errno == ENOMEM || errno == EFBIG);
  }
  void* base = ::mmap(nullptr, seg.size_, PROT_READ | PROT_WRITE, MAP_SHARED, seg.fd_.get(), 0);
  if (base == MAP_FAILED) throw seg.failure("mmap", errno, errno == ENOMEM);
  seg.base_ = base;
  // Before fallocate: mbind on a shared mapping sets the file's own policy, which the pages
  // fallocate allocates then follow.
  if (spec.numa_node >= 0) bind_to_node(base, seg.size_, spec.numa_node);
  madvise(base, seg.size_, MADV_HUGEPAGE);  // best effort, before the pages exist
  return seg;
}

bool Segment::back(uint64_t max_bytes) {
  const uint64_t chunk = std::min(max_bytes, size_ - backed_);
  if (chunk > 0) {
    // The pages now, or a clean error: nothing touches memory that is not there.
    if (::fallocate(fd_.get(), 0, static_cast<off_t>(backed_), static_cast<off_t>(chunk)) != 0) {
      throw failure("fallocate", errno, true);
    }
    prefault(static_cast<uint8_t*>(base_) + backed_, chunk);
    backed_ += chunk;
  }
  return backed_ == size_;
}

void Segment::finish(uint32_t client_id) {
  if (backed_ != size_) throw SegmentError("segment: finish() before every page is backed", false);
  if (::fcntl(fd_.get(), F_ADD_SEALS, kSegmentSeals) != 0) {
    throw failure("sealing (F_ADD_SEALS)", errno, false);
  }
  auto& h = header();
  h.magic = proto::kSegmentMagic;
  h.header_bytes = sizeof(proto::SegmentHeader);
  h.segment_bytes = size_;
  h.doorbells_offset = layout_.doorbells_offset;
  h.submit_ring_offset = layout_.submit_ring_offset;
  h.complete_ring_offset = layout_.complete_ring_offset;
  h.arena_offset = layout_.arena_offset;
  h.arena_bytes = layout_.arena_bytes;
  h.submit_capacity = layout_.submit_capacity;
  h.complete_capacity = layout_.complete_capacity;
  h.client_id = client_id;
  h.local_rank = local_rank_;
  // release: a client that acquires the version sees every field written above.
  std::atomic_ref<uint32_t>(h.layout_version)
      .store(proto::kLayoutVersion, std::memory_order_release);
}

Segment Segment::create(const SegmentSpec& spec, uint32_t client_id, uint32_t local_rank) {
  Segment seg = reserve(spec, local_rank);
  seg.back(seg.size());
  seg.finish(client_id);
  return seg;
}

Segment Segment::open(int fd, uint64_t expected_bytes) {
  if (fd < 0) {
    throw std::runtime_error("nodecommd's hello reply came without the segment's descriptor");
  }
  // The seals first: F_GET_SEALS answers for shared memory only, without asking the file's
  // filesystem anything.
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0) {
    throw std::runtime_error(
        fmt::format("the segment descriptor nodecommd passed is not a memfd (F_GET_SEALS: {})",
                    std::strerror(errno)));
  }
  if ((seals & kSegmentSeals) != kSegmentSeals) {
    throw std::runtime_error(fmt::format(
        "the segment descriptor nodecommd passed is not sealed (seals {:#x}, expected {:#x})",
        seals, kSegmentSeals));
  }
  struct statfs fs {};
  struct stat st {};
  if (::fstatfs(fd, &fs) != 0 || (fs.f_type != TMPFS_MAGIC && fs.f_type != HUGETLBFS_MAGIC) ||
      ::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    throw std::runtime_error("the segment descriptor nodecommd passed is not shared memory");
  }
  const auto file_bytes = static_cast<uint64_t>(st.st_size);
  if (file_bytes != expected_bytes || file_bytes < sizeof(proto::SegmentHeader)) {
    throw std::runtime_error(
        fmt::format("the segment nodecommd passed is {} bytes; its hello reply announced {}",
                    file_bytes, expected_bytes));
  }
  Segment seg;
  void* base = ::mmap(nullptr, file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    throw std::runtime_error(
        fmt::format("cannot map the {}-byte segment: {}", file_bytes, std::strerror(errno)));
  }
  seg.base_ = base;
  seg.size_ = file_bytes;
  const auto& h = seg.header();
  // acquire: pairs with the creator's release store of the version.
  const uint32_t version =
      std::atomic_ref<const uint32_t>(h.layout_version).load(std::memory_order_acquire);
  if (h.magic != proto::kSegmentMagic || version != proto::kLayoutVersion) {
    throw std::runtime_error(
        fmt::format("segment: magic {:#x} layout version {}, expected {:#x} version {}", h.magic,
                    version, proto::kSegmentMagic, proto::kLayoutVersion));
  }
  const proto::SegmentGeometry g =
      proto::segment_geometry(h.submit_capacity, h.complete_capacity, h.arena_bytes);
  if (!proto::is_power_of_two(h.submit_capacity) || !proto::is_power_of_two(h.complete_capacity) ||
      g.segment_bytes != h.segment_bytes || g.segment_bytes > seg.size() ||
      g.arena_offset != h.arena_offset || g.submit_ring_offset != h.submit_ring_offset ||
      g.complete_ring_offset != h.complete_ring_offset ||
      g.doorbells_offset != h.doorbells_offset) {
    throw std::runtime_error(
        fmt::format("segment: header geometry does not match layout version {}", version));
  }
  seg.layout_ =
      Layout{g.doorbells_offset, g.submit_ring_offset, g.complete_ring_offset, g.arena_offset,
             h.arena_bytes,      h.submit_capacity,    h.complete_capacity};
  prefault(seg.base(), g.segment_bytes);
  return seg;
}

}  // namespace nodecomm::ipc
