// Abuse of nodecommd's control socket and of its per-client state (issue 16, points 4 and 5),
// spoken by hand with the proto/ipc headers against a real daemon. The daemon's socket is
// $NODECOMM_RUNTIME_DIR/nodecommd.sock; every wait has a timeout (NODECOMM_TIMEOUT_SEC).
//
//   hostile_control silent              connects and says nothing: expects the hello deadline
//                                       to answer NC_ERR_TIMEOUT "sent no hello within"
//   hostile_control no-map              says hello (job $NODECOMM_JOB, 1 rank) and never maps:
//                                       expects NC_ERR_TIMEOUT "did not map its segment"
//   hostile_control no-peer             rank 0 of a 2-rank job that maps and waits for a rank 1
//                                       that never comes: NC_ERR_TIMEOUT "did not form within"
//   hostile_control hold N FILE         holds N connections that say nothing (the daemon must
//                                       keep them all), writes FILE once they are open, and
//                                       exits when FILE is removed
//   hostile_control wake-flood SECONDS  sends wake-up messages without a hello as fast as it
//                                       can, reconnecting whenever dropped, for SECONDS (or
//                                       until SIGTERM); expects to be told "a wake-up message
//                                       before joining a job"
//   hostile_control ahead CAP EXTRA     both ranks of a 2-rank job in one process: rank 0 posts
//                                       CAP + EXTRA allreduces while rank 1 posts nothing.
//                                       Expects seq CAP+1 to fail with NC_ERR_QUEUE_FULL naming
//                                       rank, comm, seq and cap; every other operation on the
//                                       communicator to fail with it too (rank 1's included)
//   hostile_control feedback NAMES ROUNDS  library client (run under nodecomm-launch, 2+ nodes):
//                                       int8-compressed allreduces of NAMES distinct tensors for
//                                       ROUNDS rounds on a split communicator, checked against
//                                       the exact sums within the int8 error bound, then frees
//                                       the communicator and runs an exact world allreduce
//
// Exit status 0 when the daemon answered as expected, 1 otherwise (with the reason on stderr).
#include <fmt/format.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "nodecomm.h"
#include "nodecomm/ipc/fixed_text.hpp"
#include "nodecomm/ipc/socket.hpp"
#include "nodecomm/proto/control.hpp"
#include "raw_client.hpp"

namespace {

using namespace hostile;

std::atomic<bool> g_stop{false};
void on_term(int) {
  g_stop.store(true, std::memory_order_relaxed);
}  // relaxed: a flag only

std::string socket_path() {
  return env_or("NODECOMM_RUNTIME_DIR", "") + "/nodecommd.sock";
}

int fail(const std::string& what) {
  std::fprintf(stderr, "hostile_control: FAILED: %s\n", what.c_str());
  return 1;
}

bool contains(const std::string& text, const std::string& words) {
  return text.find(words) != std::string::npos;
}

// The daemon's parting message on `fd` (a HelloReply or a JobReady): its status and text.
struct Parting {
  bool got = false;
  uint32_t type = 0;
  int32_t status = 0;
  std::string text;
};
Parting read_parting(int fd, double seconds) {
  alignas(8) uint8_t buffer[proto::kMaxControlMessageBytes];
  Parting p;
  size_t size = 0;
  if (ipc::recv_message_timed(fd, buffer, sizeof(buffer), size, static_cast<int>(seconds * 1000)) !=
      ipc::IoResult::kOk) {
    return p;
  }
  if (size == sizeof(proto::HelloReply)) {
    proto::HelloReply r;
    std::memcpy(&r, buffer, sizeof(r));
    p = {true, r.type, r.status, ipc::bounded_text(r.message)};
  } else if (size == sizeof(proto::JobReady)) {
    proto::JobReady r;
    std::memcpy(&r, buffer, sizeof(r));
    p = {true, r.type, r.status, ipc::bounded_text(r.message)};
  }
  return p;
}

int expect_parting(int fd, Status status, const std::string& words, double at_most_sec) {
  const auto start = Clock::now();
  const Parting p = read_parting(fd, at_most_sec);
  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
  if (!p.got) return fail(fmt::format("no answer from nodecommd within {:.1f} s", waited));
  if (p.status != static_cast<int32_t>(status) || !contains(p.text, words)) {
    return fail(fmt::format("expected {} with '{}', got status {}: {}", proto::status_name(status),
                            words, p.status, p.text));
  }
  if (!ipc::peer_closed(fd)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (!ipc::peer_closed(fd)) return fail("the daemon answered but kept the connection");
  }
  std::printf("hostile_control: dropped after %.1f s as expected (%s): %s\n", waited,
              std::string(proto::status_name(status)).c_str(), p.text.c_str());
  return 0;
}

int silent() {
  std::string error;
  ipc::Fd fd = ipc::connect_unix(socket_path(), error);
  if (!fd.valid()) return fail(error);
  return expect_parting(fd.get(), Status::kTimeout, "sent no hello within", timeout_sec());
}

int no_map() {
  RawClient c;
  if (!c.hello()) return fail("hello: " + c.error);
  return expect_parting(c.fd.get(), Status::kTimeout, "did not map its segment", timeout_sec());
}

int no_peer() {
  RawClient c;
  if (!c.hello()) return fail("hello: " + c.error);
  // join() maps and acknowledges, then waits for the job to form: it must fail with the reason.
  if (c.join()) return fail("the job formed without its second rank");
  if (!contains(c.error, "did not form within") || !contains(c.error, "local rank(s) 1")) {
    return fail("expected the attach deadline naming local rank 1, got: " + c.error);
  }
  std::printf("hostile_control: %s\n", c.error.c_str());
  return 0;
}

int hold(int n, const std::string& file) {
  std::vector<ipc::Fd> fds;
  for (int i = 0; i < n; ++i) {
    std::string error;
    fds.push_back(ipc::connect_unix(socket_path(), error));
    if (!fds.back().valid()) return fail(fmt::format("connection {}: {}", i, error));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  for (int i = 0; i < n; ++i) {
    if (ipc::peer_closed(fds[i].get())) {
      const Parting p = read_parting(fds[i].get(), 0.1);
      return fail(fmt::format("connection {} of {} was closed: {}", i + 1, n, p.text));
    }
  }
  if (FILE* f = std::fopen(file.c_str(), "w")) std::fclose(f);
  std::printf("hostile_control: holding %d idle connections\n", n);
  std::fflush(stdout);
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_sec() * 6);
  while (::access(file.c_str(), F_OK) == 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return 0;
}

int wake_flood(double seconds) {
  const proto::Wake w{static_cast<uint32_t>(proto::ControlType::kWake), 0};
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  uint64_t connections = 0;
  uint64_t wakes = 0;
  uint64_t told = 0;
  std::string first;
  while (Clock::now() < end && !g_stop.load(std::memory_order_relaxed)) {
    std::string error;
    ipc::Fd fd = ipc::connect_unix(socket_path(), error);
    if (!fd.valid()) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));  // backlog full: retry
      continue;
    }
    ++connections;
    // Blocking socket: a full socket buffer makes this wait, as a real flooder would.
    while (!g_stop.load(std::memory_order_relaxed) &&
           ::send(fd.get(), &w, sizeof(w), MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof(w))) {
      ++wakes;
      if ((wakes & 1023) == 0 && Clock::now() >= end) break;
    }
    const Parting p = read_parting(fd.get(), 0.05);
    if (p.got) {
      ++told;
      if (first.empty()) first = p.text;
    }
  }
  std::printf(
      "hostile_control wake-flood: %llu connections, %llu wake-ups sent, told why %llu "
      "times: %s\n",
      static_cast<unsigned long long>(connections), static_cast<unsigned long long>(wakes),
      static_cast<unsigned long long>(told), first.c_str());
  if (told == 0 || !contains(first, "a wake-up message before joining a job")) {
    return fail("the flooder was never told it was dropped for its wake-up messages");
  }
  return 0;
}

// Both ranks of a 2-rank job; rank 0 posts far ahead of rank 1.
int ahead(uint64_t cap, uint64_t extra) {
  RawClient ranks[2];
  for (int r = 0; r < 2; ++r) {
    ::setenv("NODECOMM_LOCAL_RANK", std::to_string(r).c_str(), 1);
    ::setenv("NODECOMM_LOCAL_SIZE", "2", 1);
    if (!ranks[r].hello()) return fail(fmt::format("rank {} hello: {}", r, ranks[r].error));
  }
  bool joined[2] = {false, false};
  {
    std::thread t([&] { joined[1] = ranks[1].join(); });
    joined[0] = ranks[0].join();
    t.join();
  }
  if (!joined[0] || !joined[1]) return fail("join: " + ranks[0].error + " " + ranks[1].error);
  RawClient& c = ranks[0];
  const uint64_t total = cap + extra;
  uint64_t posted = 0;
  uint64_t completed = 0;
  uint64_t refused_at_cap = 0;
  std::string cap_text;
  std::string other_text;
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_sec() * 3);
  while (completed < total && Clock::now() < deadline) {
    while (posted < total) {
      OpDescriptor d =
          make_desc(Collective::kAllreduce, DType::kF32, RedOp::kSum, 0, posted + 1, 2, 0, 0);
      d.flags = proto::kOpFlagInPlace;
      if (!c.post(d)) break;  // ring full: take completions first
      ++posted;
    }
    Completion done{};
    while (c.completions.try_pop(done) == ipc::RingResult::kOk) {
      ++completed;
      const std::string text = ipc::bounded_text(done.message);
      if (done.status != static_cast<int32_t>(Status::kQueueFull)) {
        return fail(
            fmt::format("seq {} completed with status {} ('{}'), expected "
                        "NC_ERR_QUEUE_FULL",
                        done.seq, done.status, text));
      }
      if (done.seq == cap + 1) {
        ++refused_at_cap;
        cap_text = text;
      } else if (other_text.empty()) {
        other_text = text;
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  if (completed != total) {
    return fail(fmt::format("{} of {} operations completed before the timeout", completed, total));
  }
  const std::string want[] = {"rank 0 ", fmt::format("seq {} on comm 0", cap + 1),
                              fmt::format("--max-in-flight {}", cap), "posted too far ahead"};
  for (const std::string& w : want) {
    if (refused_at_cap != 1 || !contains(cap_text, w)) {
      return fail(fmt::format("seq {}'s refusal should say '{}': {}", cap + 1, w, cap_text));
    }
  }
  if (!contains(other_text, "not run") || !contains(other_text, "--max-in-flight")) {
    return fail("the other operations should fail naming the limit: " + other_text);
  }
  std::printf("hostile_control ahead: %llu operations posted; seq %llu refused: %s\n",
              static_cast<unsigned long long>(posted), static_cast<unsigned long long>(cap + 1),
              cap_text.c_str());
  // The peer that posted nothing learns why its communicator is gone.
  OpDescriptor d = make_desc(Collective::kAllreduce, DType::kF32, RedOp::kSum, 0, 1, 2, 0, 0);
  d.flags = proto::kOpFlagInPlace;
  if (!ranks[1].post(d)) return fail("rank 1 cannot post");
  Completion done{};
  if (ranks[1].next(done, timeout_sec()) != RawClient::Next::kCompletion) {
    return fail("rank 1's allreduce did not complete");
  }
  const std::string text = ipc::bounded_text(done.message);
  if (done.status != static_cast<int32_t>(Status::kQueueFull) || !contains(text, "rank 0 ") ||
      !contains(text, "--max-in-flight")) {
    return fail(fmt::format("rank 1 got status {}: {}", done.status, text));
  }
  std::printf("hostile_control ahead: rank 1 told: %s\n", text.c_str());
  ranks[0].bye();
  ranks[1].bye();
  return 0;
}

int lib_fail(int rank, const std::string& what) {
  std::fprintf(stderr, "hostile_control feedback (rank %d): %s: %s\n", rank, what.c_str(),
               nc_last_error());
  return 1;
}

// int8 error feedback over many tensor names (the daemons keep at most
// --max-feedback-tensors residuals, dropping the least recently used), then comm_free.
int feedback(int names, int rounds) {
  nc_init_options_t opts;
  nc_init_options_default(&opts);
  opts.timeout_sec = timeout_sec();
  nc_context_t* ctx = nullptr;
  if (nc_init(&opts, &ctx) != NC_OK) return lib_fail(-1, "nc_init");
  const int rank = nc_world_rank(ctx);
  const int size = nc_world_size(ctx);
  nc_comm_t comm = 0;
  if (nc_comm_split(ctx, NC_COMM_WORLD, 0, rank, &comm) != NC_OK) return lib_fail(rank, "split");
  constexpr size_t kCount = 256;
  std::vector<float> buf(kCount);
  for (int round = 0; round < rounds; ++round) {
    for (int t = 0; t < names; ++t) {
      for (size_t i = 0; i < kCount; ++i) {
        buf[i] = std::sin(static_cast<float>(i * 0.37 + t + round * 0.11 + rank));
      }
      const std::string name = fmt::format("feedback.tensor.{}", t);
      nc_op_attr_t attr{0, name.c_str(), NC_COMPRESS_INT8};
      nc_request_t req = 0;
      if (nc_allreduce(ctx, buf.data(), buf.data(), kCount, NC_F32, NC_SUM, comm, &attr, &req) !=
              NC_OK ||
          nc_wait(ctx, req) != NC_OK) {
        return lib_fail(rank, fmt::format("int8 allreduce of {} round {}", name, round));
      }
      // Each node's block is rounded once to 1/127 of its largest value (here at most 1 per
      // rank, so at most nodes' ranks per node in all); the residual carried from the last step
      // adds at most as much again. Bound: 2 * size / 127 per element, checked generously.
      for (size_t i = 0; i < kCount; ++i) {
        double exact = 0;
        for (int r = 0; r < size; ++r) {
          exact += std::sin(static_cast<float>(i * 0.37 + t + round * 0.11 + r));
        }
        if (!(std::fabs(buf[i] - exact) <= 4.0 * size / 127.0)) {
          return lib_fail(rank, fmt::format("{} round {} element {} is {}, exact sum {}", name,
                                            round, i, buf[i], exact));
        }
      }
    }
  }
  if (nc_comm_free(ctx, &comm) != NC_OK) return lib_fail(rank, "comm_free");
  int64_t v = rank + 1;
  nc_request_t req = 0;
  if (nc_allreduce(ctx, &v, &v, 1, NC_I64, NC_SUM, NC_COMM_WORLD, nullptr, &req) != NC_OK ||
      nc_wait(ctx, req) != NC_OK || v != static_cast<int64_t>(size) * (size + 1) / 2) {
    return lib_fail(rank, fmt::format("world allreduce after comm_free gave {}", v));
  }
  nc_finalize(ctx);
  std::printf("hostile_control feedback (rank %d): %d tensors x %d rounds within the int8 bound\n",
              rank, names, rounds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGTERM, on_term);
  const std::string mode = argc >= 2 ? argv[1] : "";
  if (mode == "silent" && argc == 2) return silent();
  if (mode == "no-map" && argc == 2) return no_map();
  if (mode == "no-peer" && argc == 2) return no_peer();
  if (mode == "hold" && argc == 4) return hold(std::atoi(argv[2]), argv[3]);
  if (mode == "wake-flood" && argc == 3) return wake_flood(std::atof(argv[2]));
  if (mode == "ahead" && argc == 4) {
    return ahead(std::strtoull(argv[2], nullptr, 10), std::strtoull(argv[3], nullptr, 10));
  }
  if (mode == "feedback" && argc == 4) return feedback(std::atoi(argv[2]), std::atoi(argv[3]));
  std::fprintf(stderr,
               "usage: hostile_control silent | no-map | no-peer | hold N FILE | wake-flood "
               "SECONDS | ahead CAP EXTRA | feedback NAMES ROUNDS\n");
  return 2;
}
