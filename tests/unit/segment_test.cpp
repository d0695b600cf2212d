// Segments through Boost.Interprocess: created 0600 with a published layout, mapped by a
// second mapping that agrees on the geometry, gone from /dev/shm after unlink.
#include "nodecomm/ipc/segment.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

namespace nodecomm::ipc {
namespace {

std::string unique_name() {
  return "/nodecomm.test." + std::to_string(::getpid());
}

TEST(Segment, CreateOpenUnlink) {
  const std::string name = unique_name();
  SegmentSpec spec;
  spec.submit_capacity = 64;
  spec.complete_capacity = 128;
  spec.arena_bytes = 1 << 20;
  Segment created = Segment::create(name, spec, 7, 3, ::getuid(), ::getgid());
  struct stat st {};
  ASSERT_EQ(::stat(("/dev/shm" + name).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_uid, ::getuid());

  Segment opened = Segment::open(name);
  EXPECT_EQ(opened.header().client_id, 7u);
  EXPECT_EQ(opened.header().local_rank, 3u);
  EXPECT_EQ(opened.arena_bytes(), 1u << 20);
  // Both mappings see the same bytes.
  created.arena()[12345] = 42;
  EXPECT_EQ(opened.arena()[12345], 42);

  EXPECT_TRUE(Segment::unlink(name));
  EXPECT_FALSE(std::filesystem::exists("/dev/shm" + name));
  EXPECT_EQ(opened.arena()[12345], 42);  // mappings outlive the name
}

TEST(Segment, OpenRejectsAWrongVersion) {
  const std::string name = unique_name() + ".v";
  Segment created = Segment::create(name, SegmentSpec{}, 1, 0, ::getuid(), ::getgid());
  created.header().layout_version = proto::kLayoutVersion + 1;
  EXPECT_THROW(Segment::open(name), std::runtime_error);
  Segment::unlink(name);
}

TEST(Segment, RejectsNonPowerOfTwoRings) {
  SegmentSpec spec;
  spec.submit_capacity = 100;
  EXPECT_THROW(Segment::create(unique_name() + ".p", spec, 1, 0, ::getuid(), ::getgid()),
               std::runtime_error);
}

}  // namespace
}  // namespace nodecomm::ipc
