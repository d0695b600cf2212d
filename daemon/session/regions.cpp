#include "session/regions.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "nodecomm/proto/abi.hpp"

namespace nodecomm::daemon {
namespace {

// Every region mapped by this daemon, for the SIGBUS handler. Slots are claimed and released
// by the daemon's thread only; the handler reads them.
struct GuardSlot {
  std::atomic<uint8_t*> start{nullptr};
  std::atomic<uint64_t> length{0};
  std::atomic<int> poisoned{0};
};
constexpr size_t kGuardSlots = 4096;
std::array<GuardSlot, kGuardSlots> g_slots;
std::atomic<bool> g_fault{false};
struct sigaction g_previous {};
std::once_flag g_installed;

void on_sigbus(int /*signal*/, siginfo_t* info, void* /*context*/) {
  const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
  for (GuardSlot& slot : g_slots) {
    // acquire: pairs with the release in claim_slot, so start and length belong together.
    uint8_t* start = slot.start.load(std::memory_order_acquire);
    const uint64_t length = slot.length.load(std::memory_order_relaxed);
    if (start == nullptr || address - reinterpret_cast<uintptr_t>(start) >= length) continue;
    // Zero pages in place of the shrunken file; the faulting access then completes.
    void* p =
        mmap(start, length, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) break;
    // relaxed: read by the same thread after the handler returns.
    slot.poisoned.store(1, std::memory_order_relaxed);
    g_fault.store(true, std::memory_order_relaxed);
    return;
  }
  // Not a region's page: the previous disposition (normally the default, which ends the
  // process) applies when the access faults again on return.
  sigaction(SIGBUS, &g_previous, nullptr);
}

void install_handler() {
  std::call_once(g_installed, [] {
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    sigaction(SIGBUS, &action, &g_previous);
  });
}

int claim_slot(uint8_t* base, uint64_t length) {
  for (size_t i = 0; i < kGuardSlots; ++i) {
    if (g_slots[i].start.load(std::memory_order_relaxed) != nullptr) continue;
    g_slots[i].poisoned.store(0, std::memory_order_relaxed);
    g_slots[i].length.store(length, std::memory_order_relaxed);
    // release: the handler that sees start also sees the length written before it.
    g_slots[i].start.store(base, std::memory_order_release);
    return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

RegisteredRegions::~RegisteredRegions() {
  for (const Region& r : regions_) {
    // relaxed: only this thread claims and releases slots.
    g_slots[static_cast<size_t>(r.guard_slot)].start.store(nullptr, std::memory_order_relaxed);
    munmap(r.base, r.mapped_bytes);
  }
}

bool RegisteredRegions::add(const ipc::Fd& fd, uint64_t file_offset, uint64_t bytes,
                            uint64_t max_total_bytes, uint32_t& index, std::string& error) {
  if (!fd.valid()) {
    error = "no file descriptor came with the request";
    return false;
  }
  if (regions_.size() >= proto::kMaxRegions) {
    error = fmt::format("{} regions are registered already, the most one client may have",
                        regions_.size());
    return false;
  }
  // Shared memory only: F_GET_SEALS answers for tmpfs and hugetlbfs files (memfds, /dev/shm)
  // and fails for anything else without calling into the file's filesystem. A file on disk,
  // NFS or FUSE could block this daemon's single thread in a page fault (a FUSE server can
  // stall it forever) or fault it with an I/O error, so it is refused before any other call.
  const int seals = fcntl(fd.get(), F_GET_SEALS);
  struct statfs fs {};
  struct stat st {};
  if (seals < 0 || fstatfs(fd.get(), &fs) != 0 ||
      (fs.f_type != TMPFS_MAGIC && fs.f_type != HUGETLBFS_MAGIC) || fstat(fd.get(), &st) != 0 ||
      !S_ISREG(st.st_mode)) {
    error =
        "not a file on shared memory (a memfd or a /dev/shm file): a pipe, socket, or file on "
        "disk, NFS or FUSE could block nodecommd";
    return false;
  }
  const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const auto file_bytes = static_cast<uint64_t>(st.st_size);
  if (bytes == 0 || file_offset % page != 0 || file_offset > file_bytes ||
      bytes > file_bytes - file_offset) {
    error = fmt::format(
        "[offset {}, +{} bytes) is not a non-empty, page-aligned range of the "
        "{}-byte file",
        file_offset, bytes, file_bytes);
    return false;
  }
  if (bytes > max_total_bytes || total_bytes_ > max_total_bytes - bytes) {
    error = fmt::format(
        "{} more bytes would make {} registered, over this daemon's limit of {} "
        "(--max-arena)",
        bytes, total_bytes_ + bytes, max_total_bytes);
    return false;
  }
  install_handler();
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(),
                    static_cast<off_t>(file_offset));
  if (base == MAP_FAILED) {
    error = fmt::format("mmap of the file failed: {} (it must be open read-write)",
                        std::strerror(errno));
    return false;
  }
  const uint64_t mapped = (bytes + page - 1) / page * page;
  const int slot = claim_slot(static_cast<uint8_t*>(base), mapped);
  if (slot < 0) {
    munmap(base, mapped);
    error = "this daemon has no room to guard another region";
    return false;
  }
  // Where the file allows it (a memfd made with MFD_ALLOW_SEALING and not sealed further),
  // the daemon seals it against shrinking itself: the truncation attack is then impossible,
  // not just survived. /dev/shm files (PyTorch's shared storages) cannot be sealed; the
  // SIGBUS guard covers them, and every region stays guarded either way. Sealed only once
  // the region is taken, so that a refused registration leaves the file as it was.
  const bool sealed =
      (seals & F_SEAL_SHRINK) != 0 ||
      ((seals & F_SEAL_SEAL) == 0 && fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK) == 0);
  index = static_cast<uint32_t>(regions_.size());
  regions_.push_back({static_cast<uint8_t*>(base), bytes, mapped, slot, sealed});
  sizes_.push_back(bytes);
  total_bytes_ += bytes;
  return true;
}

uint8_t* RegisteredRegions::address(uint8_t* arena, uint64_t offset) const {
  const int64_t region = proto::region_of(offset);
  if (region < 0) return arena + offset;
  return regions_[static_cast<size_t>(region)].base + (offset & proto::kRegionOffsetMask);
}

std::string RegisteredRegions::poisoned() const {
  for (size_t i = 0; i < regions_.size(); ++i) {
    const GuardSlot& slot = g_slots[static_cast<size_t>(regions_[i].guard_slot)];
    // relaxed: the handler ran on this thread.
    if (slot.poisoned.load(std::memory_order_relaxed) != 0) {
      return fmt::format(
          "registered region {} ({} bytes) shrank under the daemon: its file was "
          "truncated after registration",
          i, regions_[i].bytes);
    }
  }
  return {};
}

bool take_region_faults() {
  // relaxed: set and cleared on the daemon's own thread.
  return g_fault.exchange(false, std::memory_order_relaxed);
}

}  // namespace nodecomm::daemon
