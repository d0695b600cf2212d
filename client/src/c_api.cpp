// The C entry points: argument checks, then one call into Context. Errors land in a
// thread-local message for nc_last_error().
#include <initializer_list>
#include <string>
#include <vector>

#include "context.hpp"
#include "nodecomm.h"

using nodecomm::client::Context;
using nodecomm::client::Result;
namespace proto = nodecomm::proto;

static_assert(static_cast<int>(proto::Status::kInProgress) == NC_IN_PROGRESS);
static_assert(static_cast<int>(proto::Status::kInternal) == NC_ERR_INTERNAL);
static_assert(static_cast<int>(proto::DType::kU8) == NC_U8);
static_assert(static_cast<int>(proto::RedOp::kAvg) == NC_AVG);

struct nc_context {
  Context* impl;
};

// Helpers stay outside the extern "C" block: file-local C++ functions, so that only the nc_*
// entry points have C language linkage.
namespace {
thread_local std::string t_last_error;

nc_status_t report(const Result& r) {
  if (r.status != NC_OK && r.status != NC_IN_PROGRESS) t_last_error = r.message;
  return r.status;
}

nc_status_t not_initialized(const char* call) {
  t_last_error = std::string(call) + ": context is NULL (call nc_init first)";
  return NC_ERR_NOT_INITIALIZED;
}

bool valid_dtype(nc_dtype_t t) {
  return t >= NC_F32 && t <= NC_U8;
}
bool valid_redop(nc_redop_t op) {
  return op >= NC_SUM && op <= NC_AVG;
}

nc_status_t post_collective(nc_context_t* ctx, const char* call, proto::Collective collective,
                            const void* send, void* recv, size_t count, nc_dtype_t dtype,
                            nc_redop_t op, int root, nc_comm_t comm, const nc_op_attr_t* attr,
                            nc_request_t* req) {
  if (ctx == nullptr) return not_initialized(call);
  if (!valid_dtype(dtype) || !valid_redop(op)) {
    t_last_error = std::string(call) + ": unknown dtype " + std::to_string(dtype) + " or op " +
                   std::to_string(op);
    return NC_ERR_INVALID_ARGUMENT;
  }
  if (root < 0) {
    t_last_error = std::string(call) + ": root " + std::to_string(root) + " is negative";
    return NC_ERR_INVALID_ARGUMENT;
  }
  const nodecomm::client::CollectiveArgs args{collective,
                                              send,
                                              recv,
                                              count,
                                              static_cast<proto::DType>(dtype),
                                              static_cast<proto::RedOp>(op),
                                              comm,
                                              static_cast<uint32_t>(root),
                                              attr};
  return report(ctx->impl->post(args, req));
}

nc_status_t post_vector(nc_context_t* ctx, const char* call, proto::Collective collective,
                        const void* send, void* recv, size_t count, nc_dtype_t dtype,
                        nc_comm_t comm, const nc_op_attr_t* attr, nc_request_t* req,
                        std::initializer_list<const size_t*> arrays) {
  if (ctx == nullptr) return not_initialized(call);
  int size = 0;
  if (nc_status_t s = nc_comm_size(ctx, comm, &size); s != NC_OK) return s;
  std::vector<uint64_t> aux;
  for (const size_t* a : arrays) {
    if (a == nullptr) {
      t_last_error = std::string(call) + ": a count or displacement array is NULL";
      return NC_ERR_INVALID_ARGUMENT;
    }
    aux.insert(aux.end(), a, a + size);
  }
  if (!valid_dtype(dtype)) {
    t_last_error = std::string(call) + ": unknown dtype " + std::to_string(dtype);
    return NC_ERR_INVALID_ARGUMENT;
  }
  nodecomm::client::CollectiveArgs args{
      collective,         send, recv, count, static_cast<proto::DType>(dtype),
      proto::RedOp::kSum, comm, 0,    attr};
  args.aux = aux.data();
  return report(ctx->impl->post(args, req));
}
}  // namespace

extern "C" {

void nc_init_options_default(nc_init_options_t* opts) {
  if (opts == nullptr) return;
  *opts = nc_init_options_t{};
  opts->local_rank = -1;
}

nc_status_t nc_init(const nc_init_options_t* opts, nc_context_t** ctx) {
  if (ctx == nullptr) {
    t_last_error = "nc_init: ctx is NULL";
    return NC_ERR_INVALID_ARGUMENT;
  }
  *ctx = nullptr;
  nodecomm::client::Settings settings;
  if (nc_status_t s = report(nodecomm::client::resolve_settings(opts, settings)); s != NC_OK) {
    return s;
  }
  Context* impl = nullptr;
  if (nc_status_t s = report(Context::create(settings, impl)); s != NC_OK) return s;
  *ctx = new nc_context{impl};
  return NC_OK;
}

nc_status_t nc_finalize(nc_context_t* ctx) {
  if (ctx == nullptr) return NC_OK;
  const nc_status_t s = report(ctx->impl->finalize());
  delete ctx->impl;
  delete ctx;
  return s;
}

int nc_world_rank(const nc_context_t* ctx) {
  return ctx ? static_cast<int>(ctx->impl->world_rank()) : -1;
}
int nc_world_size(const nc_context_t* ctx) {
  return ctx ? static_cast<int>(ctx->impl->world_size()) : -1;
}
int nc_node_index(const nc_context_t* ctx) {
  return ctx ? static_cast<int>(ctx->impl->node_index()) : -1;
}
int nc_node_count(const nc_context_t* ctx) {
  return ctx ? static_cast<int>(ctx->impl->node_count()) : -1;
}
int nc_local_rank(const nc_context_t* ctx) {
  return ctx ? static_cast<int>(ctx->impl->local_rank()) : -1;
}
int nc_local_size(const nc_context_t* ctx) {
  return ctx ? static_cast<int>(ctx->impl->local_size()) : -1;
}

nc_status_t nc_alloc(nc_context_t* ctx, size_t bytes, void** ptr) {
  if (ctx == nullptr) return not_initialized("nc_alloc");
  if (ptr == nullptr) {
    t_last_error = "nc_alloc: ptr is NULL";
    return NC_ERR_INVALID_ARGUMENT;
  }
  return report(ctx->impl->alloc(bytes, ptr));
}

nc_status_t nc_free(nc_context_t* ctx, void* ptr) {
  if (ctx == nullptr) return not_initialized("nc_free");
  if (ptr == nullptr) return NC_OK;
  return report(ctx->impl->free(ptr));
}

nc_status_t nc_register_fd(nc_context_t* ctx, int fd, uint64_t file_offset, size_t bytes,
                           void* addr) {
  if (ctx == nullptr) return not_initialized("nc_register_fd");
  return report(ctx->impl->register_fd(fd, file_offset, bytes, addr));
}

nc_status_t nc_arena_info(const nc_context_t* ctx, uint64_t* total_bytes, uint64_t* free_bytes) {
  if (ctx == nullptr) return not_initialized("nc_arena_info");
  ctx->impl->arena_info(total_bytes, free_bytes);
  return NC_OK;
}

nc_status_t nc_allreduce(nc_context_t* ctx, const void* send, void* recv, size_t count,
                         nc_dtype_t dtype, nc_redop_t op, nc_comm_t comm, const nc_op_attr_t* attr,
                         nc_request_t* req) {
  return post_collective(ctx, "nc_allreduce", proto::Collective::kAllreduce, send, recv, count,
                         dtype, op, 0, comm, attr, req);
}

nc_status_t nc_reduce(nc_context_t* ctx, const void* send, void* recv, size_t count,
                      nc_dtype_t dtype, nc_redop_t op, int root, nc_comm_t comm,
                      const nc_op_attr_t* attr, nc_request_t* req) {
  return post_collective(ctx, "nc_reduce", proto::Collective::kReduce, send, recv, count, dtype, op,
                         root, comm, attr, req);
}

nc_status_t nc_broadcast(nc_context_t* ctx, const void* send, void* recv, size_t count,
                         nc_dtype_t dtype, int root, nc_comm_t comm, const nc_op_attr_t* attr,
                         nc_request_t* req) {
  return post_collective(ctx, "nc_broadcast", proto::Collective::kBroadcast, send, recv, count,
                         dtype, NC_SUM, root, comm, attr, req);
}

nc_status_t nc_reduce_scatter(nc_context_t* ctx, const void* send, void* recv, size_t recv_count,
                              nc_dtype_t dtype, nc_redop_t op, nc_comm_t comm,
                              const nc_op_attr_t* attr, nc_request_t* req) {
  return post_collective(ctx, "nc_reduce_scatter", proto::Collective::kReduceScatter, send, recv,
                         recv_count, dtype, op, 0, comm, attr, req);
}

nc_status_t nc_allgather(nc_context_t* ctx, const void* send, void* recv, size_t send_count,
                         nc_dtype_t dtype, nc_comm_t comm, const nc_op_attr_t* attr,
                         nc_request_t* req) {
  return post_collective(ctx, "nc_allgather", proto::Collective::kAllgather, send, recv, send_count,
                         dtype, NC_SUM, 0, comm, attr, req);
}

nc_status_t nc_gather(nc_context_t* ctx, const void* send, void* recv, size_t send_count,
                      nc_dtype_t dtype, int root, nc_comm_t comm, const nc_op_attr_t* attr,
                      nc_request_t* req) {
  return post_collective(ctx, "nc_gather", proto::Collective::kGather, send, recv, send_count,
                         dtype, NC_SUM, root, comm, attr, req);
}

nc_status_t nc_scatter(nc_context_t* ctx, const void* send, void* recv, size_t recv_count,
                       nc_dtype_t dtype, int root, nc_comm_t comm, const nc_op_attr_t* attr,
                       nc_request_t* req) {
  return post_collective(ctx, "nc_scatter", proto::Collective::kScatter, send, recv, recv_count,
                         dtype, NC_SUM, root, comm, attr, req);
}

nc_status_t nc_alltoall(nc_context_t* ctx, const void* send, void* recv, size_t count,
                        nc_dtype_t dtype, nc_comm_t comm, const nc_op_attr_t* attr,
                        nc_request_t* req) {
  return post_collective(ctx, "nc_alltoall", proto::Collective::kAlltoall, send, recv, count, dtype,
                         NC_SUM, 0, comm, attr, req);
}

nc_status_t nc_allgatherv(nc_context_t* ctx, const void* send, size_t send_count, void* recv,
                          const size_t* recv_counts, const size_t* displs, nc_dtype_t dtype,
                          nc_comm_t comm, const nc_op_attr_t* attr, nc_request_t* req) {
  return post_vector(ctx, "nc_allgatherv", proto::Collective::kAllgatherv, send, recv, send_count,
                     dtype, comm, attr, req, {recv_counts, displs});
}

nc_status_t nc_alltoallv(nc_context_t* ctx, const void* send, const size_t* send_counts,
                         const size_t* send_displs, void* recv, const size_t* recv_counts,
                         const size_t* recv_displs, nc_dtype_t dtype, nc_comm_t comm,
                         const nc_op_attr_t* attr, nc_request_t* req) {
  return post_vector(ctx, "nc_alltoallv", proto::Collective::kAlltoallv, send, recv, 0, dtype, comm,
                     attr, req, {send_counts, send_displs, recv_counts, recv_displs});
}

nc_status_t nc_barrier(nc_context_t* ctx, nc_comm_t comm, const nc_op_attr_t* attr,
                       nc_request_t* req) {
  return post_collective(ctx, "nc_barrier", proto::Collective::kBarrier, nullptr, nullptr, 0, NC_U8,
                         NC_SUM, 0, comm, attr, req);
}

nc_status_t nc_test(nc_context_t* ctx, nc_request_t req) {
  if (ctx == nullptr) return not_initialized("nc_test");
  return report(ctx->impl->test(req));
}

nc_status_t nc_wait(nc_context_t* ctx, nc_request_t req) {
  if (ctx == nullptr) return not_initialized("nc_wait");
  if (req == 0) {
    t_last_error = "nc_wait: request 0 is never a valid request";
    return NC_ERR_INVALID_ARGUMENT;
  }
  return report(ctx->impl->wait(req));
}

nc_status_t nc_comm_split(nc_context_t* ctx, nc_comm_t parent, int color, int key,
                          nc_comm_t* newcomm) {
  if (ctx == nullptr) return not_initialized("nc_comm_split");
  if (newcomm == nullptr) {
    t_last_error = "nc_comm_split: newcomm is NULL";
    return NC_ERR_INVALID_ARGUMENT;
  }
  const int32_t wire_color = color < 0 ? proto::kUndefinedColor : color;
  return report(ctx->impl->split(parent, wire_color, key, newcomm));
}

nc_status_t nc_comm_dup(nc_context_t* ctx, nc_comm_t comm, nc_comm_t* newcomm) {
  if (ctx == nullptr) return not_initialized("nc_comm_dup");
  int rank = 0;
  if (nc_status_t s = nc_comm_rank(ctx, comm, &rank); s != NC_OK) return s;
  return nc_comm_split(ctx, comm, 0, rank, newcomm);
}

nc_status_t nc_comm_free(nc_context_t* ctx, nc_comm_t* comm) {
  if (ctx == nullptr) return not_initialized("nc_comm_free");
  if (comm == nullptr || *comm == NC_COMM_NULL) return NC_OK;
  const nc_status_t s = report(ctx->impl->free_comm(*comm));
  if (s == NC_OK) *comm = NC_COMM_NULL;
  return s;
}

nc_status_t nc_comm_rank(const nc_context_t* ctx, nc_comm_t comm, int* rank) {
  if (ctx == nullptr) return not_initialized("nc_comm_rank");
  uint32_t r = 0;
  if (nc_status_t s = report(ctx->impl->comm_info(comm, &r, nullptr)); s != NC_OK) return s;
  if (rank != nullptr) *rank = static_cast<int>(r);
  return NC_OK;
}

nc_status_t nc_comm_size(const nc_context_t* ctx, nc_comm_t comm, int* size) {
  if (ctx == nullptr) return not_initialized("nc_comm_size");
  uint32_t n = 0;
  if (nc_status_t s = report(ctx->impl->comm_info(comm, nullptr, &n)); s != NC_OK) return s;
  if (size != nullptr) *size = static_cast<int>(n);
  return NC_OK;
}

nc_status_t nc_distribution(nc_context_t* ctx, int data_parts, int model_parts,
                            nc_comm_t* data_comm, nc_comm_t* model_comm) {
  if (ctx == nullptr) return not_initialized("nc_distribution");
  const int size = nc_world_size(ctx);
  const int rank = nc_world_rank(ctx);
  if (data_parts < 1 || model_parts < 1 || data_parts * model_parts != size ||
      data_comm == nullptr || model_comm == nullptr) {
    t_last_error = "nc_distribution: data_parts (" + std::to_string(data_parts) +
                   ") x model_parts (" + std::to_string(model_parts) +
                   ") must equal the world size (" + std::to_string(size) +
                   ") and both outputs must be non-NULL";
    return NC_ERR_INVALID_ARGUMENT;
  }
  if (nc_status_t s = nc_comm_split(ctx, NC_COMM_WORLD, rank / model_parts, rank, model_comm);
      s != NC_OK) {
    return s;
  }
  return nc_comm_split(ctx, NC_COMM_WORLD, rank % model_parts, rank, data_comm);
}

nc_status_t nc_wait_all(nc_context_t* ctx, size_t n, nc_request_t* reqs, nc_status_t* statuses) {
  if (ctx == nullptr) return not_initialized("nc_wait_all");
  if (n > 0 && reqs == nullptr) {
    t_last_error = "nc_wait_all: reqs is NULL";
    return NC_ERR_INVALID_ARGUMENT;
  }
  nc_status_t first_failure = NC_OK;
  std::string first_message;
  for (size_t i = 0; i < n; ++i) {
    nc_status_t s = NC_OK;
    if (reqs[i] != 0) {
      s = report(ctx->impl->wait(reqs[i]));
      if (s != NC_ERR_TIMEOUT) reqs[i] = 0;
    }
    if (statuses != nullptr) statuses[i] = s;
    if (s != NC_OK && first_failure == NC_OK) {
      first_failure = s;
      first_message = t_last_error;
    }
  }
  if (first_failure != NC_OK) t_last_error = first_message;
  return first_failure;
}

nc_status_t nc_wait_any(nc_context_t* ctx, size_t n, nc_request_t* reqs, size_t* index) {
  if (ctx == nullptr) return not_initialized("nc_wait_any");
  size_t live = 0;
  for (size_t i = 0; reqs != nullptr && i < n; ++i) live += reqs[i] != 0 ? 1 : 0;
  if (live == 0 || index == nullptr) {
    t_last_error = "nc_wait_any: no live request in the list (or index is NULL)";
    return NC_ERR_INVALID_ARGUMENT;
  }
  const nc_status_t s = report(ctx->impl->wait_any(reqs, n, index));
  if (s != NC_ERR_TIMEOUT) reqs[*index] = 0;
  return s;
}

const char* nc_last_error(void) {
  return t_last_error.c_str();
}

const char* nc_status_string(nc_status_t status) {
  // status_name returns string literals: static and NUL-terminated, so two calls in one
  // printf stay valid (a shared thread-local buffer would not).
  return proto::status_name(static_cast<proto::Status>(status)).data();
}

const char* nc_dtype_name(nc_dtype_t dtype) {
  if (!valid_dtype(dtype)) return nullptr;
  return proto::dtype_name(static_cast<proto::DType>(dtype)).data();
}

size_t nc_dtype_size(nc_dtype_t dtype) {
  return valid_dtype(dtype) ? proto::dtype_size(static_cast<proto::DType>(dtype)) : 0;
}

nc_status_t nc_dtype_parse(const char* name, nc_dtype_t* dtype) {
  for (int t = NC_F32; name != nullptr && dtype != nullptr && t <= NC_U8; ++t) {
    if (proto::dtype_name(static_cast<proto::DType>(t)) == name) {
      *dtype = static_cast<nc_dtype_t>(t);
      return NC_OK;
    }
  }
  t_last_error = std::string("unknown dtype '") + (name ? name : "(null)") +
                 "'; expected f32, f64, i32, i64, f16, bf16, i8 or u8";
  return NC_ERR_INVALID_ARGUMENT;
}

const char* nc_redop_name(nc_redop_t op) {
  if (!valid_redop(op)) return nullptr;
  return proto::redop_name(static_cast<proto::RedOp>(op)).data();
}

nc_status_t nc_redop_parse(const char* name, nc_redop_t* op) {
  for (int o = NC_SUM; name != nullptr && op != nullptr && o <= NC_AVG; ++o) {
    if (proto::redop_name(static_cast<proto::RedOp>(o)) == name) {
      *op = static_cast<nc_redop_t>(o);
      return NC_OK;
    }
  }
  t_last_error = std::string("unknown reduction op '") + (name ? name : "(null)") +
                 "'; expected sum, prod, min, max or avg";
  return NC_ERR_INVALID_ARGUMENT;
}

const char* nc_compress_name(nc_compress_t compress) {
  if (compress < NC_COMPRESS_NONE || compress > NC_COMPRESS_INT8) return nullptr;
  return proto::compression_name(static_cast<proto::Compression>(compress)).data();
}

nc_status_t nc_compress_parse(const char* name, nc_compress_t* compress) {
  for (int c = NC_COMPRESS_NONE; name != nullptr && compress != nullptr && c <= NC_COMPRESS_INT8;
       ++c) {
    if (proto::compression_name(static_cast<proto::Compression>(c)) == name) {
      *compress = static_cast<nc_compress_t>(c);
      return NC_OK;
    }
  }
  t_last_error = std::string("unknown compression '") + (name ? name : "(null)") +
                 "'; expected none, bf16, f16 or int8";
  return NC_ERR_INVALID_ARGUMENT;
}

}  // extern "C"
