#include "nodecomm/ipc/named_shm.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace nodecomm::ipc {

NamedShm& NamedShm::operator=(NamedShm&& o) noexcept {
  if (this != &o) {
    reset();
    name_ = std::exchange(o.name_, {});
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    owner_ = std::exchange(o.owner_, false);
  }
  return *this;
}

std::string NamedShm::create(const std::string& name, size_t bytes, int reader_gid) {
  reset();
  // /dev/shm is writable by everyone: a symbolic link planted at the name is refused (and
  // shm_open's O_NOFOLLOW and O_EXCL below would not follow it either).
  struct stat st {};
  if (::lstat(("/dev/shm" + name).c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    return fmt::format(
        "refusing /dev/shm{}: it is a symbolic link, which nodecommd never follows (someone "
        "planted it); remove it",
        name);
  }
  // A stale object of this name is an earlier daemon's of the same instance (which held the
  // instance lock the caller holds now) or our own previous trace: replace it.
  ::shm_unlink(name.c_str());
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return fmt::format("shm_open {}: {}", name, std::strerror(errno));
  // Group-readable only when the group could be given to it (root, or CAP_CHOWN).
  const bool group_reads =
      reader_gid >= 0 && ::fchown(fd, static_cast<uid_t>(-1), static_cast<gid_t>(reader_gid)) == 0;
  std::string error;
  if (::fchmod(fd, group_reads ? 0640 : 0600) != 0) {
    error = fmt::format("fchmod {}: {}", name, std::strerror(errno));
  } else if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    error = fmt::format("ftruncate {} to {} bytes: {}", name, bytes, std::strerror(errno));
  }
  void* data = MAP_FAILED;
  if (error.empty()) {
    data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (data == MAP_FAILED) error = fmt::format("mmap {}: {}", name, std::strerror(errno));
  }
  ::close(fd);
  if (!error.empty()) {
    ::shm_unlink(name.c_str());
    return error;
  }
  name_ = name;
  data_ = data;
  bytes_ = bytes;
  owner_ = true;
  return {};
}

std::string NamedShm::open_readonly(const std::string& name, int* open_errno) {
  reset();
  const int fd = ::shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0);
  if (open_errno != nullptr) *open_errno = fd < 0 ? errno : 0;
  if (fd < 0) return fmt::format("cannot open /dev/shm{}: {}", name, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size <= 0) {
    ::close(fd);
    return fmt::format("/dev/shm{} is empty or unreadable", name);
  }
  const auto bytes = static_cast<size_t>(st.st_size);
  void* data = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  const int saved = errno;
  ::close(fd);
  if (data == MAP_FAILED) return fmt::format("mmap /dev/shm{}: {}", name, std::strerror(saved));
  name_ = name;
  data_ = data;
  bytes_ = bytes;
  owner_ = false;
  return {};
}

void NamedShm::reset() {
  if (data_ != nullptr) ::munmap(data_, bytes_);
  if (owner_ && !name_.empty()) ::shm_unlink(name_.c_str());
  data_ = nullptr;
  bytes_ = 0;
  owner_ = false;
  name_.clear();
}

}  // namespace nodecomm::ipc
