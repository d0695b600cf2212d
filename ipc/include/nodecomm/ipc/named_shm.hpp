// A named POSIX shared-memory object (/dev/shm/<name>) mapped into this process: the daemon's
// counters segment and trace buffers, which it creates, and nodecommctl's read-only views of
// them. The one place that calls shm_open/mmap/munmap/shm_unlink on named objects (a client's
// segment is an anonymous memfd: segment.hpp).
#pragma once

#include <cstddef>
#include <string>
#include <utility>

namespace nodecomm::ipc {

class NamedShm {
 public:
  NamedShm() = default;
  ~NamedShm() { reset(); }
  NamedShm(NamedShm&& o) noexcept { *this = std::move(o); }
  NamedShm& operator=(NamedShm&& o) noexcept;
  NamedShm(const NamedShm&) = delete;
  NamedShm& operator=(const NamedShm&) = delete;

  // Creates `name` ("/nodecomm.<instance>.counters") of `bytes` zeroed bytes and maps it
  // read-write; this object owns it and unlinks it on reset() or destruction. Never through a
  // symbolic link; a stale object of the same name (an earlier daemon of this instance, whose
  // lock the caller holds now) is replaced. Mode 0600, or 0640 with group `reader_gid` when
  // that is not negative and can be given, whatever the umask: counters and traces name other
  // users' jobs and tensors, so only the creator's uid, root and that group read them.
  // Returns an error text naming the object and the step, empty on success.
  std::string create(const std::string& name, size_t bytes, int reader_gid);

  // Maps an existing `name` read-only, all of it. Returns an error text ("cannot open
  // /dev/shm/<name>: ...", "... is empty", "mmap ...: ..."), empty on success; `open_errno`,
  // when given, receives shm_open's errno (0 when the open succeeded), so that callers can
  // explain EACCES and ENOENT in their own terms.
  std::string open_readonly(const std::string& name, int* open_errno = nullptr);

  // Unmaps, and unlinks what create() made. Idempotent.
  void reset();

  void* data() const { return data_; }
  size_t size() const { return bytes_; }
  const std::string& name() const { return name_; }
  bool mapped() const { return data_ != nullptr; }

 private:
  std::string name_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  bool owner_ = false;  // created here: unlinked on reset
};

}  // namespace nodecomm::ipc
