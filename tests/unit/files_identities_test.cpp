// Issue 16, point 7, the pieces that need no daemon: printable names, the runtime directory's
// checks, and the client's check of the daemon's uid on a connected socket.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "nodecomm/ipc/daemon_identity.hpp"
#include "nodecomm/ipc/printable.hpp"
#include "nodecomm/ipc/private_dir.hpp"

namespace nodecomm::ipc {
namespace {

TEST(Printable, EscapesEverythingButPrintableAscii) {
  EXPECT_EQ(printable("resnet50/layer1.conv"), "resnet50/layer1.conv");
  EXPECT_EQ(printable("evil\x1b[31mRED\nnodecommd[x] error: forged"),
            "evil\\x1b[31mRED\\x0anodecommd[x] error: forged");
  EXPECT_EQ(printable(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(printable("back\\slash \x7f caf\xc3\xa9"), "back\\\\slash \\x7f caf\\xc3\\xa9");
  const char field[8] = {'j', 'o', 'b', '\r', 'x', 'y', 'z', 'w'};  // unterminated
  EXPECT_EQ(printable_text(field), "job\\x0dxyzw");
}

class PrivateDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/nodecomm-privdir.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    base_ = tmpl;
  }
  void TearDown() override {
    const std::string cmd = "rm -rf '" + base_ + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  std::string refusal(const std::string& dir) {
    try {
      prepare_private_dir(dir);
    } catch (const UnsafePathError& e) {
      return e.what();
    }
    return {};
  }
  std::string base_;
};

TEST_F(PrivateDir, CreatesTheDirectory0711WhateverTheUmask) {
  const mode_t old = ::umask(0077);
  prepare_private_dir(base_ + "/a/b/rt");
  ::umask(old);
  struct stat st {};
  ASSERT_EQ(::stat((base_ + "/a/b/rt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0711u);
  EXPECT_EQ(st.st_uid, ::geteuid());
  prepare_private_dir(base_ + "/a/b/rt");  // again: an existing, safe directory is fine
}

TEST_F(PrivateDir, RefusesWritableSymlinkedOrExposedDirectories) {
  const std::string open = base_ + "/open";
  ASSERT_EQ(::mkdir(open.c_str(), 0777), 0);
  ASSERT_EQ(::chmod(open.c_str(), 0777), 0);
  EXPECT_EQ(refusal(open), "unsafe runtime directory " + open +
                               ": mode 0777 lets group or others write in it; chmod go-w it "
                               "(nodecommd creates it 0711) or choose another runtime directory");
  EXPECT_NE(refusal(open + "/rt")
                .find("its parent " + open +
                      " (mode 0777) is writable by group or others without the "
                      "sticky bit"),
            std::string::npos);
  struct stat st {};
  EXPECT_NE(::stat((open + "/rt").c_str(), &st), 0) << "created under an unsafe parent";
  const std::string link = base_ + "/link";
  ASSERT_EQ(::symlink(open.c_str(), link.c_str()), 0);
  EXPECT_NE(refusal(link).find("it is a symbolic link"), std::string::npos);
  const std::string file = base_ + "/file";
  ASSERT_EQ(::close(::creat(file.c_str(), 0600)), 0);
  EXPECT_NE(refusal(file).find("is not a directory"), std::string::npos);
  EXPECT_NE(refusal("relative/dir").find("not an absolute path"), std::string::npos);
}

TEST_F(PrivateDir, RefusesASymlinkAtAFilePath) {
  const std::string target = base_ + "/target";
  const std::string link = base_ + "/nodecommd.lock";
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  EXPECT_THROW(refuse_symlink(link, "lock file"), UnsafePathError);
  refuse_symlink(target, "lock file");  // absent: fine
}

TEST(DaemonIdentity, AcceptsItsOwnUidAndNamesAMismatch) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, fds), 0);
  ::unsetenv(kDaemonUidEnv);
  EXPECT_EQ(check_daemon_peer(fds[0], "/x/nodecommd.sock"), "");
  const std::string other = std::to_string(::geteuid() + 4242);
  ::setenv(kDaemonUidEnv, other.c_str(), 1);
  const std::string refusal = check_daemon_peer(fds[0], "/x/nodecommd.sock");
  EXPECT_NE(
      refusal.find("refusing nodecommd at /x/nodecommd.sock: it runs as uid " +
                   std::to_string(::geteuid()) + " (pid " + std::to_string(::getpid()) +
                   "), but this process accepts only uid " + other + " (NODECOMM_DAEMON_UID)"),
      std::string::npos)
      << refusal;
  ::setenv(kDaemonUidEnv, "no-such-user-nodecomm", 1);
  EXPECT_EQ(check_daemon_peer(fds[0], "/x/nodecommd.sock"),
            "NODECOMM_DAEMON_UID 'no-such-user-nodecomm' is neither a uid nor a user name");
  ::unsetenv(kDaemonUidEnv);
  ::close(fds[0]);
  ::close(fds[1]);
}

}  // namespace
}  // namespace nodecomm::ipc
