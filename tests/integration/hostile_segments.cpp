// Issue 16, point 1: segments and registered files the daemon can always touch, attacked for
// real against running daemons. Run under nodecomm-launch (node 0 needs at least 2 ranks):
//
//   hostile_segments MODE
//
// Node 0's last local rank is the hostile one; it speaks the protocol itself (raw_client.hpp).
//
//   resize   receives its segment's descriptor with the hello reply and tries to resize it:
//            ftruncate shorter and longer, fallocate past the end, more seals (each must fail
//            with EPERM: the daemon sealed it); checks that the segment has no name (its
//            mapping is a memfd, nothing in /dev/shm carries its pid); maps it, takes part in
//            a world allreduce exactly, tries ftruncate again on the live segment, takes part
//            in another, punches a hole over its arena (allowed: not a resize) and takes part
//            in a third, exactly.
//   regions  registers a file on a filesystem that is not shared memory (a file in the
//            working directory, when that is not tmpfs): refused, naming why; a memfd made
//            with MFD_ALLOW_SEALING: taken, and the daemon has sealed it against shrinking
//            (ftruncate fails with EPERM); a /dev/shm file (unsealable, like PyTorch's shared
//            storages): taken under the SIGBUS guard. World allreduces run in place from both
//            regions and from the arena, exactly.
//
// The good ranks run the same world allreduces through libnodecomm and check every element,
// then check that their daemon is alive. Then every rank, the hostile one included (now
// through libnodecomm), runs a second job on the same daemons with exact results.
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "hostile_attacks.hpp"
#include "nodecomm.h"
#include "nodecomm/ipc/segment.hpp"
#include "nodecomm/ipc/socket.hpp"
#include "nodecomm/proto/control.hpp"
#include "raw_client.hpp"

namespace {

using namespace hostile;

// Whether `call` failed with EPERM (what a seal answers).
bool refused_eperm(int result) {
  return result != 0 && errno == EPERM;
}

int attack_resize(RawClient& c) {
  const int fd = c.segment_fd.get();
  const auto bytes = static_cast<off_t>(c.segment_bytes);
  errno = 0;
  const int shorter = ::ftruncate(fd, 4096);
  const bool shorter_ok = refused_eperm(shorter);
  errno = 0;
  const int longer = ::ftruncate(fd, bytes + (1 << 20));
  const bool longer_ok = refused_eperm(longer);
  errno = 0;
  const int grow = ::fallocate(fd, 0, bytes, 1 << 20);
  const bool grow_ok = refused_eperm(grow);
  errno = 0;
  const int seal = ::fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE);
  const bool seal_ok = seal != 0 && errno == EPERM;
  if (!shorter_ok || !longer_ok || !grow_ok || !seal_ok) {
    return hostile_fail(c, fmt::format("resizing the segment was not refused with EPERM: "
                                       "shorter {}, longer {}, fallocate {}, seal {}",
                                       shorter, longer, grow, seal));
  }
  std::printf(
      "hostile_client: ftruncate shorter and longer, fallocate past the end and "
      "F_ADD_SEALS on its %lld-byte segment all failed with EPERM\n",
      static_cast<long long>(bytes));
  // No name: the descriptor is a memfd, and /dev/shm holds nothing with this pid in its name.
  char target[256] = {};
  const std::string link = fmt::format("/proc/self/fd/{}", fd);
  if (::readlink(link.c_str(), target, sizeof(target) - 1) <= 0 ||
      std::string(target).rfind("/memfd:", 0) != 0) {
    return hostile_fail(c, fmt::format("the segment descriptor is {}, not a memfd", target));
  }
  const std::string pid = fmt::format(".{}", ::getpid());
  if (DIR* dir = ::opendir("/dev/shm")) {
    while (const dirent* e = ::readdir(dir)) {
      const std::string name = e->d_name;
      if (name.rfind("nodecomm.", 0) == 0 && name.size() > pid.size() &&
          name.compare(name.size() - pid.size(), pid.size(), pid) == 0) {
        ::closedir(dir);
        return hostile_fail(c, "a segment name in /dev/shm: " + name);
      }
    }
    ::closedir(dir);
  }
  std::printf("hostile_client: the segment is %s; no name in /dev/shm\n", target);
  if (!c.join()) return hostile_fail(c, "join after the resize attempts: " + c.error);
  if (int bad = raw_world_allreduce(c, 1, 1)) return bad;
  // Again on the live, mapped segment, between operations.
  errno = 0;
  if (!refused_eperm(::ftruncate(fd, 0))) {
    return hostile_fail(c, "ftruncate to 0 of the mapped segment was not refused with EPERM");
  }
  if (int bad = raw_world_allreduce(c, 2, 2)) return bad;
  // Punching a hole is not resizing: the seals allow it (only write seals would forbid it, and
  // the client must write). The daemon's next touch gets fresh zero pages, never a SIGBUS.
  const uint64_t arena_offset = static_cast<uint64_t>(reinterpret_cast<uint8_t*>(c.arena) -
                                                      static_cast<uint8_t*>(c.segment.base()));
  if (::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(arena_offset),
                  static_cast<off_t>(c.arena_bytes)) != 0) {
    return hostile_fail(c, fmt::format("punching a hole in the arena: {}", std::strerror(errno)));
  }
  std::printf("hostile_client: punched a hole over its %llu-byte arena\n",
              static_cast<unsigned long long>(c.arena_bytes));
  if (int bad = raw_world_allreduce(c, 3, 3)) return bad;
  std::printf("hostile_client: three world allreduces exact after the resize attempts\n");
  c.bye();
  return 0;
}

proto::RegisterReply register_fd(RawClient& c, int fd, uint64_t bytes) {
  proto::Register request{};
  request.type = static_cast<uint32_t>(proto::ControlType::kRegister);
  request.bytes = bytes;
  proto::RegisterReply reply{};
  reply.status = -1;
  size_t size = 0;
  if (ipc::send_message(c.fd.get(), &request, sizeof(request), fd) != ipc::IoResult::kOk ||
      ipc::recv_message_timed(c.fd.get(), &reply, sizeof(reply), size,
                              static_cast<int>(timeout_sec() * 1000)) != ipc::IoResult::kOk ||
      size != sizeof(reply)) {
    reply.status = -1;
    ipc::copy_text(reply.message, "no reply");
  }
  return reply;
}

// A world allreduce in place at the start of registered region `region` (mapped here at `at`).
int region_world_allreduce(RawClient& c, void* at, uint32_t region, int64_t round, uint64_t seq) {
  auto* buf = static_cast<int64_t*>(at);
  for (uint64_t i = 0; i < kWorldCount; ++i) buf[i] = world_value(round, c.world_rank, i);
  OpDescriptor d = make_desc(Collective::kAllreduce, DType::kI64, RedOp::kSum, 0, seq, kWorldCount,
                             proto::region_offset(region, 0), proto::region_offset(region, 0));
  d.flags = proto::kOpFlagInPlace;
  if (!c.post(d)) return hostile_fail(c, "cannot post a world allreduce");
  Completion done{};
  if (c.next(done, timeout_sec()) != RawClient::Next::kCompletion || done.status != 0) {
    return hostile_fail(c, fmt::format("world allreduce from region {}: {}", region,
                                       ipc::bounded_text(done.message)));
  }
  for (uint64_t i = 0; i < kWorldCount; ++i) {
    if (buf[i] != world_sum(round, c.world_size, static_cast<int64_t>(i))) {
      return hostile_fail(
          c, fmt::format("world allreduce from region {}: element {} is {}", region, i, buf[i]));
    }
  }
  return 0;
}

int attack_region_files(RawClient& c) {
  if (!c.join()) return hostile_fail(c, "join: " + c.error);
  constexpr uint64_t kBytes = 2 << 20;
  // 1. A file on disk (the working directory: the build tree).
  char path[] = "hostile_segments.XXXXXX";
  const int disk = ::mkstemp(path);
  struct statfs fs {};
  if (disk < 0 || ::fstatfs(disk, &fs) != 0 || ::ftruncate(disk, kBytes) != 0) {
    return hostile_fail(c, "cannot make a file in the working directory");
  }
  ::unlink(path);
  if (fs.f_type == TMPFS_MAGIC) {
    std::printf("hostile_client: the working directory is on tmpfs: no disk file to try\n");
  } else {
    const proto::RegisterReply r = register_fd(c, disk, kBytes);
    const std::string text = ipc::bounded_text(r.message);
    if (r.status != static_cast<int32_t>(Status::kInvalidArgument) ||
        !contains(text, "not a file on shared memory")) {
      return hostile_fail(c, fmt::format("a disk file (filesystem {:#x}): expected 'not a file "
                                         "on shared memory', got status {}: {}",
                                         static_cast<unsigned long>(fs.f_type), r.status, text));
    }
    std::printf("hostile_client: a disk file (filesystem %#lx) refused as expected: %s\n",
                static_cast<unsigned long>(fs.f_type), text.c_str());
  }
  ::close(disk);
  // 2. A sealable memfd: the daemon seals it against shrinking.
  const int sealable = ::memfd_create("hostile-sealable", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (sealable < 0 || ::ftruncate(sealable, kBytes) != 0) return hostile_fail(c, "memfd");
  void* a = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, sealable, 0);
  const proto::RegisterReply ra = register_fd(c, sealable, kBytes);
  if (a == MAP_FAILED || ra.status != 0) {
    return hostile_fail(c, "register a sealable memfd: " + ipc::bounded_text(ra.message));
  }
  const int seals = ::fcntl(sealable, F_GET_SEALS);
  errno = 0;
  const int shrink = ::ftruncate(sealable, 0);
  if ((seals & F_SEAL_SHRINK) == 0 || !refused_eperm(shrink)) {
    return hostile_fail(c, fmt::format("after registration the memfd's seals are {:#x} and "
                                       "ftruncate to 0 returned {} ({})",
                                       seals, shrink, std::strerror(errno)));
  }
  std::printf(
      "hostile_client: the daemon sealed the registered memfd (seals %#x); ftruncate "
      "fails with EPERM\n",
      seals);
  // It may still grow: only shrinking endangers the daemon.
  if (::ftruncate(sealable, 2 * kBytes) != 0) return hostile_fail(c, "growing the memfd failed");
  if (int bad = region_world_allreduce(c, a, ra.region, 1, 1)) return bad;
  // 3. A /dev/shm file, as PyTorch shares storages: unsealable, guarded.
  const std::string shm = fmt::format("/nodecomm-hostile-segments.{}", ::getpid());
  const int file = ::shm_open(shm.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ::shm_unlink(shm.c_str());
  if (file < 0 || ::ftruncate(file, kBytes) != 0) return hostile_fail(c, "shm_open");
  void* b = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, file, 0);
  const proto::RegisterReply rb = register_fd(c, file, kBytes);
  if (b == MAP_FAILED || rb.status != 0) {
    return hostile_fail(c, "register a /dev/shm file: " + ipc::bounded_text(rb.message));
  }
  std::printf("hostile_client: a /dev/shm file registered (seals %#x: unsealable, guarded)\n",
              ::fcntl(file, F_GET_SEALS));
  if (int bad = region_world_allreduce(c, b, rb.region, 2, 2)) return bad;
  if (int bad = raw_world_allreduce(c, 3, 3)) return bad;
  std::printf("hostile_client: world allreduces from both regions and the arena exact\n");
  c.bye();
  return 0;
}

// ---------------------------------------------------------------------------------------------

int fail_rank(int rank, const std::string& what) {
  std::fprintf(stderr, "hostile_segments (rank %d): %s\n", rank, what.c_str());
  return 1;
}

// nc_init for `job`, retried while the daemon still serves the previous job (its other ranks
// may not have finalized yet).
nc_context_t* init_job(const std::string& job) {
  nc_init_options_t opts;
  nc_init_options_default(&opts);
  opts.timeout_sec = timeout_sec();
  opts.job = job.c_str();
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_sec());
  for (;;) {
    nc_context_t* ctx = nullptr;
    const nc_status_t s = nc_init(&opts, &ctx);
    if (s == NC_OK) return ctx;
    const std::string text = nc_last_error();
    if (!contains(text, "must wait until it ends") || Clock::now() >= deadline) {
      std::fprintf(stderr, "hostile_segments: nc_init for job %s: %s\n", job.c_str(), text.c_str());
      return nullptr;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

int world_round(nc_context_t* ctx, int64_t round) {
  const int rank = nc_world_rank(ctx);
  const int size = nc_world_size(ctx);
  int64_t* buf = nullptr;
  if (nc_alloc(ctx, kWorldCount * sizeof(int64_t), reinterpret_cast<void**>(&buf)) != NC_OK) {
    return fail_rank(rank, nc_last_error());
  }
  for (uint64_t i = 0; i < kWorldCount; ++i) buf[i] = world_value(round, rank, i);
  nc_request_t req = 0;
  nc_status_t s =
      nc_allreduce(ctx, buf, buf, kWorldCount, NC_I64, NC_SUM, NC_COMM_WORLD, nullptr, &req);
  if (s == NC_OK) s = nc_wait(ctx, req);
  int bad = 0;
  if (s != NC_OK) {
    bad = fail_rank(rank, fmt::format("world allreduce round {}: {}", round, nc_last_error()));
  }
  for (uint64_t i = 0; i < kWorldCount && bad == 0; ++i) {
    if (buf[i] != world_sum(round, size, static_cast<int64_t>(i))) {
      bad = fail_rank(rank, fmt::format("world allreduce round {} element {} is {}, expected {}",
                                        round, i, buf[i], world_sum(round, size, i)));
    }
  }
  nc_free(ctx, buf);
  return bad;
}

bool daemon_alive() {
  std::ifstream in(env_or("NODECOMM_RUNTIME_DIR", "") + "/nodecommd.ready");
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const size_t at = text.find("\"pid\":");
  if (at == std::string::npos) return false;
  const long pid = std::strtol(text.c_str() + at + 6, nullptr, 10);
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string pid_field, comm, state;
  stat >> pid_field >> comm >> state;
  return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) == 0 && !state.empty() && state != "Z";
}

// The second job on the same daemons: every rank, through libnodecomm.
int second_job(const std::string& mode) {
  nc_context_t* ctx = init_job(env_or("NODECOMM_JOB", "default") + std::string(".again"));
  if (ctx == nullptr) return 1;
  int bad = world_round(ctx, 11) + world_round(ctx, 12);
  if (bad == 0) {
    std::printf("hostile_segments %s: rank %d: a later job on the same daemons is exact\n",
                mode.c_str(), nc_world_rank(ctx));
  }
  nc_finalize(ctx);
  return bad == 0 ? 0 : 1;
}

int good_main(const std::string& mode) {
  nc_context_t* ctx = init_job(env_or("NODECOMM_JOB", "default"));
  if (ctx == nullptr) return 1;
  const int rank = nc_world_rank(ctx);
  int bad = world_round(ctx, 1) + world_round(ctx, 2) + world_round(ctx, 3);
  if (!daemon_alive()) bad += fail_rank(rank, "its nodecommd is not running");
  if (bad == 0) {
    std::printf("hostile_segments %s: good rank %d got exact results; its daemon is alive\n",
                mode.c_str(), rank);
  }
  nc_finalize(ctx);
  return bad == 0 ? second_job(mode) : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc == 2 ? argv[1] : "";
  if (mode != "resize" && mode != "regions") {
    std::fprintf(stderr, "usage: hostile_segments resize|regions\n");
    return 2;
  }
  const int local_rank = std::atoi(env_or("NODECOMM_LOCAL_RANK", "0").c_str());
  const int local_size = std::atoi(env_or("NODECOMM_LOCAL_SIZE", "1").c_str());
  if (env_or("NODECOMM_NODE", "0") == "0" && local_size < 2) {
    std::fprintf(stderr, "hostile_segments: node 0 needs at least 2 ranks (one hostile)\n");
    return 2;
  }
  const bool hostile = env_or("NODECOMM_NODE", "0") == "0" && local_rank == local_size - 1;
  if (!hostile) return good_main(mode);
  RawClient c;
  if (!c.hello()) {
    std::fprintf(stderr, "hostile_segments (hostile): hello failed: %s\n", c.error.c_str());
    return 1;
  }
  const int bad = mode == "resize" ? attack_resize(c) : attack_region_files(c);
  if (bad != 0) return bad;
  c.fd.reset();  // gone from this job, so that the daemon can end it
  return second_job(mode);
}
