// hostile_client's attacks on registered memory (nc_register_fd): registrations the daemon
// must refuse, a region it must serve exactly, one never registered, and a file truncated
// under the daemon. See hostile_client.cpp for the modes.
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "hostile_attacks.hpp"
#include "nodecomm/ipc/socket.hpp"
#include "nodecomm/proto/control.hpp"

namespace hostile {
namespace {

// Sends a kRegister (with `passed_fd` attached unless negative) and returns the reply.
proto::RegisterReply register_region(RawClient& c, int passed_fd, uint64_t file_offset,
                                     uint64_t bytes) {
  proto::Register request{};
  request.type = static_cast<uint32_t>(proto::ControlType::kRegister);
  request.file_offset = file_offset;
  request.bytes = bytes;
  proto::RegisterReply reply{};
  reply.status = -1;
  if (ipc::send_message(c.fd.get(), &request, sizeof(request), passed_fd) != ipc::IoResult::kOk) {
    ipc::copy_text(reply.message, "send failed");
    return reply;
  }
  size_t size = 0;
  if (ipc::recv_message_timed(c.fd.get(), &reply, sizeof(reply), size,
                              static_cast<int>(timeout_sec() * 1000)) != ipc::IoResult::kOk ||
      size != sizeof(reply)) {
    reply.status = -1;
    ipc::copy_text(reply.message, "no reply");
  }
  return reply;
}

// A memfd of `bytes`, mapped here; -1 on failure.
int make_memfd(uint64_t bytes, void** mapped) {
  const int fd = ::memfd_create("nodecomm-hostile", MFD_CLOEXEC);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) return -1;
  *mapped = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return *mapped == MAP_FAILED ? -1 : fd;
}

}  // namespace

int attack_regions(RawClient& c) {
  int pipe_fds[2] = {-1, -1};
  if (::pipe(pipe_fds) != 0) return hostile_fail(c, "pipe failed");
  void* small = nullptr;
  const int small_fd = make_memfd(4096, &small);
  struct Refused {
    int fd;
    uint64_t offset, bytes;
    const char* words;
  };
  const Refused refused[] = {
      {-1, 0, 4096, "no file descriptor came with the request"},
      {pipe_fds[0], 0, 4096, "not a file on shared memory"},
      {small_fd, 0, 8192, "page-aligned range of the 4096-byte file"},
      {small_fd, 100, 64, "page-aligned range"},
      {small_fd, 0, 0, "non-empty"},
  };
  for (const Refused& r : refused) {
    const proto::RegisterReply reply = register_region(c, r.fd, r.offset, r.bytes);
    const std::string text = ipc::bounded_text(reply.message);
    if (reply.status != static_cast<int32_t>(Status::kInvalidArgument) ||
        !contains(text, r.words)) {
      return hostile_fail(c, fmt::format("register refusal: expected '{}', got status {}: {}",
                                         r.words, reply.status, text));
    }
    std::printf("hostile_client: refused as expected: %s\n", text.c_str());
  }
  // A good region: the world allreduce runs from it, in place, exactly.
  void* mapped = nullptr;
  const uint64_t bytes = kWorldCount * sizeof(int64_t) + 8192;
  const int fd = make_memfd(bytes, &mapped);
  const proto::RegisterReply ok = register_region(c, fd, 0, bytes);
  if (fd < 0 || ok.status != 0 || ok.region != 0) {
    return hostile_fail(c, fmt::format("register a memfd: status {} region {}: {}", ok.status,
                                       ok.region, ipc::bounded_text(ok.message)));
  }
  ::close(fd);  // the daemon holds its own mapping
  auto* buf = reinterpret_cast<int64_t*>(static_cast<uint8_t*>(mapped) + 4096);
  for (uint64_t i = 0; i < kWorldCount; ++i) buf[i] = world_value(3, c.world_rank, i);
  OpDescriptor d = make_desc(Collective::kAllreduce, DType::kI64, RedOp::kSum, 0, 3, kWorldCount,
                             proto::region_offset(0, 4096), proto::region_offset(0, 4096));
  d.flags = proto::kOpFlagInPlace;
  if (!c.post(d)) return hostile_fail(c, "cannot post the world allreduce");
  Completion done{};
  if (c.next(done, timeout_sec()) != RawClient::Next::kCompletion || done.status != 0) {
    return hostile_fail(
        c, fmt::format("world allreduce from a region: {}", ipc::bounded_text(done.message)));
  }
  for (uint64_t i = 0; i < kWorldCount; ++i) {
    if (buf[i] != world_sum(3, c.world_size, static_cast<int64_t>(i))) {
      return hostile_fail(
          c, fmt::format("world allreduce from a region: element {} is {}", i, buf[i]));
    }
  }
  std::printf("hostile_client: world allreduce from registered region 0 exact\n");
  // A region it never registered, then one past the end of region 0.
  if (!c.post(make_desc(Collective::kAllreduce, DType::kF32, RedOp::kSum, 0, 4, 16,
                        proto::region_offset(5, 0), proto::region_offset(5, 64)))) {
    return hostile_fail(c, "cannot post");
  }
  if (int bad = expect_errors(c, {{Status::kOutOfRange,
                                   "names registered region 5, and 1 region(s) are registered"}})) {
    return bad;
  }
  return expect_dropped(c, "a buffer in a region it never registered");
}

int attack_region_truncate(RawClient& c) {
  void* mapped = nullptr;
  const uint64_t bytes = kWorldCount * sizeof(int64_t);
  const int fd = make_memfd(bytes, &mapped);
  const proto::RegisterReply ok = register_region(c, fd, 0, bytes);
  if (fd < 0 || ok.status != 0) {
    return hostile_fail(c, fmt::format("register: {}", ipc::bounded_text(ok.message)));
  }
  if (::ftruncate(fd, 0) != 0) return hostile_fail(c, "ftruncate failed");
  OpDescriptor d = make_desc(Collective::kAllreduce, DType::kI64, RedOp::kSum, 0, 3, kWorldCount,
                             proto::region_offset(0, 0), proto::region_offset(0, 0));
  d.flags = proto::kOpFlagInPlace;
  if (!c.post(d)) return hostile_fail(c, "cannot post the world allreduce");
  // It gets an error, or the daemon simply drops it; either way it must hear within seconds.
  Completion done{};
  if (c.next(done, timeout_sec()) == RawClient::Next::kCompletion && done.status == 0) {
    std::printf("hostile_client: the allreduce completed before the drop\n");
  }
  return expect_dropped(c, "a registered region it truncated");
}

}  // namespace hostile
