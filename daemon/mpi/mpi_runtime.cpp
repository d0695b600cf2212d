#include "mpi/mpi_runtime.hpp"

#include <mutex>

#include "mpi/mpi_common.hpp"
#include "net/transport.hpp"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NODECOMM_LSAN 1
#endif
#elif defined(__SANITIZE_ADDRESS__)
#define NODECOMM_LSAN 1
#endif
#ifdef NODECOMM_LSAN
#include <sanitizer/lsan_interface.h>
#endif

namespace nodecomm::daemon {
namespace {

// Open MPI's runtime keeps thousands of process-lifetime allocations from MPI_Init and
// MPI_Finalize. Under LeakSanitizer they are left out of the leak check, instead of being
// reported and matched against suppressions at every daemon's exit (a second of CPU each,
// most of a sanitized daemon's run time).
#ifdef NODECOMM_LSAN
using MpiRuntimeAllocations = __lsan::ScopedDisabler;
#else
struct MpiRuntimeAllocations {};
#endif

std::mutex g_mutex;
std::weak_ptr<MpiRuntime> g_runtime;  // guarded by g_mutex

}  // namespace

std::shared_ptr<MpiRuntime> MpiRuntime::acquire(int* argc, char*** argv) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  if (auto runtime = g_runtime.lock()) return runtime;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized != 0) {
    throw TransportError("MPI_Init_thread: MPI was already finalized in this process");
  }
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = 0;
  if (initialized == 0) {
    [[maybe_unused]] const MpiRuntimeAllocations not_leaks;
    const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) {
      throw TransportError("MPI_Init_thread failed (error " + std::to_string(rc) + ")");
    }
  } else {
    MPI_Query_thread(&provided);
  }
  // Errors come back as codes so a lost peer becomes a TransportError, not an abort. The
  // name service's and ports' calls report through MPI_COMM_WORLD, the formations' connects
  // through MPI_COMM_SELF.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
  std::shared_ptr<MpiRuntime> runtime(
      new MpiRuntime(/*owns=*/initialized == 0, provided >= MPI_THREAD_MULTIPLE));
  g_runtime = runtime;
  return runtime;
}

MpiRuntime::~MpiRuntime() {
  retirement_.free_all();
  if (!owns_ || skip_finalize_.load(std::memory_order_relaxed)) return;
  if (std::this_thread::get_id() != init_thread_) return;
  [[maybe_unused]] const MpiRuntimeAllocations not_leaks;
  MPI_Finalize();
}

}  // namespace nodecomm::daemon
