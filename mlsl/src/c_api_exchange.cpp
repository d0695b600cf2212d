// mlsl.h over mlsl.hpp, the objects that exchange data: Distribution collectives, Activation
// and its CommBlockInfo, ParameterSet. The checks each call makes before the C++ call are
// c_api_support.hpp's.
#include "c_api_support.hpp"
#include "mlsl.h"
#include "mlsl.hpp"

using nodecomm::mlsl::c_api::c_api_call;
using nodecomm::mlsl::c_api::c_api_collective;
using nodecomm::mlsl::c_api::c_api_cxx;
using nodecomm::mlsl::c_api::c_api_get;
using nodecomm::mlsl::c_api::c_api_group_ok;
using nodecomm::mlsl::c_api::c_api_have;
using nodecomm::mlsl::c_api::c_api_object;
using nodecomm::mlsl::c_api::c_api_reduction_ok;
using nodecomm::mlsl::c_api::c_api_run;

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

}  // extern "C"
