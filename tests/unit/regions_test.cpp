// The daemon's registered regions: what it maps, what it refuses (anything not on shared
// memory), that it seals a sealable memfd against shrinking, and that a file truncated under
// it costs a poisoned region, not the process.
#include "session/regions.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "nodecomm/proto/abi.hpp"

namespace nodecomm::daemon {
namespace {

constexpr size_t kPage = 4096;

ipc::Fd memfd(size_t bytes) {
  ipc::Fd fd(memfd_create("regions_test", MFD_CLOEXEC));
  EXPECT_TRUE(fd.valid());
  EXPECT_EQ(ftruncate(fd.get(), static_cast<off_t>(bytes)), 0);
  return fd;
}

TEST(Regions, MapsTheClientsPagesAndResolvesOffsets) {
  const ipc::Fd fd = memfd(3 * kPage);
  auto* client = static_cast<uint8_t*>(
      mmap(nullptr, 3 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0));
  ASSERT_NE(client, MAP_FAILED);
  RegisteredRegions regions;
  uint32_t index = 99;
  std::string error;
  ASSERT_TRUE(regions.add(fd, 4096, 2 * kPage, 1 << 20, index, error)) << error;
  EXPECT_EQ(index, 0u);
  EXPECT_EQ(regions.count(), 1u);
  EXPECT_EQ(regions.sizes()[0], 2 * kPage);
  client[4096 + 10] = 42;  // the client writes; the daemon's mapping sees it
  uint8_t arena[16] = {};
  EXPECT_EQ(*regions.address(arena, proto::region_offset(0, 10)), 42);
  EXPECT_EQ(regions.address(arena, 5), arena + 5);           // arena offsets are untouched
  *regions.address(arena, proto::region_offset(0, 11)) = 7;  // and the other way round
  EXPECT_EQ(client[4096 + 11], 7);
  munmap(client, 3 * kPage);
}

TEST(Regions, RefusesWhatItCannotMapSafely) {
  RegisteredRegions regions;
  uint32_t index = 0;
  std::string error;
  EXPECT_FALSE(regions.add(ipc::Fd(), 0, 4096, 1 << 20, index, error));
  EXPECT_NE(error.find("no file descriptor"), std::string::npos) << error;
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const ipc::Fd read_end(pipe_fds[0]);
  const ipc::Fd write_end(pipe_fds[1]);
  EXPECT_FALSE(regions.add(read_end, 0, 4096, 1 << 20, index, error));
  EXPECT_NE(error.find("not a file on shared memory"), std::string::npos) << error;
  // A file on disk (the build directory) could block the daemon in a page fault.
  char path[] = "regions_test.XXXXXX";
  const ipc::Fd disk(mkstemp(path));
  ASSERT_TRUE(disk.valid());
  unlink(path);
  ASSERT_EQ(ftruncate(disk.get(), kPage), 0);
  struct statfs fs {};
  ASSERT_EQ(fstatfs(disk.get(), &fs), 0);
  if (fs.f_type != TMPFS_MAGIC) {
    EXPECT_FALSE(regions.add(disk, 0, kPage, 1 << 20, index, error));
    EXPECT_NE(error.find("not a file on shared memory"), std::string::npos) << error;
  }
  const ipc::Fd fd = memfd(kPage);
  EXPECT_FALSE(regions.add(fd, 0, 8192, 1 << 20, index, error));  // past the end of the file
  EXPECT_FALSE(regions.add(fd, 512, 64, 1 << 20, index, error));  // unaligned
  EXPECT_FALSE(regions.add(fd, 0, 0, 1 << 20, index, error));     // empty
  EXPECT_FALSE(regions.add(fd, 0, 4096, 1000, index, error));     // over the limit
  EXPECT_NE(error.find("--max-arena"), std::string::npos) << error;
  EXPECT_EQ(regions.count(), 0u);
  for (uint32_t i = 0; i < proto::kMaxRegions; ++i) {
    ASSERT_TRUE(regions.add(fd, 0, 4096, uint64_t{1} << 30, index, error)) << error;
  }
  EXPECT_FALSE(regions.add(fd, 0, 4096, uint64_t{1} << 30, index, error));
  EXPECT_NE(error.find("the most one client may have"), std::string::npos) << error;
}

// A memfd that allows sealing is sealed against shrinking by the daemon: no truncation at all.
// One that does not (above, and /dev/shm files) keeps the SIGBUS guard.
TEST(Regions, ASealableMemfdIsSealedAgainstShrinking) {
  const ipc::Fd fd(memfd_create("regions_test", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  ASSERT_TRUE(fd.valid());
  ASSERT_EQ(ftruncate(fd.get(), 2 * kPage), 0);
  RegisteredRegions regions;
  uint32_t index = 0;
  std::string error;
  ASSERT_TRUE(regions.add(fd, 0, 2 * kPage, 1 << 20, index, error)) << error;
  EXPECT_TRUE(regions.sealed(index));
  EXPECT_EQ(fcntl(fd.get(), F_GET_SEALS), F_SEAL_SHRINK);
  errno = 0;
  EXPECT_NE(ftruncate(fd.get(), 0), 0);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(ftruncate(fd.get(), 4 * kPage), 0);  // growing harms nobody
  const ipc::Fd unsealable = memfd(kPage);
  ASSERT_TRUE(regions.add(unsealable, 0, kPage, 1 << 20, index, error)) << error;
  EXPECT_FALSE(regions.sealed(index));
}

TEST(Regions, ATruncatedFilePoisonsTheRegionInsteadOfKillingTheDaemon) {
  const ipc::Fd fd = memfd(2 * kPage);
  RegisteredRegions regions;
  uint32_t index = 0;
  std::string error;
  ASSERT_TRUE(regions.add(fd, 0, 2 * kPage, 1 << 20, index, error)) << error;
  (void)take_region_faults();
  EXPECT_TRUE(regions.poisoned().empty());
  ASSERT_EQ(ftruncate(fd.get(), 0), 0);  // the client shrinks the file under the daemon
  uint8_t arena[1] = {};
  volatile uint8_t* p = regions.address(arena, proto::region_offset(0, 4096 + 3));
  EXPECT_EQ(*p, 0);  // SIGBUS, handled: zero pages now
  *p = 1;            // and writable
  EXPECT_TRUE(take_region_faults());
  EXPECT_FALSE(take_region_faults());
  EXPECT_NE(regions.poisoned().find("registered region 0 (8192 bytes) shrank"), std::string::npos)
      << regions.poisoned();
}

}  // namespace
}  // namespace nodecomm::daemon
