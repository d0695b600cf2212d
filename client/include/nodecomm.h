/* libnodecomm: the C API of the nodecomm client library.
 *
 * A training process calls nc_init() to attach to its node's nodecommd, allocates buffers
 * from the shared-memory arena with nc_alloc(), posts collectives that return requests, and
 * completes them with nc_test() or nc_wait(). It never calls MPI; the daemon does.
 *
 * Conventions
 *  - Every function returns an nc_status_t. NC_OK is 0. On any other value,
 *    nc_last_error() returns a message for the calling thread that names what went wrong
 *    (operation, rank, sequence number, what was expected).
 *  - Thread safety: a context may be used from several threads at once; calls on one context
 *    serialize on an internal lock, which is never held while a thread sleeps in nc_wait().
 *    nc_init() and nc_finalize() must not race with other calls on the same context.
 *  - Ownership: the library owns the context and requests; buffers from nc_alloc() belong
 *    to the context and are released by nc_free() or nc_finalize().
 *
 * Environment (read by nc_init when the options leave a field at zero/NULL):
 *   NODECOMM_RUNTIME_DIR   directory of the daemon's socket; overrides NODECOMM_INSTANCE
 *   NODECOMM_INSTANCE      daemon instance name under the default runtime base ("default")
 *   NODECOMM_JOB           job name; all ranks of one job use the same name ("default")
 *   NODECOMM_LOCAL_RANK    this process's rank among the job's ranks on this node (required)
 *   NODECOMM_LOCAL_SIZE    number of the job's ranks on this node (required)
 *   NODECOMM_ARENA_BYTES   arena size to request, with optional K/M/G suffix (64M)
 *   NODECOMM_TIMEOUT_SEC   how long nc_init waits for the job to form and nc_wait for a
 *                          result before returning NC_ERR_TIMEOUT (300; 0 = forever)
 */
#ifndef NODECOMM_H
#define NODECOMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden visibility; everything declared here is exported. */
#pragma GCC visibility push(default)

#define NODECOMM_VERSION_MAJOR 0
#define NODECOMM_VERSION_MINOR 1

/* C++ sees the enums with their C representation (int) as a fixed underlying type, so that any
 * int a C caller passes is a valid value to test and reject, not undefined behaviour in the
 * library (an enum without one holds only its enumerators' bit range). clang-format reads
 * `NC_ENUM(x) {` as a function, hence its off/on markers around each such enum. */
#ifdef __cplusplus
#define NC_ENUM(name) enum name : int
#else
#define NC_ENUM(name) enum name
#endif

/* Status codes. The values equal nodecomm::proto::Status. */
/* clang-format off */
typedef NC_ENUM(nc_status) {
  NC_OK = 0,
  NC_ERR_INVALID_ARGUMENT = 1, /* an argument is outside its domain */
  NC_ERR_OUT_OF_RANGE = 2,     /* a buffer lies outside the arena */
  NC_ERR_UNSUPPORTED = 3,      /* valid, but not implemented for this dtype/op/collective */
  NC_ERR_MISMATCH = 4,         /* ranks of a communicator posted different operations */
  NC_ERR_PEER_LOST = 5,        /* a member rank or a remote node disappeared */
  NC_ERR_DAEMON_LOST = 6,      /* this node's nodecommd disappeared */
  NC_ERR_TIMEOUT = 7,
  NC_ERR_QUEUE_FULL = 8, /* too many operations in flight for this client */
  NC_ERR_NO_MEMORY = 9,  /* the arena (or the daemon) has no room */
  NC_ERR_NOT_INITIALIZED = 10,
  NC_ERR_PROTOCOL = 11, /* the daemon and the library disagree on the protocol */
  NC_ERR_PERMISSION = 12,
  NC_ERR_INTERNAL = 13,
  NC_IN_PROGRESS = 14 /* nc_test: the request has not completed yet */
} nc_status_t;
/* clang-format on */

/* Element types. f16 and bf16 are accumulated in f32 and rounded once. */
/* clang-format off */
typedef NC_ENUM(nc_dtype) {
  NC_F32 = 0,
  NC_F64 = 1,
  NC_I32 = 2,
  NC_I64 = 3,
  NC_F16 = 4,  /* IEEE 754 binary16 */
  NC_BF16 = 5, /* bfloat16 */
  NC_I8 = 6,
  NC_U8 = 7
} nc_dtype_t;
/* clang-format on */

/* Reduction operations. Integer sums and products wrap modulo 2^bits. */
/* clang-format off */
typedef NC_ENUM(nc_redop) { NC_SUM = 0, NC_PROD = 1, NC_MIN = 2, NC_MAX = 3, NC_AVG = 4 } nc_redop_t;
/* clang-format on */

typedef struct nc_context nc_context_t; /* opaque */
typedef uint64_t nc_request_t;          /* 0 is never a valid request */
typedef uint32_t nc_comm_t;
#define NC_COMM_WORLD ((nc_comm_t)0)
#define NC_COMM_NULL ((nc_comm_t)0xffffffffu) /* "no communicator" (opted out of a split) */
#define NC_UNDEFINED (-32766)                 /* split color that opts out, as MPI_UNDEFINED */

/* Options for nc_init. Zero-initialise, set what you need; zero/NULL fields fall back to the
 * environment and then to the defaults listed above. */
typedef struct nc_init_options {
  const char* runtime_dir;
  const char* instance;
  const char* job;
  int32_t local_rank; /* -1: from the environment */
  int32_t local_size; /* -1 or 0: from the environment */
  uint64_t arena_bytes;
  double timeout_sec; /* 0: NODECOMM_TIMEOUT_SEC or 300 */
} nc_init_options_t;

/* How an allreduce's data crosses the network between nodes (f32 allreduce only; the node's
 * ranks are always summed exactly in f32 first). */
/* clang-format off */
typedef NC_ENUM(nc_compress) {
  NC_COMPRESS_NONE = 0,
  NC_COMPRESS_BF16 = 1, /* bfloat16 on the wire, accumulated in f32; half the bytes */
  NC_COMPRESS_F16 = 2,  /* IEEE binary16 on the wire, accumulated in f32; half the bytes */
  NC_COMPRESS_INT8 = 3  /* int8 blocks with per-block scales and error feedback (sum/avg);
                           needs a distinct `name` per tensor to keep its residual */
} nc_compress_t;
/* clang-format on */

/* Per-operation attributes; pass NULL for the defaults. Zero-initialise, set what you need. */
typedef struct nc_op_attr {
  int32_t priority; /* higher crosses the network first under the `direct` policy; default 0 */
  const char* name; /* tensor name shown in diagnostics; may be NULL; copied */
  nc_compress_t compress; /* wire compression; NC_COMPRESS_NONE by default */
} nc_op_attr_t;

/* Fills `opts` with the "use the environment" values (local_rank = -1, the rest zero). */
void nc_init_options_default(nc_init_options_t* opts);

/* Attaches to the node's daemon, maps the shared segment and waits until every rank of the
 * job on every node has attached, so world rank and size are known. `opts` may be NULL.
 * On success *ctx is a new context, released by nc_finalize. */
nc_status_t nc_init(const nc_init_options_t* opts, nc_context_t** ctx);

/* Detaches from the daemon and releases the context, its arena and its requests. Requests
 * still in flight are abandoned. Safe to call with NULL. */
nc_status_t nc_finalize(nc_context_t* ctx);

int nc_world_rank(const nc_context_t* ctx);
int nc_world_size(const nc_context_t* ctx);
int nc_node_index(const nc_context_t* ctx);
int nc_node_count(const nc_context_t* ctx);
int nc_local_rank(const nc_context_t* ctx);
int nc_local_size(const nc_context_t* ctx);

/* Allocates `bytes` (aligned to 64 bytes, or 4096 for bytes >= 64 KiB) from the shared arena.
 * Buffers from here are the zero-copy path: the daemon reads and writes them in place.
 * NC_ERR_NO_MEMORY if the arena has no free block that large. */
nc_status_t nc_alloc(nc_context_t* ctx, size_t bytes, void** ptr);
/* Returns a buffer to the arena. NC_ERR_INVALID_ARGUMENT if `ptr` did not come from nc_alloc. */
nc_status_t nc_free(nc_context_t* ctx, void* ptr);
/* Registers memory the caller already has: `bytes` of the file `fd` (a memfd, or a /dev/shm
 * file, e.g. a PyTorch shared storage) from `file_offset` (page-aligned), which the caller has
 * mapped MAP_SHARED at `addr`. The daemon maps the same pages (the fd travels over the control
 * socket; the caller may close its own afterwards), so collectives on buffers inside
 * [addr, addr + bytes) are zero-copy, as with nc_alloc buffers. The region stays registered,
 * and the daemon's mapping keeps its pages, until nc_finalize: keep [addr, addr + bytes) mapped
 * to the same file until then. At most 64 regions per context, and in all at most the daemon's
 * --max-arena bytes. The file must be on shared memory (tmpfs or hugetlbfs); a memfd made with
 * MFD_ALLOW_SEALING is sealed against shrinking (F_SEAL_SHRINK) by the daemon. Shrinking an
 * unsealable file afterwards gets this rank dropped with an error, not the daemon hurt.
 * NC_ERR_INVALID_ARGUMENT, with the daemon's reason, if it refuses. */
nc_status_t nc_register_fd(nc_context_t* ctx, int fd, uint64_t file_offset, size_t bytes,
                           void* addr);
/* Bytes of the arena and how many are free. */
nc_status_t nc_arena_info(const nc_context_t* ctx, uint64_t* total_bytes, uint64_t* free_bytes);

/* Posts an allreduce of `count` elements on `comm`: every rank's `recv` gets the reduction of
 * all ranks' `send`. send == recv means in place. Buffers outside the arena are accepted and
 * copied through a temporary arena block (the caller must keep them alive and unchanged until
 * the request completes). On NC_OK *req identifies the operation; complete it with nc_test
 * or nc_wait. Every rank of `comm` must post the same collectives in the same order with the
 * same count, dtype and op. */
nc_status_t nc_allreduce(nc_context_t* ctx, const void* send, void* recv, size_t count,
                         nc_dtype_t dtype, nc_redop_t op, nc_comm_t comm, const nc_op_attr_t* attr,
                         nc_request_t* req);

/* The other collectives. All are non-blocking and follow nc_allreduce's rules: arena
 * buffers are the zero-copy path, other memory is copied through the arena, *req completes
 * with nc_test/nc_wait, and every rank of `comm` posts the same collectives in the same
 * order with the same counts, dtype, op and root. `root` is a rank of `comm`. Counts are
 * elements. Buffers that a rank does not use (recv of non-roots in reduce and gather, send
 * of non-roots in scatter) may be NULL there. In place follows NCCL: pass pointers that
 * alias as noted.
 *
 * Everything a rank receives is exact: sums of floating-point values are computed in one
 * reduction per element over all ranks (f16/bf16 in f32, rounded once). */

/* root's `recv` gets the reduction of all ranks' `send` (count elements). In place: send ==
 * recv at the root. */
nc_status_t nc_reduce(nc_context_t* ctx, const void* send, void* recv, size_t count,
                      nc_dtype_t dtype, nc_redop_t op, int root, nc_comm_t comm,
                      const nc_op_attr_t* attr, nc_request_t* req);

/* Every rank's `recv` gets root's `send` (count elements). In place: send == recv (at the root
 * that buffer is sent; elsewhere it receives). Non-roots may pass send = NULL. */
nc_status_t nc_broadcast(nc_context_t* ctx, const void* send, void* recv, size_t count,
                         nc_dtype_t dtype, int root, nc_comm_t comm, const nc_op_attr_t* attr,
                         nc_request_t* req);

/* `send` holds recv_count * size elements; rank r's `recv` gets block r (recv_count elements)
 * of the reduction over all ranks. In place: recv == send + rank * recv_count. */
nc_status_t nc_reduce_scatter(nc_context_t* ctx, const void* send, void* recv, size_t recv_count,
                              nc_dtype_t dtype, nc_redop_t op, nc_comm_t comm,
                              const nc_op_attr_t* attr, nc_request_t* req);

/* Every rank's `recv` (send_count * size elements) gets every rank's `send` in rank order.
 * In place: send == recv + rank * send_count. */
nc_status_t nc_allgather(nc_context_t* ctx, const void* send, void* recv, size_t send_count,
                         nc_dtype_t dtype, nc_comm_t comm, const nc_op_attr_t* attr,
                         nc_request_t* req);

/* root's `recv` (send_count * size elements) gets every rank's `send` in rank order.
 * In place: send == recv + root * send_count at the root. */
nc_status_t nc_gather(nc_context_t* ctx, const void* send, void* recv, size_t send_count,
                      nc_dtype_t dtype, int root, nc_comm_t comm, const nc_op_attr_t* attr,
                      nc_request_t* req);

/* root's `send` holds recv_count * size elements; rank r's `recv` gets block r.
 * In place: recv == send + root * recv_count at the root. */
nc_status_t nc_scatter(nc_context_t* ctx, const void* send, void* recv, size_t recv_count,
                       nc_dtype_t dtype, int root, nc_comm_t comm, const nc_op_attr_t* attr,
                       nc_request_t* req);

/* `send` and `recv` hold count * size elements: block j of rank i's send becomes block i of
 * rank j's recv. Not in place (send and recv must not overlap). */
nc_status_t nc_alltoall(nc_context_t* ctx, const void* send, void* recv, size_t count,
                        nc_dtype_t dtype, nc_comm_t comm, const nc_op_attr_t* attr,
                        nc_request_t* req);

/* Like nc_allgather with a count per rank: rank r contributes send_count == recv_counts[r]
 * elements, which land at recv + displs[r] (elements) on every rank. recv_counts must be the
 * same on every rank. Arrays have comm-size entries and are copied at the call. Not in place.
 */
nc_status_t nc_allgatherv(nc_context_t* ctx, const void* send, size_t send_count, void* recv,
                          const size_t* recv_counts, const size_t* displs, nc_dtype_t dtype,
                          nc_comm_t comm, const nc_op_attr_t* attr, nc_request_t* req);

/* Like nc_alltoall with counts per peer: send_counts[j] elements from send + send_displs[j]
 * go to rank j, which receives them at recv + recv_displs[i] (recv_counts[i] elements; it must
 * equal what rank i sends it). Arrays have comm-size entries and are copied at the call. Not
 * in place. */
nc_status_t nc_alltoallv(nc_context_t* ctx, const void* send, const size_t* send_counts,
                         const size_t* send_displs, void* recv, const size_t* recv_counts,
                         const size_t* recv_displs, nc_dtype_t dtype, nc_comm_t comm,
                         const nc_op_attr_t* attr, nc_request_t* req);

/* Completes on every rank once every rank of `comm` has posted it. */
nc_status_t nc_barrier(nc_context_t* ctx, nc_comm_t comm, const nc_op_attr_t* attr,
                       nc_request_t* req);

/* Non-blocking completion check. NC_IN_PROGRESS while running; otherwise the operation's
 * final status, and the request is released (testing it again gives
 * NC_ERR_INVALID_ARGUMENT). */
nc_status_t nc_test(nc_context_t* ctx, nc_request_t req);

/* Blocks until the request completes (spin, then yield, then sleep on a futex) and returns its
 * status, releasing the request. NC_ERR_TIMEOUT after the context's timeout (the request
 * stays valid), NC_ERR_DAEMON_LOST within about a second if the daemon dies. */
nc_status_t nc_wait(nc_context_t* ctx, nc_request_t req);

/* Communicators. World is NC_COMM_WORLD. The calls below are collective over the parent
 * (every rank of it must call them, in the same order relative to its other operations on
 * it) and block until the daemons have agreed. Operations on different communicators progress
 * independently; on one communicator they run in posting order. */

/* MPI_Comm_split semantics: ranks with the same color form a communicator, ordered by key,
 * then by rank in `parent`. color NC_UNDEFINED (or any negative color) opts out: *newcomm is
 * NC_COMM_NULL. */
nc_status_t nc_comm_split(nc_context_t* ctx, nc_comm_t parent, int color, int key,
                          nc_comm_t* newcomm);
/* A new communicator with the same ranks in the same order. */
nc_status_t nc_comm_dup(nc_context_t* ctx, nc_comm_t comm, nc_comm_t* newcomm);
/* Releases a communicator (not the world) on every rank of it; *comm becomes NC_COMM_NULL.
 * Operations still in flight on it must be waited for first. */
nc_status_t nc_comm_free(nc_context_t* ctx, nc_comm_t* comm);
/* This rank's place in `comm`, and its number of ranks. */
nc_status_t nc_comm_rank(const nc_context_t* ctx, nc_comm_t comm, int* rank);
nc_status_t nc_comm_size(const nc_context_t* ctx, nc_comm_t comm, int* size);

/* MLSL's Distribution: world_size must equal data_parts * model_parts. World rank r belongs
 * to model group r / model_parts (the model_parts consecutive ranks that hold one replica
 * between them) and to data group r % model_parts (the data_parts ranks that hold the same
 * model shard, across replicas). Gradient allreduce for data parallelism goes on *data_comm,
 * activation exchange for model parallelism on *model_comm. Collective over the world. */
nc_status_t nc_distribution(nc_context_t* ctx, int data_parts, int model_parts,
                            nc_comm_t* data_comm, nc_comm_t* model_comm);

/* Waits for every non-zero request in reqs[0..n) and sets each to 0 once released. Returns
 * NC_OK if all succeeded, else the first failure's status (nc_last_error() has its message);
 * statuses (may be NULL) gets each request's status. Zero entries are skipped. */
nc_status_t nc_wait_all(nc_context_t* ctx, size_t n, nc_request_t* reqs, nc_status_t* statuses);

/* Waits until any non-zero request in reqs[0..n) completes, sets *index to it, sets
 * reqs[*index] to 0 and returns its status. NC_ERR_INVALID_ARGUMENT if no entry is non-zero. */
nc_status_t nc_wait_any(nc_context_t* ctx, size_t n, nc_request_t* reqs, size_t* index);

/* Message for the last non-OK status returned to the calling thread. Never NULL; valid until
 * the thread's next nodecomm call. */
const char* nc_last_error(void);

/* Short fixed name of a status code, e.g. "mismatched collective": a static string, never NULL
 * ("unknown status" for a value outside nc_status_t). */
const char* nc_status_string(nc_status_t status);
/* "f32", "f64", ...; NULL for an unknown value. Parsing returns NC_ERR_INVALID_ARGUMENT on an
 * unknown name. */
const char* nc_dtype_name(nc_dtype_t dtype);
size_t nc_dtype_size(nc_dtype_t dtype);
nc_status_t nc_dtype_parse(const char* name, nc_dtype_t* dtype);
const char* nc_redop_name(nc_redop_t op);
nc_status_t nc_redop_parse(const char* name, nc_redop_t* op);
/* "none", "bf16", "f16", "int8". */
const char* nc_compress_name(nc_compress_t compress);
nc_status_t nc_compress_parse(const char* name, nc_compress_t* compress);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif

#endif /* NODECOMM_H */
