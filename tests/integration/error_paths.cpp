// Error paths run under nodecomm-launch. Each mode makes the ranks misbehave in one way and
// exits 0 only if every rank saw the error it should, with a message naming the culprit.
//
//   error_paths mismatch     ranks post different counts for the same sequence number
//   error_paths mismatch-split  rank 0 splits the world while the others allreduce on it
//   error_paths peer-exit    the last rank exits without finalizing while the others wait
//   error_paths stall        the last rank posts 4 s late; with --stall-sec 1 --op-timeout-sec 2
//                            the others' allreduce fails with a timeout naming it
//   error_paths remote-kill  the last rank SIGKILLs itself; every other rank, on every node,
//                            gets NC_ERR_PEER_LOST naming it within 5 seconds
//   error_paths local-checks bad arguments are refused by the library before reaching the daemon
//   error_paths requests     256 operations in flight, refusal past the limit, wait_any/wait_all
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "nodecomm.h"

namespace {

int expect(bool ok, int rank, const char* what, const char* detail) {
  if (ok) return 0;
  std::fprintf(stderr, "error_paths rank %d: expected %s; got: %s\n", rank, what, detail);
  return 1;
}

bool contains(const char* text, const char* words) {
  return std::strstr(text, words) != nullptr;
}

int mismatch(nc_context_t* ctx) {
  const int rank = nc_world_rank(ctx);
  float* buf = nullptr;
  if (nc_alloc(ctx, 64 * sizeof(float), reinterpret_cast<void**>(&buf)) != NC_OK) return 1;
  const size_t count = rank == 0 ? 7 : 8;  // rank 0 disagrees with everyone else
  nc_request_t req = 0;
  if (nc_allreduce(ctx, buf, buf, count, NC_F32, NC_SUM, NC_COMM_WORLD, nullptr, &req) != NC_OK) {
    return expect(false, rank, "a posted allreduce", nc_last_error());
  }
  const nc_status_t s = nc_wait(ctx, req);
  int bad = expect(s == NC_ERR_MISMATCH, rank, "NC_ERR_MISMATCH", nc_status_string(s));
  // Within a node each rank is listed ("rank 0 posted ..."); between nodes each node with
  // its ranks ("node 0 (ranks 0,1) posted ...").
  bad += expect(contains(nc_last_error(), "0 posted allreduce f32 sum count 7") ||
                    contains(nc_last_error(), "0) posted allreduce f32 sum count 7"),
                rank, "the message to list rank 0's submission", nc_last_error());
  bad += expect(contains(nc_last_error(), "posted allreduce f32 sum count 8"), rank,
                "the message to list the others' submission", nc_last_error());
  // The communicator is unusable after a mismatch: later operations fail at once, not hang.
  if (nc_allreduce(ctx, buf, buf, 4, NC_F32, NC_SUM, NC_COMM_WORLD, nullptr, &req) == NC_OK) {
    const nc_status_t s2 = nc_wait(ctx, req);
    bad += expect(s2 == NC_ERR_MISMATCH, rank, "later operations to fail too", nc_last_error());
  }
  return bad;
}

// Rank 0 calls nc_comm_split (a management operation, which nothing overtakes) for the same
// sequence number at which the others post an allreduce: all must get NC_ERR_MISMATCH
// naming both, within the test's timeout, and not hang.
int mismatch_split(nc_context_t* ctx) {
  const int rank = nc_world_rank(ctx);
  nc_status_t s = NC_OK;
  if (rank == 0) {
    nc_comm_t half = NC_COMM_NULL;
    s = nc_comm_split(ctx, NC_COMM_WORLD, 0, 0, &half);
  } else {
    float* buf = nullptr;
    if (nc_alloc(ctx, 16 * sizeof(float), reinterpret_cast<void**>(&buf)) != NC_OK) return 1;
    nc_request_t req = 0;
    if (nc_allreduce(ctx, buf, buf, 16, NC_F32, NC_SUM, NC_COMM_WORLD, nullptr, &req) != NC_OK) {
      return expect(false, rank, "a posted allreduce", nc_last_error());
    }
    s = nc_wait(ctx, req);
  }
  int bad = expect(s == NC_ERR_MISMATCH, rank, "NC_ERR_MISMATCH", nc_last_error());
  bad += expect(contains(nc_last_error(), "posted comm_split"), rank,
                "the message to list rank 0's split", nc_last_error());
  bad += expect(contains(nc_last_error(), "posted allreduce f32 sum count 16"), rank,
                "the message to list the others' allreduce", nc_last_error());
  return bad;
}

int peer_exit(nc_context_t* ctx) {
  const int rank = nc_world_rank(ctx);
  const int size = nc_world_size(ctx);
  if (rank == size - 1) _exit(0);  // vanish without finalize
  double* buf = nullptr;
  if (nc_alloc(ctx, 16 * sizeof(double), reinterpret_cast<void**>(&buf)) != NC_OK) return 1;
  nc_request_t req = 0;
  if (nc_allreduce(ctx, buf, buf, 16, NC_F64, NC_SUM, NC_COMM_WORLD, nullptr, &req) != NC_OK) {
    return expect(false, rank, "a posted allreduce", nc_last_error());
  }
  const nc_status_t s = nc_wait(ctx, req);
  if (nc_node_index(ctx) != nc_node_count(ctx) - 1) {
    // Ranks on other nodes: their daemon cannot know yet (cross-node failure propagation
    // is the reliability issue's work); they time out instead of hanging.
    return expect(s == NC_ERR_TIMEOUT || s == NC_ERR_PEER_LOST, rank, "timeout or peer lost",
                  nc_last_error());
  }
  int bad = expect(s == NC_ERR_PEER_LOST, rank, "NC_ERR_PEER_LOST", nc_status_string(s));
  const std::string lost = "rank " + std::to_string(size - 1);
  bad += expect(contains(nc_last_error(), lost.c_str()), rank, "the lost rank to be named",
                nc_last_error());
  return bad;
}

double now_sec() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// A 16-element arena buffer and one good allreduce on it, so that every daemon is in the
// running job before a test kills something. Non-zero on failure.
int first_allreduce(nc_context_t* ctx, double** buf) {
  if (nc_alloc(ctx, 16 * sizeof(double), reinterpret_cast<void**>(buf)) != NC_OK) return 1;
  nc_request_t req = 0;
  if (nc_allreduce(ctx, *buf, *buf, 16, NC_F64, NC_SUM, NC_COMM_WORLD, nullptr, &req) != NC_OK ||
      nc_wait(ctx, req) != NC_OK) {
    return expect(false, nc_world_rank(ctx), "a first allreduce to succeed", nc_last_error());
  }
  return 0;
}

int remote_kill(nc_context_t* ctx) {
  const int rank = nc_world_rank(ctx);
  const int size = nc_world_size(ctx);
  double* buf = nullptr;
  if (int bad = first_allreduce(ctx, &buf)) return bad;
  nc_request_t req = 0;
  if (rank == size - 1) {
    usleep(200 * 1000);  // let the others post and wait
    kill(getpid(), SIGKILL);
  }
  const double start = now_sec();
  if (nc_allreduce(ctx, buf, buf, 16, NC_F64, NC_SUM, NC_COMM_WORLD, nullptr, &req) != NC_OK) {
    return expect(false, rank, "a posted allreduce", nc_last_error());
  }
  const nc_status_t s = nc_wait(ctx, req);
  const double waited = now_sec() - start;
  int bad = expect(s == NC_ERR_PEER_LOST, rank, "NC_ERR_PEER_LOST", nc_last_error());
  const std::string lost = "rank " + std::to_string(size - 1);
  bad += expect(contains(nc_last_error(), lost.c_str()), rank, "the lost rank to be named",
                nc_last_error());
  bad += expect(waited < 5.0, rank, "the error within 5 s", std::to_string(waited).c_str());
  std::printf("error_paths rank %d (node %d): told in %.2f s: %s\n", rank, nc_node_index(ctx),
              waited, nc_last_error());
  return bad;
}

// The pid of this rank's daemon, from the ready file in its runtime directory.
pid_t daemon_pid() {
  const char* dir = std::getenv("NODECOMM_RUNTIME_DIR");
  if (dir == nullptr) return -1;
  const std::string path = std::string(dir) + "/nodecommd.ready";
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return -1;
  char text[512] = {};
  const size_t n = std::fread(text, 1, sizeof(text) - 1, f);
  std::fclose(f);
  text[n] = '\0';
  const char* at = std::strstr(text, "\"pid\":");
  return at == nullptr ? -1 : static_cast<pid_t>(std::atol(at + 6));
}

// The last node's daemon is SIGKILLed mid-job: its ranks get NC_ERR_DAEMON_LOST naming it,
// and the other nodes' ranks an error naming the lost node, all within 5 s.
int daemon_kill(nc_context_t* ctx) {
  const int rank = nc_world_rank(ctx);
  const int node = nc_node_index(ctx);
  const int last = nc_node_count(ctx) - 1;
  double* buf = nullptr;
  if (int bad = first_allreduce(ctx, &buf)) return bad;
  nc_request_t req = 0;
  if (node == last && nc_local_rank(ctx) == 0) {
    const pid_t pid = daemon_pid();
    if (pid <= 0) return expect(false, rank, "the daemon's pid in its ready file", "none");
    usleep(200 * 1000);  // let the others post and wait
    std::printf("error_paths rank %d: SIGKILL to daemon pid %d of node %d\n", rank, pid, node);
    std::fflush(stdout);
    kill(pid, SIGKILL);
  }
  const double start = now_sec();
  nc_status_t s = nc_allreduce(ctx, buf, buf, 16, NC_F64, NC_SUM, NC_COMM_WORLD, nullptr, &req);
  if (s == NC_OK) s = nc_wait(ctx, req);
  const double waited = now_sec() - start;
  int bad = 0;
  if (node == last) {
    bad += expect(s == NC_ERR_DAEMON_LOST, rank, "NC_ERR_DAEMON_LOST", nc_last_error());
  } else {
    const std::string lost = "node " + std::to_string(last);
    bad += expect(s == NC_ERR_PEER_LOST, rank, "NC_ERR_PEER_LOST", nc_last_error());
    bad += expect(contains(nc_last_error(), lost.c_str()), rank, "the lost node to be named",
                  nc_last_error());
  }
  bad += expect(waited < 5.0, rank, "the error within 5 s", std::to_string(waited).c_str());
  std::printf("error_paths rank %d (node %d): told in %.2f s: %s\n", rank, node, waited,
              nc_last_error());
  return bad;
}

// The last rank stops itself (SIGSTOP) mid-job, alive but wedged: its daemon misses its
// heartbeat and every other rank, on every node, gets NC_ERR_PEER_LOST naming it within 5 s.
// A child of the stopped rank SIGKILLs it 8 s later, so the job ends.
int wedged(nc_context_t* ctx) {
  const int rank = nc_world_rank(ctx);
  const int size = nc_world_size(ctx);
  double* buf = nullptr;
  if (int bad = first_allreduce(ctx, &buf)) return bad;
  if (rank == size - 1) {
    const pid_t self = getpid();
    if (fork() == 0) {
      sleep(8);
      kill(self, SIGKILL);
      _exit(0);
    }
    usleep(200 * 1000);  // let the others post and wait
    raise(SIGSTOP);
  }
  const double start = now_sec();
  nc_request_t req = 0;
  nc_status_t s = nc_allreduce(ctx, buf, buf, 16, NC_F64, NC_SUM, NC_COMM_WORLD, nullptr, &req);
  if (s == NC_OK) s = nc_wait(ctx, req);
  const double waited = now_sec() - start;
  const std::string lost = "rank " + std::to_string(size - 1);
  int bad = expect(s == NC_ERR_PEER_LOST, rank, "NC_ERR_PEER_LOST", nc_last_error());
  bad += expect(
      contains(nc_last_error(), lost.c_str()) && contains(nc_last_error(), "sent no heartbeat"),
      rank, "the wedged rank to be named", nc_last_error());
  bad += expect(waited < 5.0, rank, "the error within 5 s", std::to_string(waited).c_str());
  std::printf("error_paths rank %d (node %d): told in %.2f s: %s\n", rank, nc_node_index(ctx),
              waited, nc_last_error());
  return bad;
}

int stall(nc_context_t* ctx) {
  const int rank = nc_world_rank(ctx);
  const int size = nc_world_size(ctx);
  double* buf = nullptr;
  if (nc_alloc(ctx, 16 * sizeof(double), reinterpret_cast<void**>(&buf)) != NC_OK) return 1;
  if (rank == size - 1) sleep(4);
  nc_request_t req = 0;
  if (nc_allreduce(ctx, buf, buf, 16, NC_F64, NC_SUM, NC_COMM_WORLD, nullptr, &req) != NC_OK) {
    return expect(false, rank, "a posted allreduce", nc_last_error());
  }
  const nc_status_t s = nc_wait(ctx, req);
  if (rank == size - 1) return 0;  // late: its operation fails one way or another
  int bad = expect(s == NC_ERR_TIMEOUT, rank, "NC_ERR_TIMEOUT", nc_last_error());
  const std::string late = "not yet by ranks " + std::to_string(size - 1);
  bad += expect(contains(nc_last_error(), "operation timeout") &&
                    (contains(nc_last_error(), late.c_str()) || nc_node_count(ctx) > 1),
                rank, "the timeout to name the late rank", nc_last_error());
  return bad;
}

int local_checks(nc_context_t* ctx) {
  const int rank = nc_world_rank(ctx);
  int bad = 0;
  nc_request_t req = 0;
  float x = 0;
  bad += expect(nc_allreduce(ctx, &x, &x, 1, static_cast<nc_dtype_t>(99), NC_SUM, NC_COMM_WORLD,
                             nullptr, &req) == NC_ERR_INVALID_ARGUMENT,
                rank, "unknown dtype refused", nc_last_error());
  int32_t i = 0;
  bad += expect(nc_allreduce(ctx, &i, &i, 1, NC_I32, NC_AVG, NC_COMM_WORLD, nullptr, &req) ==
                    NC_ERR_INVALID_ARGUMENT,
                rank, "avg on i32 refused", nc_last_error());
  bad += expect(contains(nc_last_error(), "avg"), rank, "message naming avg", nc_last_error());
  void* p = nullptr;
  bad += expect(nc_alloc(ctx, size_t{1} << 40, &p) == NC_ERR_NO_MEMORY, rank,
                "oversized nc_alloc refused", nc_last_error());
  bad += expect(nc_free(ctx, &x) == NC_ERR_INVALID_ARGUMENT, rank, "foreign nc_free refused",
                nc_last_error());
  bad += expect(nc_test(ctx, 12345) == NC_ERR_INVALID_ARGUMENT, rank, "unknown request refused",
                nc_last_error());
  bad += expect(nc_wait(ctx, 0) == NC_ERR_INVALID_ARGUMENT, rank, "waiting on request 0 refused",
                nc_last_error());
  // A valid operation still works afterwards: refusals did not consume sequence numbers.
  float* buf = nullptr;
  if (nc_alloc(ctx, sizeof(float), reinterpret_cast<void**>(&buf)) != NC_OK) return bad + 1;
  *buf = 1.0f;
  if (nc_allreduce(ctx, buf, buf, 1, NC_F32, NC_SUM, NC_COMM_WORLD, nullptr, &req) != NC_OK ||
      nc_wait(ctx, req) != NC_OK) {
    return bad + expect(false, rank, "a good allreduce after refusals", nc_last_error());
  }
  bad += expect(*buf == static_cast<float>(nc_world_size(ctx)), rank, "the right sum", "wrong sum");
  return bad;
}

// 256 operations in flight (the default ring capacity), a clear refusal past that, then
// nc_wait_any and nc_wait_all complete them with exact results.
int requests(nc_context_t* ctx) {
  const int rank = nc_world_rank(ctx);
  const int size = nc_world_size(ctx);
  constexpr size_t kInFlight = 256;
  int64_t* buf = nullptr;
  if (nc_alloc(ctx, kInFlight * sizeof(int64_t), reinterpret_cast<void**>(&buf)) != NC_OK) return 1;
  nc_request_t reqs[kInFlight];
  for (size_t i = 0; i < kInFlight; ++i) {
    buf[i] = static_cast<int64_t>(i) * (rank + 1);
    if (nc_allreduce(ctx, &buf[i], &buf[i], 1, NC_I64, NC_SUM, NC_COMM_WORLD, nullptr, &reqs[i]) !=
        NC_OK) {
      return expect(false, rank, "256 operations in flight", nc_last_error());
    }
  }
  nc_request_t extra = 0;
  int bad = expect(nc_allreduce(ctx, buf, buf, 1, NC_I64, NC_SUM, NC_COMM_WORLD, nullptr, &extra) ==
                       NC_ERR_QUEUE_FULL,
                   rank, "NC_ERR_QUEUE_FULL past the limit", nc_last_error());
  bad += expect(contains(nc_last_error(), "in flight"), rank, "a message about the limit",
                nc_last_error());
  size_t index = kInFlight;
  bad += expect(
      nc_wait_any(ctx, kInFlight, reqs, &index) == NC_OK && index < kInFlight && reqs[index] == 0,
      rank, "nc_wait_any to complete one request", nc_last_error());
  nc_status_t statuses[kInFlight];
  bad += expect(nc_wait_all(ctx, kInFlight, reqs, statuses) == NC_OK, rank,
                "nc_wait_all to complete the rest", nc_last_error());
  const int64_t ranks_sum = static_cast<int64_t>(size) * (size + 1) / 2;
  for (size_t i = 0; i < kInFlight; ++i) {
    if (buf[i] != static_cast<int64_t>(i) * ranks_sum) {
      bad += expect(false, rank, "exact sums after wait_all", "a wrong element");
      break;
    }
    if (reqs[i] != 0) {
      bad += expect(false, rank, "every request released", "a request left non-zero");
      break;
    }
  }
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr,
                 "usage: error_paths "
                 "mismatch|mismatch-split|peer-exit|remote-kill|daemon-kill|wedged|stall|local-"
                 "checks|requests\n");
    return 2;
  }
  nc_init_options_t opts;
  nc_init_options_default(&opts);
  if (std::strcmp(argv[1], "peer-exit") == 0) opts.timeout_sec = 8;
  if (std::strcmp(argv[1], "remote-kill") == 0 || std::strcmp(argv[1], "daemon-kill") == 0 ||
      std::strcmp(argv[1], "wedged") == 0) {
    opts.timeout_sec = 30;  // must not be the cause
  }
  nc_context_t* ctx = nullptr;
  if (nc_init(&opts, &ctx) != NC_OK) {
    std::fprintf(stderr, "error_paths: nc_init: %s\n", nc_last_error());
    return 1;
  }
  int bad = 0;
  if (std::strcmp(argv[1], "mismatch") == 0) {
    bad = mismatch(ctx);
  } else if (std::strcmp(argv[1], "mismatch-split") == 0) {
    bad = mismatch_split(ctx);
  } else if (std::strcmp(argv[1], "peer-exit") == 0) {
    bad = peer_exit(ctx);
  } else if (std::strcmp(argv[1], "remote-kill") == 0) {
    bad = remote_kill(ctx);
  } else if (std::strcmp(argv[1], "daemon-kill") == 0) {
    bad = daemon_kill(ctx);
  } else if (std::strcmp(argv[1], "wedged") == 0) {
    bad = wedged(ctx);
  } else if (std::strcmp(argv[1], "stall") == 0) {
    bad = stall(ctx);
  } else if (std::strcmp(argv[1], "requests") == 0) {
    bad = requests(ctx);
  } else if (std::strcmp(argv[1], "local-checks") == 0) {
    bad = local_checks(ctx);
  } else {
    std::fprintf(stderr, "error_paths: unknown mode %s\n", argv[1]);
    bad = 2;
  }
  if (bad == 0)
    std::printf("error_paths %s: rank %d saw the expected errors\n", argv[1], nc_world_rank(ctx));
  nc_finalize(ctx);
  return bad == 0 ? 0 : 1;
}
