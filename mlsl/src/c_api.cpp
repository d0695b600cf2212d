// mlsl.h over mlsl.hpp: every C function is one call of the public C++ API.
//
// A C program hands in plain integers, so before a handle becomes a pointer it is checked
// against the implementation's registry of live objects (handles.hpp): a stale or invented
// handle, a NULL pointer where a result is to be stored and an enumerator out of range are
// refused with CMLSL_FAILURE and one line on stderr, before anything is started. What MLSL
// itself asserts on is left to the C++ API, which takes the fatal path (message, exit 1) in C
// as in C++ (docs/MLSL.md, plan §3.3 and §4.8).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <type_traits>

#include "handles.hpp"
#include "mlsl.h"
#include "mlsl.hpp"

namespace {

// What each handle type of mlsl.h names, for the live check and for messages.
template <class T>
struct c_api_kind;
template <>
struct c_api_kind<MLSL::Session> {
  static constexpr nodecomm::mlsl::HandleKind kind = nodecomm::mlsl::HandleKind::session;
  static constexpr const char* noun = "session";
};
template <>
struct c_api_kind<MLSL::Distribution> {
  static constexpr nodecomm::mlsl::HandleKind kind = nodecomm::mlsl::HandleKind::distribution;
  static constexpr const char* noun = "distribution";
};
template <>
struct c_api_kind<MLSL::OperationRegInfo> {
  static constexpr nodecomm::mlsl::HandleKind kind = nodecomm::mlsl::HandleKind::reg_info;
  static constexpr const char* noun = "operation reg info";
};
template <>
struct c_api_kind<MLSL::Operation> {
  static constexpr nodecomm::mlsl::HandleKind kind = nodecomm::mlsl::HandleKind::operation;
  static constexpr const char* noun = "operation";
};
template <>
struct c_api_kind<MLSL::Activation> {
  static constexpr nodecomm::mlsl::HandleKind kind = nodecomm::mlsl::HandleKind::activation;
  static constexpr const char* noun = "activation";
};
template <>
struct c_api_kind<MLSL::CommBlockInfo> {
  static constexpr nodecomm::mlsl::HandleKind kind = nodecomm::mlsl::HandleKind::block;
  static constexpr const char* noun = "comm block info";
};
template <>
struct c_api_kind<MLSL::ParameterSet> {
  static constexpr nodecomm::mlsl::HandleKind kind = nodecomm::mlsl::HandleKind::parameter_set;
  static constexpr const char* noun = "parameter set";
};
template <>
struct c_api_kind<MLSL::Statistics> {
  static constexpr nodecomm::mlsl::HandleKind kind = nodecomm::mlsl::HandleKind::statistics;
  static constexpr const char* noun = "statistics";
};

void c_api_refuse(const char* function, const std::string& what) {
  std::fprintf(stderr, "mlsl: %s: %s\n", function, what.c_str());
}

std::string c_api_hex(unsigned long long value) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%llx", value);
  return text;
}

template <class T>
unsigned long long c_api_handle(T* object) {
  return static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(object));
}

// mlsl.h defines handles as integers, so turning one back into a pointer is the point.
template <class T>
T* c_api_pointer(unsigned long long handle) {
  // NOLINTNEXTLINE(performance-no-int-to-ptr)
  return reinterpret_cast<T*>(static_cast<std::uintptr_t>(handle));
}

// The object `handle` names, or nullptr (reported) when it names no live T.
template <class T>
T* c_api_object(const char* function, unsigned long long handle) {
  T* object = c_api_pointer<T>(handle);
  if (handle == 0 || !nodecomm::mlsl::handle_is_live(c_api_kind<T>::kind, object)) {
    c_api_refuse(function, std::string(c_api_kind<T>::noun) + " handle " + c_api_hex(handle) +
                               " names no live " + c_api_kind<T>::noun);
    return nullptr;
  }
  return object;
}

// Like c_api_object, but handle 0 means "none" (a NULL pointer in the C++ call).
template <class T>
bool c_api_optional(const char* function, unsigned long long handle, T** object) {
  *object = nullptr;
  if (handle == 0) return true;
  *object = c_api_object<T>(function, handle);
  return *object != nullptr;
}

// The only environment is the singleton; its handle is its address.
MLSL::Environment* c_api_env(const char* function, mlsl_environment env) {
  MLSL::Environment* only = &MLSL::Environment::GetEnv();
  if (env != c_api_handle(only)) {
    c_api_refuse(function, "environment handle " + c_api_hex(env) +
                               " is not the one mlsl_environment_get_env returns (" +
                               c_api_hex(c_api_handle(only)) + ")");
    return nullptr;
  }
  return only;
}

bool c_api_have(const char* function, const void* pointer, const char* name) {
  if (pointer == nullptr) c_api_refuse(function, std::string(name) + " is NULL");
  return pointer != nullptr;
}

// C enums arrive as ints that may hold anything; the C++ API would take them at face value.
// Read through memcpy: in C++ even loading an enum object that holds a value outside its
// enumerators is undefined (UBSan's -fsanitize=enum stops on it).
template <class Enum>
int c_api_raw(const Enum& value) {
  static_assert(sizeof(Enum) == sizeof(int), "C enums are passed as int");
  int raw = 0;
  std::memcpy(&raw, &value, sizeof raw);
  return raw;
}

bool c_api_in_range(const char* function, const char* what, int value, int count,
                    const char* names) {
  if (value >= 0 && value < count) return true;
  c_api_refuse(function,
               std::string(what) + " " + std::to_string(value) + " is not one of " + names);
  return false;
}

bool c_api_dtype_ok(const char* function, const mlsl_data_type& value) {
  return c_api_in_range(function, "data type", c_api_raw(value), 3, "DT_FLOAT, DT_DOUBLE, DT_BYTE");
}
bool c_api_group_ok(const char* function, const mlsl_group_type& value) {
  return c_api_in_range(function, "group type", c_api_raw(value), 3,
                        "GT_DATA, GT_MODEL, GT_GLOBAL");
}
bool c_api_reduction_ok(const char* function, const mlsl_reduction_type& value) {
  return c_api_in_range(function, "reduction type", c_api_raw(value), 3, "RT_SUM, RT_MIN, RT_MAX");
}

MLSL::DataType c_api_cxx(mlsl_data_type value) {
  return static_cast<MLSL::DataType>(value);
}
MLSL::GroupType c_api_cxx(mlsl_group_type value) {
  return static_cast<MLSL::GroupType>(value);
}
MLSL::ReductionType c_api_cxx(mlsl_reduction_type value) {
  return static_cast<MLSL::ReductionType>(value);
}

// A request handle is the CommReq* token itself; once Wait (or a completing Test) consumed it,
// it is refused here instead of reaching the C++ API's fatal "not found".
MLSL::CommReq* c_api_request(const char* function, mlsl_comm_req req) {
  MLSL::CommReq* token = c_api_pointer<MLSL::CommReq>(req);
  if (req == 0 || !nodecomm::mlsl::request_is_live(token)) {
    c_api_refuse(function, "request handle " + c_api_hex(req) +
                               " names no request in flight (already waited, tested to "
                               "completion, or not a request)");
    return nullptr;
  }
  return token;
}

// Runs the C++ call. Misuse never throws out of the C++ API (it exits), so what arrives here is
// unexpected (std::bad_alloc, say); it must still not unwind into a C caller.
template <class Body>
int c_api_run(const char* function, Body&& body) noexcept {
  try {
    body();
    return CMLSL_SUCCESS;
  } catch (const std::exception& error) {
    c_api_refuse(function, std::string("unexpected C++ exception: ") + error.what());
  } catch (...) {
    c_api_refuse(function, "unexpected C++ exception");
  }
  return CMLSL_FAILURE;
}

// A C++ result as mlsl.h stores it: objects as handles, bool as a whole int 0/1, enums by
// value (mlsl.h and mlsl.hpp number them alike).
template <class Out, class Result>
Out c_api_to_c(Result value) {
  if constexpr (std::is_pointer_v<Result> && std::is_same_v<Out, unsigned long long>) {
    return c_api_handle(value);
  } else {
    return static_cast<Out>(value);
  }
}

// The common shape: a live T, a non-NULL out-pointer, *out = (object.*getter)(args...).
template <class T, class Out, class Result, class... Params, class... Args>
int c_api_get(const char* function, unsigned long long handle, Out* out, const char* out_name,
              Result (T::*getter)(Params...), Args... args) {
  T* object = c_api_object<T>(function, handle);
  if (object == nullptr || !c_api_have(function, out, out_name)) return CMLSL_FAILURE;
  return c_api_run(function, [&] { *out = c_api_to_c<Out>((object->*getter)(args...)); });
}

// A live T, then (object.*method)(args...). A result is dropped: mlsl.h's add_input,
// add_output and add_parameter_set return only the status, as MLSL's do.
template <class T, class Result, class... Params, class... Args>
int c_api_call(const char* function, unsigned long long handle, Result (T::*method)(Params...),
               Args... args) {
  T* object = c_api_object<T>(function, handle);
  if (object == nullptr) return CMLSL_FAILURE;
  return c_api_run(function, [&] { (object->*method)(args...); });
}

// A Distribution collective: live distribution, req non-NULL, enums in range, then post.
template <class Post>
int c_api_collective(const char* function, mlsl_distribution dist, mlsl_comm_req* req,
                     const mlsl_data_type& dtype, const mlsl_group_type& group, Post post) {
  MLSL::Distribution* object = c_api_object<MLSL::Distribution>(function, dist);
  if (object == nullptr || !c_api_have(function, req, "req") || !c_api_dtype_ok(function, dtype) ||
      !c_api_group_ok(function, group)) {
    return CMLSL_FAILURE;
  }
  return c_api_run(function, [&] { *req = c_api_handle(post(*object)); });
}

}  // namespace

extern "C" {

// ---- CommBlockInfo ----

int mlsl_comm_block_info_get_mb_offset(mlsl_comm_block_info block_info, size_t* mb_offset) {
  return c_api_get(__func__, block_info, mb_offset, "mb_offset", &MLSL::CommBlockInfo::GetMbOffset);
}

int mlsl_comm_block_info_get_mb_count(mlsl_comm_block_info block_info, size_t* mb_count) {
  return c_api_get(__func__, block_info, mb_count, "mb_count", &MLSL::CommBlockInfo::GetMbCount);
}

int mlsl_comm_block_info_get_fm_offset(mlsl_comm_block_info block_info, size_t* fm_offset) {
  return c_api_get(__func__, block_info, fm_offset, "fm_offset", &MLSL::CommBlockInfo::GetFmOffset);
}

int mlsl_comm_block_info_get_fm_count(mlsl_comm_block_info block_info, size_t* fm_count) {
  return c_api_get(__func__, block_info, fm_count, "fm_count", &MLSL::CommBlockInfo::GetFmCount);
}

int mlsl_comm_block_info_get_fm_size(mlsl_comm_block_info block_info, size_t* fm_size) {
  return c_api_get(__func__, block_info, fm_size, "fm_size", &MLSL::CommBlockInfo::GetFmSize);
}

int mlsl_comm_block_info_get_data_type(mlsl_comm_block_info block_info, mlsl_data_type* dtype) {
  return c_api_get(__func__, block_info, dtype, "dtype", &MLSL::CommBlockInfo::GetDataType);
}

int mlsl_comm_block_info_get_buf_offset(mlsl_comm_block_info block_info, size_t* buf_offset) {
  return c_api_get(__func__, block_info, buf_offset, "buf_offset",
                   &MLSL::CommBlockInfo::GetBufOffset);
}

// ---- Activation ----

int mlsl_activation_get_global_fm_count(mlsl_activation act, size_t* global_fm_count) {
  return c_api_get(__func__, act, global_fm_count, "global_fm_count",
                   &MLSL::Activation::GetGlobalFmCount);
}

int mlsl_activation_get_global_fm_offset(mlsl_activation act, size_t* global_fm_offset) {
  return c_api_get(__func__, act, global_fm_offset, "global_fm_offset",
                   &MLSL::Activation::GetGlobalFmOffset);
}

int mlsl_activation_get_local_fm_count(mlsl_activation act, size_t* local_fm_count) {
  return c_api_get(__func__, act, local_fm_count, "local_fm_count",
                   &MLSL::Activation::GetLocalFmCount);
}

int mlsl_activation_get_pack_block_count(mlsl_activation act, size_t* pack_block_count) {
  return c_api_get(__func__, act, pack_block_count, "pack_block_count",
                   &MLSL::Activation::GetPackBlockCount);
}

int mlsl_activation_get_unpack_block_count(mlsl_activation act, size_t* unpack_block_count) {
  return c_api_get(__func__, act, unpack_block_count, "unpack_block_count",
                   &MLSL::Activation::GetUnpackBlockCount);
}

int mlsl_activation_get_pack_block(mlsl_activation act, size_t block_idx,
                                   mlsl_comm_block_info* block_info) {
  return c_api_get(__func__, act, block_info, "block_info", &MLSL::Activation::GetPackBlock,
                   block_idx);
}

int mlsl_activation_get_unpack_block(mlsl_activation act, size_t block_idx,
                                     mlsl_comm_block_info* block_info) {
  return c_api_get(__func__, act, block_info, "block_info", &MLSL::Activation::GetUnpackBlock,
                   block_idx);
}

int mlsl_activation_get_data_type(mlsl_activation act, mlsl_data_type* dtype) {
  return c_api_get(__func__, act, dtype, "dtype", &MLSL::Activation::GetDataType);
}

int mlsl_activation_get_fm_size(mlsl_activation act, size_t* fm_size) {
  return c_api_get(__func__, act, fm_size, "fm_size", &MLSL::Activation::GetFmSize);
}

int mlsl_activation_get_comm_buf(mlsl_activation act, void** comm_buf) {
  return c_api_get(__func__, act, comm_buf, "comm_buf", &MLSL::Activation::GetCommBuf);
}

int mlsl_activation_get_comm_buf_size(mlsl_activation act, size_t* size) {
  return c_api_get(__func__, act, size, "size", &MLSL::Activation::GetCommBufSize);
}

int mlsl_activation_start_comm(mlsl_activation act, void* buffer) {
  return c_api_call(__func__, act, &MLSL::Activation::StartComm, buffer);
}

int mlsl_activation_wait_comm(mlsl_activation act, void** ret_buffer) {
  return c_api_get(__func__, act, ret_buffer, "ret_buffer", &MLSL::Activation::WaitComm);
}

// ---- ParameterSet ----

int mlsl_parameter_set_get_global_kernel_count(mlsl_parameter_set param_set,
                                               size_t* global_kernel_count) {
  return c_api_get(__func__, param_set, global_kernel_count, "global_kernel_count",
                   &MLSL::ParameterSet::GetGlobalKernelCount);
}

int mlsl_parameter_set_get_global_kernel_offset(mlsl_parameter_set param_set,
                                                size_t* global_kernel_offset) {
  return c_api_get(__func__, param_set, global_kernel_offset, "global_kernel_offset",
                   &MLSL::ParameterSet::GetGlobalKernelOffset);
}

int mlsl_parameter_set_get_local_kernel_count(mlsl_parameter_set param_set,
                                              size_t* local_kernel_count) {
  return c_api_get(__func__, param_set, local_kernel_count, "local_kernel_count",
                   &MLSL::ParameterSet::GetLocalKernelCount);
}

int mlsl_parameter_set_get_owned_kernel_count(mlsl_parameter_set param_set,
                                              size_t* owned_kernel_count) {
  return c_api_get(__func__, param_set, owned_kernel_count, "owned_kernel_count",
                   &MLSL::ParameterSet::GetOwnedKernelCount);
}

int mlsl_parameter_set_get_owned_kernel_offset(mlsl_parameter_set param_set,
                                               size_t* owned_kernel_offset) {
  return c_api_get(__func__, param_set, owned_kernel_offset, "owned_kernel_offset",
                   &MLSL::ParameterSet::GetOwnedKernelOffset);
}

int mlsl_parameter_set_get_data_type(mlsl_parameter_set param_set, mlsl_data_type* dtype) {
  return c_api_get(__func__, param_set, dtype, "dtype", &MLSL::ParameterSet::GetDataType);
}

int mlsl_parameter_set_get_kernel_size(mlsl_parameter_set param_set, size_t* kernel_size) {
  return c_api_get(__func__, param_set, kernel_size, "kernel_size",
                   &MLSL::ParameterSet::GetKernelSize);
}

int mlsl_parameter_set_is_distributed_update(mlsl_parameter_set param_set, int* is_dist_update) {
  return c_api_get(__func__, param_set, is_dist_update, "is_dist_update",
                   &MLSL::ParameterSet::IsDistributedUpdate);
}

int mlsl_parameter_set_start_gradient_comm(mlsl_parameter_set param_set, void* buffer) {
  return c_api_call(__func__, param_set, &MLSL::ParameterSet::StartGradientComm, buffer);
}

int mlsl_parameter_set_start_increment_comm(mlsl_parameter_set param_set, void* buffer) {
  return c_api_call(__func__, param_set, &MLSL::ParameterSet::StartIncrementComm, buffer);
}

int mlsl_parameter_set_wait_gradient_comm(mlsl_parameter_set param_set, void** ret_buffer) {
  return c_api_get(__func__, param_set, ret_buffer, "ret_buffer",
                   &MLSL::ParameterSet::WaitGradientComm);
}

int mlsl_parameter_set_test_gradient_comm(mlsl_parameter_set param_set, int* is_completed,
                                          void** ret_buffer) {
  MLSL::ParameterSet* object = c_api_object<MLSL::ParameterSet>(__func__, param_set);
  if (object == nullptr || !c_api_have(__func__, is_completed, "is_completed")) {
    return CMLSL_FAILURE;
  }
  if (!c_api_have(__func__, ret_buffer, "ret_buffer")) return CMLSL_FAILURE;
  return c_api_run(__func__, [&] {
    // A whole int, not the one byte that passing is_completed on as a bool* would write.
    bool completed = false;
    *ret_buffer = object->TestGradientComm(&completed);
    *is_completed = completed ? 1 : 0;
  });
}

int mlsl_parameter_set_wait_increment_comm(mlsl_parameter_set param_set, void** ret_buffer) {
  return c_api_get(__func__, param_set, ret_buffer, "ret_buffer",
                   &MLSL::ParameterSet::WaitIncrementComm);
}

// ---- Distribution ----

int mlsl_distribution_get_process_count(mlsl_distribution dist, mlsl_group_type group_type,
                                        size_t* process_count) {
  if (!c_api_group_ok(__func__, group_type)) return CMLSL_FAILURE;
  return c_api_get(__func__, dist, process_count, "process_count",
                   &MLSL::Distribution::GetProcessCount, c_api_cxx(group_type));
}

int mlsl_distribution_get_process_idx(mlsl_distribution dist, mlsl_group_type group_type,
                                      size_t* process_idx) {
  if (!c_api_group_ok(__func__, group_type)) return CMLSL_FAILURE;
  return c_api_get(__func__, dist, process_idx, "process_idx", &MLSL::Distribution::GetProcessIdx,
                   c_api_cxx(group_type));
}

int mlsl_distribution_bcast(mlsl_distribution dist, void* buffer, size_t count,
                            mlsl_data_type dtype, size_t root_idx, mlsl_group_type group_type,
                            mlsl_comm_req* req) {
  return c_api_collective(__func__, dist, req, dtype, group_type, [&](MLSL::Distribution& d) {
    return d.Bcast(buffer, count, c_api_cxx(dtype), root_idx, c_api_cxx(group_type));
  });
}

int mlsl_distribution_reduce(mlsl_distribution dist, void* send_buffer, void* recv_buffer,
                             size_t count, mlsl_data_type dtype, mlsl_reduction_type red_type,
                             size_t root_idx, mlsl_group_type group_type, mlsl_comm_req* req) {
  if (!c_api_reduction_ok(__func__, red_type)) return CMLSL_FAILURE;
  return c_api_collective(__func__, dist, req, dtype, group_type, [&](MLSL::Distribution& d) {
    return d.Reduce(send_buffer, recv_buffer, count, c_api_cxx(dtype), c_api_cxx(red_type),
                    root_idx, c_api_cxx(group_type));
  });
}

int mlsl_distribution_all_reduce(mlsl_distribution dist, void* send_buffer, void* recv_buffer,
                                 size_t count, mlsl_data_type dtype, mlsl_reduction_type red_type,
                                 mlsl_group_type group_type, mlsl_comm_req* req) {
  if (!c_api_reduction_ok(__func__, red_type)) return CMLSL_FAILURE;
  return c_api_collective(__func__, dist, req, dtype, group_type, [&](MLSL::Distribution& d) {
    return d.AllReduce(send_buffer, recv_buffer, count, c_api_cxx(dtype), c_api_cxx(red_type),
                       c_api_cxx(group_type));
  });
}

int mlsl_distribution_all_to_all(mlsl_distribution dist, void* send_buffer, size_t send_count,
                                 void* recv_buffer, mlsl_data_type dtype,
                                 mlsl_group_type group_type, mlsl_comm_req* req) {
  return c_api_collective(__func__, dist, req, dtype, group_type, [&](MLSL::Distribution& d) {
    return d.AlltoAll(send_buffer, send_count, recv_buffer, c_api_cxx(dtype),
                      c_api_cxx(group_type));
  });
}

int mlsl_distribution_all_to_allv(mlsl_distribution dist, void* send_buffer, size_t* send_counts,
                                  size_t* send_offsets, void* recv_buffer, size_t* recv_counts,
                                  size_t* recv_offsets, mlsl_data_type dtype,
                                  mlsl_group_type group_type, mlsl_comm_req* req) {
  return c_api_collective(__func__, dist, req, dtype, group_type, [&](MLSL::Distribution& d) {
    return d.AlltoAllv(send_buffer, send_counts, send_offsets, recv_buffer, recv_counts,
                       recv_offsets, c_api_cxx(dtype), c_api_cxx(group_type));
  });
}

int mlsl_distribution_gather(mlsl_distribution dist, void* send_buffer, size_t send_count,
                             void* recv_buffer, mlsl_data_type dtype, size_t root_idx,
                             mlsl_group_type group_type, mlsl_comm_req* req) {
  return c_api_collective(__func__, dist, req, dtype, group_type, [&](MLSL::Distribution& d) {
    return d.Gather(send_buffer, send_count, recv_buffer, c_api_cxx(dtype), root_idx,
                    c_api_cxx(group_type));
  });
}

int mlsl_distribution_all_gather(mlsl_distribution dist, void* send_buffer, size_t send_count,
                                 void* recv_buffer, mlsl_data_type dtype,
                                 mlsl_group_type group_type, mlsl_comm_req* req) {
  return c_api_collective(__func__, dist, req, dtype, group_type, [&](MLSL::Distribution& d) {
    return d.AllGather(send_buffer, send_count, recv_buffer, c_api_cxx(dtype),
                       c_api_cxx(group_type));
  });
}

int mlsl_distribution_all_gatherv(mlsl_distribution dist, void* send_buffer, size_t send_count,
                                  void* recv_buffer, size_t* recv_counts, mlsl_data_type dtype,
                                  mlsl_group_type group_type, mlsl_comm_req* req) {
  return c_api_collective(__func__, dist, req, dtype, group_type, [&](MLSL::Distribution& d) {
    return d.AllGatherv(send_buffer, send_count, recv_buffer, recv_counts, c_api_cxx(dtype),
                        c_api_cxx(group_type));
  });
}

int mlsl_distribution_scatter(mlsl_distribution dist, void* send_buffer, void* recv_buffer,
                              size_t recv_count, mlsl_data_type dtype, size_t root_idx,
                              mlsl_group_type group_type, mlsl_comm_req* req) {
  return c_api_collective(__func__, dist, req, dtype, group_type, [&](MLSL::Distribution& d) {
    return d.Scatter(send_buffer, recv_buffer, recv_count, c_api_cxx(dtype), root_idx,
                     c_api_cxx(group_type));
  });
}

int mlsl_distribution_reduce_scatter(mlsl_distribution dist, void* send_buffer, void* recv_buffer,
                                     size_t recv_count, mlsl_data_type dtype,
                                     mlsl_reduction_type red_type, mlsl_group_type group_type,
                                     mlsl_comm_req* req) {
  if (!c_api_reduction_ok(__func__, red_type)) return CMLSL_FAILURE;
  return c_api_collective(__func__, dist, req, dtype, group_type, [&](MLSL::Distribution& d) {
    return d.ReduceScatter(send_buffer, recv_buffer, recv_count, c_api_cxx(dtype),
                           c_api_cxx(red_type), c_api_cxx(group_type));
  });
}

int mlsl_distribution_barrier(mlsl_distribution dist, mlsl_group_type group_type) {
  if (!c_api_group_ok(__func__, group_type)) return CMLSL_FAILURE;
  return c_api_call(__func__, dist, &MLSL::Distribution::Barrier, c_api_cxx(group_type));
}

// ---- OperationRegInfo ----

int mlsl_operation_reg_info_set_name(mlsl_operation_reg_info reg_info, const char* name) {
  return c_api_call(__func__, reg_info, &MLSL::OperationRegInfo::SetName, name);
}

int mlsl_operation_reg_info_add_input(mlsl_operation_reg_info reg_info, size_t fm_count,
                                      size_t fm_size, mlsl_data_type dtype) {
  if (!c_api_dtype_ok(__func__, dtype)) return CMLSL_FAILURE;
  return c_api_call(__func__, reg_info, &MLSL::OperationRegInfo::AddInput, fm_count, fm_size,
                    c_api_cxx(dtype));
}

int mlsl_operation_reg_info_add_output(mlsl_operation_reg_info reg_info, size_t fm_count,
                                       size_t fm_size, mlsl_data_type dtype) {
  if (!c_api_dtype_ok(__func__, dtype)) return CMLSL_FAILURE;
  return c_api_call(__func__, reg_info, &MLSL::OperationRegInfo::AddOutput, fm_count, fm_size,
                    c_api_cxx(dtype));
}

int mlsl_operation_reg_info_add_parameter_set(mlsl_operation_reg_info reg_info, size_t kernel_count,
                                              size_t kernel_size, mlsl_data_type dtype,
                                              int dist_update) {
  return mlsl_operation_reg_info_add_parameter_set_with_compress(
      reg_info, kernel_count, kernel_size, dtype, dist_update, CT_NONE);
}

int mlsl_operation_reg_info_add_parameter_set_with_compress(mlsl_operation_reg_info reg_info,
                                                            size_t kernel_count, size_t kernel_size,
                                                            mlsl_data_type dtype, int dist_update,
                                                            mlsl_compression_type compress_type) {
  if (!c_api_dtype_ok(__func__, dtype) ||
      !c_api_in_range(__func__, "compression type", c_api_raw(compress_type), 2,
                      "CT_NONE, CT_QUANTIZATION")) {
    return CMLSL_FAILURE;
  }
  return c_api_call(__func__, reg_info, &MLSL::OperationRegInfo::AddParameterSet, kernel_count,
                    kernel_size, c_api_cxx(dtype), dist_update != 0,
                    static_cast<MLSL::CompressionType>(compress_type));
}

int mlsl_operation_reg_info_validate(mlsl_operation_reg_info reg_info, mlsl_distribution dist) {
  MLSL::Distribution* distribution = nullptr;
  if (!c_api_optional(__func__, dist, &distribution)) return CMLSL_FAILURE;
  return c_api_call(__func__, reg_info, &MLSL::OperationRegInfo::Validate, distribution);
}

// ---- Operation ----

int mlsl_operation_set_distribution(mlsl_operation op, mlsl_distribution dist) {
  // No optional here: an operation's distribution can only be set to a real one.
  MLSL::Distribution* distribution = c_api_object<MLSL::Distribution>(__func__, dist);
  if (distribution == nullptr) return CMLSL_FAILURE;
  return c_api_call(__func__, op, &MLSL::Operation::SetDistribution, distribution);
}

int mlsl_operation_get_distribution(mlsl_operation op, mlsl_distribution* dist) {
  return c_api_get(__func__, op, dist, "dist", &MLSL::Operation::GetDistribution);
}

int mlsl_operation_get_session(mlsl_operation op, mlsl_session* session) {
  return c_api_get(__func__, op, session, "session", &MLSL::Operation::GetSession);
}

int mlsl_operation_get_op_type(mlsl_operation op, mlsl_op_type* op_type) {
  return c_api_get(__func__, op, op_type, "op_type", &MLSL::Operation::GetOpType);
}

int mlsl_operation_set_prev(mlsl_operation op, mlsl_operation prev, size_t act_idx,
                            size_t prev_op_act_idx) {
  MLSL::Operation* peer = nullptr;
  if (!c_api_optional(__func__, prev, &peer)) return CMLSL_FAILURE;
  return c_api_call(__func__, op, &MLSL::Operation::SetPrev, peer, act_idx, prev_op_act_idx);
}

int mlsl_operation_set_next(mlsl_operation op, mlsl_operation next, size_t act_idx,
                            size_t next_op_act_idx) {
  MLSL::Operation* peer = nullptr;
  if (!c_api_optional(__func__, next, &peer)) return CMLSL_FAILURE;
  return c_api_call(__func__, op, &MLSL::Operation::SetNext, peer, act_idx, next_op_act_idx);
}

int mlsl_operation_get_name(mlsl_operation op, const char** name) {
  return c_api_get(__func__, op, name, "name", &MLSL::Operation::GetName);
}

int mlsl_operation_get_global_minibatch_size(mlsl_operation op, size_t* global_minibatch_size) {
  return c_api_get(__func__, op, global_minibatch_size, "global_minibatch_size",
                   &MLSL::Operation::GetGlobalMinibatchSize);
}

int mlsl_operation_get_local_minibatch_size(mlsl_operation op, size_t* local_minibatch_size) {
  return c_api_get(__func__, op, local_minibatch_size, "local_minibatch_size",
                   &MLSL::Operation::GetLocalMinibatchSize);
}

int mlsl_operation_get_global_minibatch_offset(mlsl_operation op, size_t* global_minibatch_offset) {
  return c_api_get(__func__, op, global_minibatch_offset, "global_minibatch_offset",
                   &MLSL::Operation::GetGlobalMinibatchOffset);
}

int mlsl_operation_get_input_count(mlsl_operation op, size_t* input_count) {
  return c_api_get(__func__, op, input_count, "input_count", &MLSL::Operation::GetInputCount);
}

int mlsl_operation_get_input(mlsl_operation op, size_t input_idx, mlsl_activation* input_act) {
  return c_api_get(__func__, op, input_act, "input_act", &MLSL::Operation::GetInput, input_idx);
}

int mlsl_operation_get_output_count(mlsl_operation op, size_t* output_count) {
  return c_api_get(__func__, op, output_count, "output_count", &MLSL::Operation::GetOutputCount);
}

int mlsl_operation_get_output(mlsl_operation op, size_t output_idx, mlsl_activation* output_act) {
  return c_api_get(__func__, op, output_act, "output_act", &MLSL::Operation::GetOutput, output_idx);
}

int mlsl_operation_has_parameter_sets(mlsl_operation op, int* has_params) {
  return c_api_get(__func__, op, has_params, "has_params", &MLSL::Operation::HasParameterSets);
}

int mlsl_operation_get_parameter_set_count(mlsl_operation op, size_t* param_count) {
  return c_api_get(__func__, op, param_count, "param_count",
                   &MLSL::Operation::GetParameterSetCount);
}

int mlsl_operation_get_parameter_set(mlsl_operation op, size_t param_idx,
                                     mlsl_parameter_set* param_set) {
  return c_api_get(__func__, op, param_set, "param_set", &MLSL::Operation::GetParameterSet,
                   param_idx);
}

// ---- Statistics ----

int mlsl_statistics_start(mlsl_statistics stat) {
  return c_api_call(__func__, stat, &MLSL::Statistics::Start);
}

int mlsl_statistics_stop(mlsl_statistics stat) {
  return c_api_call(__func__, stat, &MLSL::Statistics::Stop);
}

int mlsl_statistics_reset(mlsl_statistics stat) {
  return c_api_call(__func__, stat, &MLSL::Statistics::Reset);
}

int mlsl_statistics_print(mlsl_statistics stat) {
  return c_api_call(__func__, stat, &MLSL::Statistics::Print);
}

int mlsl_statistics_is_started(mlsl_statistics stat, int* is_started) {
  return c_api_get(__func__, stat, is_started, "is_started", &MLSL::Statistics::IsStarted);
}

int mlsl_statistics_is_enabled(mlsl_statistics stat, int* is_enabled) {
  return c_api_get(__func__, stat, is_enabled, "is_enabled", &MLSL::Statistics::IsEnabled);
}

int mlsl_statistics_get_isolation_comm_cycles(mlsl_statistics stat, size_t op_idx,
                                              unsigned long long* cycles) {
  return c_api_get(__func__, stat, cycles, "cycles", &MLSL::Statistics::GetIsolationCommCycles,
                   op_idx);
}

int mlsl_statistics_get_comm_size(mlsl_statistics stat, size_t op_idx, size_t* size) {
  return c_api_get(__func__, stat, size, "size", &MLSL::Statistics::GetCommSize, op_idx);
}

int mlsl_statistics_get_comm_cycles(mlsl_statistics stat, size_t op_idx,
                                    unsigned long long* cycles) {
  return c_api_get(__func__, stat, cycles, "cycles", &MLSL::Statistics::GetCommCycles, op_idx);
}

int mlsl_statistics_get_compute_cycles(mlsl_statistics stat, size_t op_idx,
                                       unsigned long long* cycles) {
  return c_api_get(__func__, stat, cycles, "cycles", &MLSL::Statistics::GetComputeCycles, op_idx);
}

int mlsl_statistics_get_total_isolation_comm_cycles(mlsl_statistics stat,
                                                    unsigned long long* cycles) {
  return c_api_get(__func__, stat, cycles, "cycles",
                   &MLSL::Statistics::GetTotalIsolationCommCycles);
}

int mlsl_statistics_get_total_comm_size(mlsl_statistics stat, size_t* size) {
  return c_api_get(__func__, stat, size, "size", &MLSL::Statistics::GetTotalCommSize);
}

int mlsl_statistics_get_total_comm_cycles(mlsl_statistics stat, unsigned long long* cycles) {
  return c_api_get(__func__, stat, cycles, "cycles", &MLSL::Statistics::GetTotalCommCycles);
}

int mlsl_statistics_get_total_compute_cycles(mlsl_statistics stat, unsigned long long* cycles) {
  return c_api_get(__func__, stat, cycles, "cycles", &MLSL::Statistics::GetTotalComputeCycles);
}

// ---- Session ----

int mlsl_session_set_global_minibatch_size(mlsl_session session, size_t global_minibatch_size) {
  return c_api_call(__func__, session, &MLSL::Session::SetGlobalMinibatchSize,
                    global_minibatch_size);
}

int mlsl_session_get_global_minibatch_size(mlsl_session session, size_t* global_minibatch_size) {
  return c_api_get(__func__, session, global_minibatch_size, "global_minibatch_size",
                   &MLSL::Session::GetGlobalMinibatchSize);
}

int mlsl_session_get_phase_type(mlsl_session session, mlsl_phase_type* phase_type) {
  return c_api_get(__func__, session, phase_type, "phase_type", &MLSL::Session::GetPhaseType);
}

int mlsl_session_create_operation_reg_info(mlsl_session session, mlsl_op_type op_type,
                                           mlsl_operation_reg_info* reg_info) {
  if (!c_api_in_range(__func__, "operation type", c_api_raw(op_type), 10, "OT_CC .. OT_EVAL")) {
    return CMLSL_FAILURE;
  }
  return c_api_get(__func__, session, reg_info, "reg_info", &MLSL::Session::CreateOperationRegInfo,
                   static_cast<MLSL::OpType>(op_type));
}

int mlsl_session_delete_operation_reg_info(mlsl_session session, mlsl_operation_reg_info reg_info) {
  MLSL::OperationRegInfo* info = c_api_object<MLSL::OperationRegInfo>(__func__, reg_info);
  if (info == nullptr) return CMLSL_FAILURE;
  return c_api_call(__func__, session, &MLSL::Session::DeleteOperationRegInfo, info);
}

int mlsl_session_add_operation_with_distribution(mlsl_session session,
                                                 mlsl_operation_reg_info reg_info,
                                                 mlsl_distribution dist, size_t* op_idx) {
  MLSL::OperationRegInfo* info = c_api_object<MLSL::OperationRegInfo>(__func__, reg_info);
  MLSL::Distribution* distribution = nullptr;
  if (info == nullptr || !c_api_optional(__func__, dist, &distribution)) return CMLSL_FAILURE;
  return c_api_get(__func__, session, op_idx, "op_idx", &MLSL::Session::AddOperation, info,
                   distribution);
}

int mlsl_session_add_operation(mlsl_session session, mlsl_operation_reg_info reg_info,
                               size_t* op_idx) {
  return mlsl_session_add_operation_with_distribution(session, reg_info, 0, op_idx);
}

int mlsl_session_remove_operations(mlsl_session session) {
  return c_api_call(__func__, session, &MLSL::Session::RemoveOperations);
}

int mlsl_session_get_operation_count(mlsl_session session, size_t* op_count) {
  return c_api_get(__func__, session, op_count, "op_count", &MLSL::Session::GetOperationCount);
}

int mlsl_session_get_operation(mlsl_session session, size_t op_idx, mlsl_operation* op) {
  return c_api_get(__func__, session, op, "op", &MLSL::Session::GetOperation, op_idx);
}

int mlsl_session_commit(mlsl_session session) {
  return c_api_call(__func__, session, &MLSL::Session::Commit);
}

int mlsl_session_get_stats(mlsl_session session, mlsl_statistics* stat) {
  return c_api_get(__func__, session, stat, "stat", &MLSL::Session::GetStats);
}

// ---- Environment ----

int mlsl_environment_get_env(mlsl_environment* env) {
  if (!c_api_have(__func__, env, "env")) return CMLSL_FAILURE;
  return c_api_run(__func__, [&] { *env = c_api_handle(&MLSL::Environment::GetEnv()); });
}

int mlsl_environment_get_version(int* version) {
  if (!c_api_have(__func__, version, "version")) return CMLSL_FAILURE;
  *version = MLSL::Environment::GetVersion();
  return CMLSL_SUCCESS;
}

int mlsl_environment_configure(mlsl_environment env, const char* config) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr) return CMLSL_FAILURE;
  return c_api_run(__func__, [&] { e->Configure(config); });
}

int mlsl_environment_init(mlsl_environment env, int* argc, char** argv[]) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr) return CMLSL_FAILURE;
  return c_api_run(__func__, [&] { e->Init(argc, argv); });
}

int mlsl_environment_finalize(mlsl_environment env) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr) return CMLSL_FAILURE;
  return c_api_run(__func__, [&] { e->Finalize(); });
}

int mlsl_environment_is_initialized(mlsl_environment env, int* is_initialized) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr || !c_api_have(__func__, is_initialized, "is_initialized")) {
    return CMLSL_FAILURE;
  }
  return c_api_run(__func__, [&] { *is_initialized = e->IsInitialized() ? 1 : 0; });
}

int mlsl_environment_get_process_idx(mlsl_environment env, size_t* process_idx) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr || !c_api_have(__func__, process_idx, "process_idx")) return CMLSL_FAILURE;
  return c_api_run(__func__, [&] { *process_idx = e->GetProcessIdx(); });
}

int mlsl_environment_get_process_count(mlsl_environment env, size_t* process_count) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr || !c_api_have(__func__, process_count, "process_count")) {
    return CMLSL_FAILURE;
  }
  return c_api_run(__func__, [&] { *process_count = e->GetProcessCount(); });
}

int mlsl_environment_create_session(mlsl_environment env, mlsl_phase_type phase_type,
                                    mlsl_session* session) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr || !c_api_have(__func__, session, "session") ||
      !c_api_in_range(__func__, "phase type", c_api_raw(phase_type), 2, "PT_TRAIN, PT_TEST")) {
    return CMLSL_FAILURE;
  }
  return c_api_run(__func__, [&] {
    *session = c_api_handle(e->CreateSession(static_cast<MLSL::PhaseType>(phase_type)));
  });
}

int mlsl_environment_delete_session(mlsl_environment env, mlsl_session session) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr) return CMLSL_FAILURE;
  MLSL::Session* object = c_api_object<MLSL::Session>(__func__, session);
  if (object == nullptr) return CMLSL_FAILURE;
  return c_api_run(__func__, [&] { e->DeleteSession(object); });
}

int mlsl_environment_create_distribution(mlsl_environment env, size_t data_partitions,
                                         size_t model_partitions, mlsl_distribution* dist) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr || !c_api_have(__func__, dist, "dist")) return CMLSL_FAILURE;
  return c_api_run(__func__, [&] {
    *dist = c_api_handle(e->CreateDistribution(data_partitions, model_partitions));
  });
}

int mlsl_environment_create_distribution_with_colors(mlsl_environment env, int data_color,
                                                     int model_color, mlsl_distribution* dist) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr || !c_api_have(__func__, dist, "dist")) return CMLSL_FAILURE;
  return c_api_run(__func__, [&] {
    *dist = c_api_handle(e->CreateDistributionWithColors(data_color, model_color));
  });
}

int mlsl_environment_delete_distribution(mlsl_environment env, mlsl_distribution dist) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr) return CMLSL_FAILURE;
  MLSL::Distribution* object = c_api_object<MLSL::Distribution>(__func__, dist);
  if (object == nullptr) return CMLSL_FAILURE;
  return c_api_run(__func__, [&] { e->DeleteDistribution(object); });
}

int mlsl_environment_wait(mlsl_environment env, mlsl_comm_req req) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr) return CMLSL_FAILURE;
  MLSL::CommReq* token = c_api_request(__func__, req);
  if (token == nullptr) return CMLSL_FAILURE;
  return c_api_run(__func__, [&] { e->Wait(token); });
}

int mlsl_environment_test(mlsl_environment env, mlsl_comm_req req, int* is_completed) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr) return CMLSL_FAILURE;
  MLSL::CommReq* token = c_api_request(__func__, req);
  if (token == nullptr || !c_api_have(__func__, is_completed, "is_completed")) {
    return CMLSL_FAILURE;
  }
  return c_api_run(__func__, [&] {
    bool completed = false;
    e->Test(token, &completed);
    *is_completed = completed ? 1 : 0;
  });
}

int mlsl_environment_alloc(mlsl_environment env, size_t size, size_t alignment, void** ptr) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr || !c_api_have(__func__, ptr, "ptr")) return CMLSL_FAILURE;
  return c_api_run(__func__, [&] { *ptr = e->Alloc(size, alignment); });
}

int mlsl_environment_free(mlsl_environment env, void* ptr) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr) return CMLSL_FAILURE;
  return c_api_run(__func__, [&] { e->Free(ptr); });
}

int mlsl_environment_set_quantization_params(mlsl_environment env, mlsl_quant_params* params) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr || !c_api_have(__func__, params, "params")) return CMLSL_FAILURE;
  // MLSL's callers pass the address of a QuantParams-shaped struct cast to this type (mlsl.h).
  return c_api_run(__func__,
                   [&] { e->SetQuantizationParams(reinterpret_cast<MLSL::QuantParams*>(params)); });
}

int mlsl_environment_get_quantization_params(mlsl_environment env, mlsl_quant_params* params) {
  MLSL::Environment* e = c_api_env(__func__, env);
  if (e == nullptr || !c_api_have(__func__, params, "params")) return CMLSL_FAILURE;
  return c_api_run(__func__, [&] { *params = c_api_handle(e->GetQuantizationParams()); });
}

}  // extern "C"
