// The daemon's runtime directory, made safe before anything is put in it: nobody but the
// daemon's uid can create, replace or plant a file in it, and every file the daemon makes
// there is created without following a symbolic link.
//
// Why 0711 and not 0700: every local user's ranks must reach the socket in it (connect needs
// search permission on the directory), so the directory keeps the "x" bit for group and
// others; without "r" they cannot list it, and without "w" they cannot create, rename or
// remove anything in it, which is what stops a planted symlink or a swapped socket. The
// files themselves carry their own modes (lock 0600, ready 0644, socket 0666). An
// administrator may narrow the directory further (0710 with a group): an existing
// directory's read and search bits are kept; only write access for group or others is refused.
#pragma once

#include <stdexcept>
#include <string>

namespace nodecomm::ipc {

inline constexpr unsigned kRuntimeDirMode = 0711;

// Refusals of the checks below; what() names the path, the owner or mode found and the remedy.
class UnsafePathError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Creates `dir` if missing (parents 0755, `dir` itself `leaf_mode`, whatever the umask), then
// checks it before use. Refused with UnsafePathError: `dir` a symbolic link or not a
// directory; `dir` owned by another uid than this process's effective uid; `dir` writable by
// group or others; an ancestor owned by a uid other than root and ours, or writable by group
// or others without the sticky bit (whoever may write there could swap `dir` for their own).
void prepare_private_dir(const std::string& dir, unsigned leaf_mode = kRuntimeDirMode);

// Throws UnsafePathError when `path` exists and is a symbolic link: `what` names the file in
// the message ("lock file", "ready file").
void refuse_symlink(const std::string& path, const char* what);

}  // namespace nodecomm::ipc
