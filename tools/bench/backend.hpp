// The transport a benchmark run measures. Both implementations expose the same few blocking
// primitives so that the measurement loop, the correctness check and the report (bench.cpp)
// are written once and the numbers of the two backends are directly comparable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include "collectives.hpp"
#include "nodecomm.h"

namespace nodecomm::bench {

// A failed backend call. The message names the call and carries the library's own message;
// the caller adds which size and which iteration it was.
class BackendError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Per-operation attributes, as nodecomm.h's nc_op_attr_t; the MPI backend has no use for them.
struct OpAttr {
  int32_t priority = 0;
  const char* name = nullptr;  // not owned; copied by the call
  nc_compress_t compress = NC_COMPRESS_NONE;
};

// A posted, not yet completed operation (post()); 0 is never one.
using Pending = uint64_t;

// Why a backend cannot run a collective/dtype/op combination at all, and the exit code that
// implies.
struct Rejection {
  std::string why;
  int exit_code;
};

// One collective call with nccl-tests' buffer conventions (collectives.hpp): every rank passes
// both buffers, even those the collective does not use there. `inplace` tells a backend whose
// API spells in place differently (MPI_IN_PLACE) which form is meant; the pointers already
// follow nodecomm.h's in-place aliasing.
struct Call {
  Collective collective = Collective::kAllreduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  // the count argument (Shape::count)
  nc_dtype_t dtype = NC_F32;
  nc_redop_t op = NC_SUM;  // reducing collectives only
  int root = 0;            // rooted collectives only
  bool inplace = false;
  // Vector collectives only: this rank's counts and displacements. Not owned.
  const CollectiveCase::VectorArgs* vector = nullptr;
  // On the group made by split() (the collective under test), rather than on the world (the
  // benchmark's own bookkeeping). Without a split() the group is the world.
  bool in_group = false;
  // Per-operation attributes (priority, tensor name, wire compression); null: the defaults.
  const OpAttr* attr = nullptr;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;
  virtual int world_rank() const = 0;
  virtual int world_size() const = 0;
  // Seen from this rank: how many nodes the job spans and how many of its ranks share this
  // rank's node. Only rank 0's view is reported.
  virtual int node_count() const = 0;
  virtual int local_size() const = 0;
  // This rank's place in the group of split(), and the group's size; the world's before it.
  virtual int group_rank() const = 0;
  virtual int group_size() const = 0;
  // Splits the world into groups (MPI_Comm_split semantics: by color, ordered by key) for the
  // calls with Call::in_group. Collective over the world; at most once. Throws BackendError.
  virtual void split(int color, int key) = 0;
  // A short note on where buffers come from, for the report header.
  virtual std::string buffer_kind() const = 0;

  // A combination this backend cannot run. Decided from the flags alone, hence identically on
  // every rank, so all ranks can stop cleanly without talking to each other.
  virtual std::optional<Rejection> reject(Collective collective, nc_dtype_t dtype,
                                          nc_redop_t op) const = 0;

  // Memory the backend's collectives accept as send and receive buffer. Throws BackendError.
  virtual void* alloc(size_t bytes) = 0;
  virtual void free(void* ptr) noexcept = 0;

  // One complete collective over the world or the group (post and wait). Throws BackendError.
  virtual void run(const Call& call) = 0;
  // Shorthand for the benchmark's own bookkeeping; send == recv means in place.
  void allreduce(const void* send, void* recv, size_t count, nc_dtype_t dtype, nc_redop_t op) {
    run({Collective::kAllreduce, send, recv, count, dtype, op, 0, send == recv});
  }
  // Non-blocking form of run(): posts the call and returns its handle, or 0 when this rank has
  // too many operations in flight (nodecomm's NC_ERR_QUEUE_FULL), in which case the caller
  // completes one of its own and posts again. Throws BackendError on anything else, and for
  // calls the backend cannot post non-blocking (MPI: allreduce only).
  virtual Pending post(const Call& call) = 0;
  // Whether `pending` has completed; if so it is released (and throws if it failed).
  virtual bool test(Pending pending) = 0;
  // Completes one operation, or every non-zero entry (set to 0 as they complete). Throw
  // BackendError when an operation failed.
  virtual void wait(Pending pending) = 0;
  virtual void wait_all(std::span<Pending> pending) = 0;
  // Same for every rank of one node and different between nodes (the daemon's node index;
  // with MPI, $NODECOMM_NODE under nodecomm-launch, else the shared-memory domain's).
  virtual int node_index() const = 0;

  // Returns once every rank has called it (as closely as the backend allows).
  virtual void sync() = 0;

  // Ends the run. After a failure (`ok` false) a backend whose peers could otherwise block
  // forever in a collective must make sure they stop too.
  virtual void finalize(bool ok) noexcept = 0;
};

struct NodecommBackendOptions {
  uint64_t arena_bytes = 0;  // 0: leave it to NODECOMM_ARENA_BYTES or the library default
  bool use_arena = true;     // false: malloc'd buffers, which the library copies through
};

// Both attach/initialise immediately and throw BackendError on failure.
std::unique_ptr<Backend> make_nodecomm_backend(const NodecommBackendOptions& options);
std::unique_ptr<Backend> make_mpi_backend();
// Gloo's collectives over its TCP transport. Rank and size from mpirun's environment
// (OMPI_COMM_WORLD_RANK/SIZE) or torchrun's (RANK/WORLD_SIZE); rendezvous through a file store
// in $NODECOMM_GLOO_STORE (nodecomm-launch sets it; under a plain mpirun a directory in $TMPDIR
// named after the job); the interface from $GLOO_SOCKET_IFNAME, as torch reads it.
std::unique_ptr<Backend> make_gloo_backend();

}  // namespace nodecomm::bench
