#include "nodecomm/ipc/private_dir.hpp"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace nodecomm::ipc {

namespace {

std::string mode_text(mode_t mode) {
  return fmt::format("{:04o}", mode & 07777);
}

// An ancestor of the runtime directory: whoever may write in it may rename the runtime
// directory away and put their own in its place, unless the sticky bit stops them.
void check_ancestor(const std::string& dir, const std::string& ancestor) {
  struct stat st {};
  if (::stat(ancestor.c_str(), &st) != 0) {
    throw UnsafePathError(
        fmt::format("runtime directory {}: cannot check {}: {}", dir, ancestor, strerror(errno)));
  }
  const uid_t me = ::geteuid();
  if (st.st_uid != 0 && st.st_uid != me) {
    throw UnsafePathError(fmt::format(
        "unsafe runtime directory {}: its parent {} is owned by uid {}, neither root nor this "
        "daemon's uid {}; choose a runtime directory under a parent that root or uid {} owns",
        dir, ancestor, st.st_uid, me, me));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
    throw UnsafePathError(fmt::format(
        "unsafe runtime directory {}: its parent {} (mode {}) is writable by group or others "
        "without the sticky bit, so they could replace the runtime directory; chmod go-w it or "
        "choose another runtime directory",
        dir, ancestor, mode_text(st.st_mode)));
  }
}

}  // namespace

void prepare_private_dir(const std::string& dir, unsigned leaf_mode) {
  if (dir.empty() || dir.front() != '/') {
    throw UnsafePathError(fmt::format("runtime directory '{}' is not an absolute path", dir));
  }
  std::string path = dir;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    const std::string part = path.substr(0, pos);
    const bool leaf = pos == path.size();
    if (!leaf) {
      if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) {
        throw UnsafePathError(fmt::format("mkdir {}: {}", part, std::strerror(errno)));
      }
      check_ancestor(dir, part);
      continue;
    }
    if (::mkdir(part.c_str(), leaf_mode) == 0) {
      // mkdir applied the umask; the mode is this function's promise, not the umask's.
      if (::chmod(part.c_str(), leaf_mode) != 0) {
        throw UnsafePathError(fmt::format("chmod {}: {}", part, std::strerror(errno)));
      }
    } else if (errno != EEXIST) {
      throw UnsafePathError(fmt::format("mkdir {}: {}", part, std::strerror(errno)));
    }
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    throw UnsafePathError(fmt::format("runtime directory {}: {}", dir, std::strerror(errno)));
  }
  if (S_ISLNK(st.st_mode)) {
    throw UnsafePathError(fmt::format(
        "unsafe runtime directory {}: it is a symbolic link; remove it or choose another "
        "runtime directory",
        dir));
  }
  if (!S_ISDIR(st.st_mode)) {
    throw UnsafePathError(fmt::format("runtime directory {} exists and is not a directory", dir));
  }
  const uid_t me = ::geteuid();
  if (st.st_uid != me) {
    throw UnsafePathError(fmt::format(
        "unsafe runtime directory {}: owned by uid {}, not by this daemon's uid {}; remove it "
        "or choose another runtime directory",
        dir, st.st_uid, me));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    throw UnsafePathError(fmt::format(
        "unsafe runtime directory {}: mode {} lets group or others write in it; chmod go-w it "
        "(nodecommd creates it {}) or choose another runtime directory",
        dir, mode_text(st.st_mode), mode_text(kRuntimeDirMode)));
  }
}

void refuse_symlink(const std::string& path, const char* what) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    throw UnsafePathError(
        fmt::format("refusing {} {}: it is a symbolic link, which nodecommd never follows (someone "
                    "planted it, or the runtime directory is shared); remove it",
                    what, path));
  }
}

}  // namespace nodecomm::ipc
