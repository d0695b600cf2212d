// A client's registered regions: files of its own memory (a memfd, or a /dev/shm file such as
// PyTorch's shared storages) that it passed over the control socket, mapped here so that
// collectives on buffers inside them are zero-copy like arena buffers (proto::region_offset).
//
// Only files on shared memory (tmpfs, hugetlbfs) are taken: a file on disk, NFS or FUSE could
// block the daemon in a page fault. Where the file allows sealing (a memfd made with
// MFD_ALLOW_SEALING), the daemon adds F_SEAL_SHRINK and the file can never shrink. Otherwise
// (a /dev/shm file) the client keeps its own descriptor and may shrink the file under us;
// touching a page past the new end would then raise SIGBUS in the daemon. A process-wide
// SIGBUS handler covers every mapped region: a fault inside one replaces the region with zero
// pages, marks it poisoned and lets the access finish. The daemon drops the client at its
// next check
// (poisoned()), and nobody else is harmed. This is how Wayland compositors survive clients
// that truncate their shm pools.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nodecomm/ipc/socket.hpp"

namespace nodecomm::daemon {

class RegisteredRegions {
 public:
  RegisteredRegions() = default;
  ~RegisteredRegions();
  RegisteredRegions(const RegisteredRegions&) = delete;
  RegisteredRegions& operator=(const RegisteredRegions&) = delete;

  // Maps `bytes` of `fd` from `file_offset` as the next region. On success returns true and
  // sets `index`; otherwise `error` says why (the file's kind or size, the limits, mmap).
  // `max_total_bytes` bounds all regions of this client together.
  bool add(const ipc::Fd& fd, uint64_t file_offset, uint64_t bytes, uint64_t max_total_bytes,
           uint32_t& index, std::string& error);

  // The daemon's address of a validated descriptor offset (arena or region); `arena` is the
  // client's arena base.
  uint8_t* address(uint8_t* arena, uint64_t offset) const;

  // Sizes in region order, for ipc::ValidationLimits.
  const uint64_t* sizes() const { return sizes_.data(); }
  uint32_t count() const { return static_cast<uint32_t>(sizes_.size()); }
  uint64_t total_bytes() const { return total_bytes_; }

  // The first region the SIGBUS handler replaced, as text for the client's error, or "".
  std::string poisoned() const;
  // Whether region `index` carries F_SEAL_SHRINK (for the log and the tests).
  bool sealed(uint32_t index) const { return regions_[index].sealed; }

 private:
  struct Region {
    uint8_t* base = nullptr;
    uint64_t bytes = 0;
    uint64_t mapped_bytes = 0;  // page-rounded, as mmap took it
    int guard_slot = -1;
    bool sealed = false;  // F_SEAL_SHRINK is on the file: it cannot shrink under us
  };
  std::vector<Region> regions_;
  std::vector<uint64_t> sizes_;
  uint64_t total_bytes_ = 0;
};

// True once the SIGBUS handler has poisoned any region since the last call (relaxed check
// for the daemon's loop; the sessions then look at their own regions).
bool take_region_faults();

}  // namespace nodecomm::daemon
