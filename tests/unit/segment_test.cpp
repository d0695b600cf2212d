// Segments as sealed memfds (issue 16, point 1 and 3): created with a published layout and the
// seals, mapped by a second mapping from the descriptor alone, never a name in /dev/shm, not
// resizable by anyone; a descriptor that is not such a segment is refused; and memory that
// cannot be backed is a clean error (fallocate's ENOMEM under a real memory cgroup limit),
// never a SIGBUS or an OOM kill.
#include "nodecomm/ipc/segment.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

namespace nodecomm::ipc {
namespace {

SegmentSpec small_spec() {
  SegmentSpec spec;
  spec.submit_capacity = 64;
  spec.complete_capacity = 128;
  spec.arena_bytes = 1 << 20;
  return spec;
}

TEST(Segment, CreateSealedAndOpenFromTheDescriptor) {
  Segment created = Segment::create(small_spec(), 7, 3);
  ASSERT_GE(created.fd(), 0);
  EXPECT_EQ(::fcntl(created.fd(), F_GET_SEALS), kSegmentSeals);
  // Anonymous: the descriptor names a memfd, not a file anyone could open by name.
  char target[256] = {};
  ASSERT_GT(::readlink(("/proc/self/fd/" + std::to_string(created.fd())).c_str(), target,
                       sizeof(target) - 1),
            0);
  EXPECT_EQ(std::string(target).rfind("/memfd:", 0), 0u) << target;

  Segment opened = Segment::open(created.fd(), created.size());
  EXPECT_EQ(opened.fd(), -1);
  EXPECT_EQ(opened.header().client_id, 7u);
  EXPECT_EQ(opened.header().local_rank, 3u);
  EXPECT_EQ(opened.arena_bytes(), 1u << 20);
  created.arena()[12345] = 42;
  EXPECT_EQ(opened.arena()[12345], 42);
  // Nobody can resize it: what a hostile client would do with the descriptor it receives.
  const auto bytes = static_cast<off_t>(created.size());
  errno = 0;
  EXPECT_NE(::ftruncate(created.fd(), 4096), 0);
  EXPECT_EQ(errno, EPERM);
  errno = 0;
  EXPECT_NE(::ftruncate(created.fd(), bytes * 2), 0);
  EXPECT_EQ(errno, EPERM);
  errno = 0;
  EXPECT_NE(::fallocate(created.fd(), 0, bytes, 4096), 0);
  EXPECT_EQ(errno, EPERM);
  errno = 0;
  EXPECT_NE(::fcntl(created.fd(), F_ADD_SEALS, F_SEAL_WRITE), 0);  // F_SEAL_SEAL
  EXPECT_EQ(errno, EPERM);
  created.close_fd();
  EXPECT_EQ(created.fd(), -1);
  created.arena()[7] = 9;  // the mappings outlive the descriptor
  EXPECT_EQ(opened.arena()[7], 9);
  // The whole arena is there (fallocate backed it): touching its last byte is safe.
  opened.arena()[opened.arena_bytes() - 1] = 1;
}

// The daemon's way: reserve, back a chunk per loop turn, then finish (seal and header).
TEST(Segment, BackedInChunksThenFinished) {
  Segment s = Segment::reserve(small_spec(), 5);
  const uint64_t total = s.size();
  EXPECT_EQ(s.unbacked_bytes(), total);
  EXPECT_EQ(::fcntl(s.fd(), F_GET_SEALS), 0);  // not sealed before finish
  int turns = 0;
  while (!s.back(256 << 10)) ++turns;
  EXPECT_EQ(turns + 1, static_cast<int>((total + (256 << 10) - 1) / (256 << 10)));
  EXPECT_EQ(s.unbacked_bytes(), 0u);
  s.finish(9);
  EXPECT_EQ(::fcntl(s.fd(), F_GET_SEALS), kSegmentSeals);
  Segment opened = Segment::open(s.fd(), total);
  EXPECT_EQ(opened.header().client_id, 9u);
  EXPECT_EQ(opened.header().local_rank, 5u);
}

TEST(Segment, OpenRejectsAWrongVersionOrSize) {
  Segment created = Segment::create(SegmentSpec{}, 1, 0);
  EXPECT_THROW(Segment::open(created.fd(), created.size() - 4096), std::runtime_error);
  EXPECT_THROW(Segment::open(-1, created.size()), std::runtime_error);
  created.header().layout_version = proto::kLayoutVersion + 1;
  EXPECT_THROW(Segment::open(created.fd(), created.size()), std::runtime_error);
}

TEST(Segment, OpenRejectsUnsealedOrNonShmemFiles) {
  const uint64_t bytes = 1 << 20;
  const int unsealed = ::memfd_create("not-a-segment", MFD_CLOEXEC);
  ASSERT_GE(unsealed, 0);
  ASSERT_EQ(::ftruncate(unsealed, static_cast<off_t>(bytes)), 0);
  try {
    Segment::open(unsealed, bytes);
    ADD_FAILURE() << "an unsealed memfd was accepted as a segment";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("is not sealed (seals 0x1, expected 0x7)"),
              std::string::npos)
        << e.what();
  }
  ::close(unsealed);
  char path[] = "segment_test.XXXXXX";  // in the build directory: a disk file
  const int file = ::mkstemp(path);
  ASSERT_GE(file, 0);
  ::unlink(path);
  ASSERT_EQ(::ftruncate(file, static_cast<off_t>(bytes)), 0);
  EXPECT_THROW(Segment::open(file, bytes), std::runtime_error);
  ::close(file);
}

TEST(Segment, RejectsNonPowerOfTwoRings) {
  SegmentSpec spec;
  spec.submit_capacity = 100;
  EXPECT_THROW(Segment::create(spec, 1, 0), SegmentError);
}

// A cgroup v1 memory directory of our own under the one this process is in, or "".
std::string make_memory_cgroup(const std::string& leaf) {
  std::ifstream in("/proc/self/cgroup");
  std::string path;
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find(":memory:");
    if (at != std::string::npos) path = line.substr(at + 8);
  }
  const std::string base = "/sys/fs/cgroup/memory";
  if (path.empty() || ::access((base + "/memory.limit_in_bytes").c_str(), W_OK) != 0) return {};
  const std::string dir = base + (path == "/" ? "" : path) + "/" + leaf;
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return {};
  return dir;
}

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.flush();
  return static_cast<bool>(out);
}

// The real thing: a 32 MiB cgroup limit with its OOM killer off, and a 64 MiB segment. The
// kernel refuses fallocate's pages (ENOMEM); the creator gets a SegmentError naming the bytes
// and the reason, quickly, and lives on (no SIGBUS, no OOM kill).
TEST(Segment, MemoryThatCannotBeBackedIsAnError) {
  const std::string dir = make_memory_cgroup("segment_test." + std::to_string(::getpid()));
  if (dir.empty()) GTEST_SKIP() << "no writable cgroup v1 memory hierarchy (needs root)";
  ASSERT_TRUE(write_file(dir + "/memory.limit_in_bytes", std::to_string(32 << 20)));
  ASSERT_TRUE(write_file(dir + "/memory.oom_control", "1"));
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (!write_file(dir + "/cgroup.procs", std::to_string(::getpid()))) ::_exit(3);
    SegmentSpec spec;
    spec.arena_bytes = 64 << 20;
    const auto start = std::chrono::steady_clock::now();
    try {
      Segment s = Segment::create(spec, 1, 0);
      std::fprintf(stderr, "a 64 MiB segment was created under a 32 MiB limit\n");
      ::_exit(1);
    } catch (const SegmentError& e) {
      const double sec =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const std::string text = e.what();
      std::fprintf(stderr, "refused in %.3f s: %s\n", sec, e.what());
      const bool named = text.find("fallocate: Cannot allocate memory") != std::string::npos &&
                         text.find("(67108864-byte arena)") != std::string::npos &&
                         text.find("memory cgroup limit") != std::string::npos;
      ::_exit(e.no_memory() && named && sec < 2.0 ? 0 : 2);
    }
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ::rmdir(dir.c_str());
  ASSERT_TRUE(WIFEXITED(status)) << "the creator died of signal " << WTERMSIG(status);
  if (WEXITSTATUS(status) == 3) GTEST_SKIP() << "cannot move a process into " << dir;
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace nodecomm::ipc
