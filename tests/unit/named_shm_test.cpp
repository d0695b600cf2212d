// ipc::NamedShm, the one helper for named shared-memory objects (the daemon's counters segment
// and traces, nodecommctl's views of them).
#include "nodecomm/ipc/named_shm.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace nodecomm::ipc {
namespace {

std::string test_name(const char* what) {
  return "/nodecomm.utility-test-" + std::to_string(::getpid()) + "." + what;
}

bool exists(const std::string& name) {
  return ::access(("/dev/shm" + name).c_str(), F_OK) == 0;
}

TEST(NamedShm, CreateOpenAndUnlink) {
  const std::string name = test_name("shm");
  {
    NamedShm owner;
    ASSERT_EQ(owner.create(name, 8192, -1), "");
    ASSERT_TRUE(owner.mapped());
    EXPECT_EQ(owner.size(), 8192u);
    EXPECT_EQ(owner.name(), name);
    struct stat st {};
    ASSERT_EQ(::stat(("/dev/shm" + name).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);  // whatever the umask
    std::memcpy(owner.data(), "counters", 9);

    NamedShm reader;
    int open_errno = -1;
    ASSERT_EQ(reader.open_readonly(name, &open_errno), "");
    EXPECT_EQ(open_errno, 0);
    EXPECT_EQ(reader.size(), 8192u);
    EXPECT_STREQ(static_cast<const char*>(reader.data()), "counters");
    // Moving keeps one mapping; a reader going away leaves the object alone.
    NamedShm moved = std::move(reader);
    EXPECT_FALSE(reader.mapped());
    EXPECT_STREQ(static_cast<const char*>(moved.data()), "counters");
    moved.reset();
    EXPECT_TRUE(exists(name));

    owner.reset();
    EXPECT_FALSE(exists(name));
    EXPECT_FALSE(owner.mapped());
  }
  EXPECT_FALSE(exists(name));
}

TEST(NamedShm, OpenMissing) {
  NamedShm reader;
  int open_errno = 0;
  const std::string error = reader.open_readonly(test_name("missing"), &open_errno);
  EXPECT_EQ(open_errno, ENOENT);
  EXPECT_NE(error.find("cannot open /dev/shm"), std::string::npos) << error;
  EXPECT_FALSE(reader.mapped());
}

TEST(NamedShm, RefusesASymbolicLink) {
  const std::string name = test_name("link");
  const std::string path = "/dev/shm" + name;
  ASSERT_EQ(::symlink("/dev/null", path.c_str()), 0) << std::strerror(errno);
  NamedShm owner;
  const std::string error = owner.create(name, 4096, -1);
  EXPECT_NE(error.find("symbolic link"), std::string::npos) << error;
  EXPECT_FALSE(owner.mapped());
  ::unlink(path.c_str());
}

}  // namespace
}  // namespace nodecomm::ipc
