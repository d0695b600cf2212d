// Late messages in a communicator one process left must not reach the next communicator (the
// MPI transport's CommRetirement, daemon/mpi/comm_retirement.hpp). Two MPI processes:
//   1. both use communicator A; process 1 is done with it and lets it go (retires it, or with
//      --free frees it, as the daemons did before);
//   2. process 0 still sends kLate messages in A, then frees it;
//   3. both make B and process 0 sends kCount numbered messages in it: process 1 must receive
//      each, in order, each within 2 s;
//   4. process 1 waits until A, quiet, is freed (after dropping the kLate messages), then both
//      make C, which may now take A's context id, and it must be as exact as B.
// With --free, Open MPI gives B A's context id and hands it the late messages, whose sequence
// numbers then push B's own aside: B's receives get later messages' values, then nothing.
//   mpirun -np 2 comm_retirement_check [--free]
// Exit 0 when B and C are exact (and, with retirement, A was drained and freed), 1 otherwise.
#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "mpi/comm_retirement.hpp"
#include "mpi/mpi_common.hpp"
#include "nodecomm/ipc/clock.hpp"

namespace {

using nodecomm::daemon::CommRetirement;
using nodecomm::ipc::monotonic_ns;

constexpr int kLate = 10;
constexpr int kCount = 40;
constexpr int kLateTag = 7;
constexpr int kTag = 9;
constexpr uint64_t kQuietNs = 500'000'000;
constexpr uint64_t kReceiveNs = 2'000'000'000;

// Process 0 sends 0..kCount-1 in `comm`; process 1 checks them. Returns what went wrong ("" if
// nothing), at process 1. Each receive is completed by MPI_Test, or cancelled and freed at its
// deadline.
// NOLINTBEGIN(clang-analyzer-optin.mpi.MPI-Checker)
std::string numbered(MPI_Comm comm, int rank, const char* name) {
  for (int i = 0; i < kCount; ++i) {
    if (rank == 0) {
      MPI_Send(&i, 1, MPI_INT, 1, kTag, comm);
      continue;
    }
    int got = -1;
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_Irecv(&got, 1, MPI_INT, 0, kTag, comm, &request);
    int done = 0;
    const uint64_t give_up = monotonic_ns() + kReceiveNs;
    while (done == 0 && monotonic_ns() < give_up) MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done == 0) {
      MPI_Cancel(&request);
      MPI_Request_free(&request);
      return fmt::format("{}: message {} of {} never came (2 s)", name, i, kCount);
    }
    if (got != i) return fmt::format("{}: message {} carried {}", name, i, got);
  }
  return {};
}
// NOLINTEND(clang-analyzer-optin.mpi.MPI-Checker)

}  // namespace

int main(int argc, char** argv) {
  const bool plain_free = argc > 1 && std::strcmp(argv[1], "--free") == 0;
  MPI_Init(&argc, &argv);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (rank == 0) fmt::print(stderr, "comm_retirement_check: run it with 2 processes\n");
    MPI_Finalize();
    return 2;
  }
  CommRetirement retirement;
  // 1. A in use by both, then let go by process 1.
  MPI_Comm a = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &a);
  for (int i = 0; i < 5; ++i) {
    int v = i;
    if (rank == 0) MPI_Send(&v, 1, MPI_INT, 1, kLateTag, a);
    if (rank == 1) MPI_Recv(&v, 1, MPI_INT, 0, kLateTag, a, MPI_STATUS_IGNORE);
  }
  if (rank == 1) {
    if (plain_free) {
      MPI_Comm_free(&a);
    } else {
      retirement.retire(a, monotonic_ns(), kQuietNs);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  // 2. Process 0's late messages in A.
  if (rank == 0) {
    for (int i = 0; i < kLate; ++i) {
      int v = 1000 + i;
      MPI_Send(&v, 1, MPI_INT, 1, kLateTag, a);
    }
    MPI_Comm_free(&a);
  }
  // Process 1 keeps its loop going meanwhile, as the daemon's.
  const uint64_t until = monotonic_ns() + 200'000'000;
  while (monotonic_ns() < until) {
    retirement.tend(monotonic_ns());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  // 3. B.
  MPI_Comm b = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &b);
  std::string wrong = numbered(b, rank, "B");
  // 4. A freed once quiet, then C.
  if (rank == 1 && !plain_free && wrong.empty()) {
    const uint64_t give_up = monotonic_ns() + 10 * kQuietNs;
    while (retirement.tend(monotonic_ns()).retired > 0 && monotonic_ns() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (retirement.retired() != 0) {
      wrong = "A was still retired 5 s after its last message";
    } else if (retirement.dropped() != kLate) {
      wrong = fmt::format("{} late messages dropped from A, not {}", retirement.dropped(), kLate);
    }
  }
  // Process 0 must not race ahead into C before process 1 is done with B (a failed B leaves
  // messages that C must not see either way).
  int failed = wrong.empty() ? 0 : 1;
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (failed == 0) {
    MPI_Comm c = MPI_COMM_NULL;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    wrong = numbered(c, rank, "C");
    MPI_Comm_free(&c);
  }
  if (rank == 1) {
    if (wrong.empty()) {
      fmt::print("comm_retirement_check ({}): B and C exact ({} messages each){}\n",
                 plain_free ? "freed" : "retired", kCount,
                 plain_free ? ""
                            : fmt::format("; A drained of {} late messages, then freed",
                                          retirement.dropped()));
    } else {
      fmt::print("comm_retirement_check ({}): {}\n", plain_free ? "freed" : "retired", wrong);
    }
  }
  failed = wrong.empty() ? 0 : 1;
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  // A failed B or C leaves messages unmatched: abort rather than finalize over them.
  if (failed != 0) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Comm_free(&b);
  retirement.free_all();
  MPI_Finalize();
  return 0;
}
