/*
 * mlsl.h: the C API of Intel MLSL 1.0, implemented by nodecomm's libmlsl.
 *
 * A C program written against MLSL's documented C API compiles against this header and links
 * with -lmlsl (docs/MLSL.md). The names, signatures and enumerator values are MLSL's public
 * interface; the text of this file is nodecomm's. It compiles as C89 and later (and as C++98
 * and later) and needs nothing from nodecomm's own headers.
 *
 * Every function mirrors one method of mlsl.hpp. Objects are named by handles: integers holding
 * the address of the library's object. Every function returns CMLSL_SUCCESS, or CMLSL_FAILURE
 * (with one line on stderr) when an argument is wrong before anything was started: a handle
 * that names no live object of that kind, a NULL pointer where a result is to be stored, an
 * enumerator out of range. Misuse that MLSL itself treats as fatal (waiting twice on a request,
 * a failed exchange, ...) ends the process with status 1, as in C++.
 *
 * Flags returned through int* are written as a whole int, 0 or 1.
 *
 * Two nodecomm extensions, marked below, expose the C++ methods that MLSL's C API lacks:
 * mlsl_distribution_all_gatherv and mlsl_environment_create_distribution_with_colors. Test for
 * them with #ifdef MLSL_H_NODECOMM_EXTENSIONS.
 *
 * A file should include either this header or mlsl.hpp with `using namespace MLSL`, not both:
 * both declare the enumerators (DT_FLOAT, ...) as plain names.
 */
#ifndef MLSL_H
#define MLSL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CMLSL_MAJOR_VERSION 1
#define CMLSL_MINOR_VERSION 0

#define CMLSL_VERSION(major, minor) ((major << 16) | (minor))
#define CMLSL_MAJOR(version) (version >> 16)
#define CMLSL_MINOR(version) (version & 0xFFFF)

/* v1 >= v2 */
#define CMLSL_VERSION_GE(v1, v2)                                                 \
  ((CMLSL_MAJOR(v1) > CMLSL_MAJOR(v2)) ||                                        \
   (CMLSL_MAJOR(v1) == CMLSL_MAJOR(v2) && CMLSL_MINOR(v1) == CMLSL_MINOR(v2)) || \
   (CMLSL_MAJOR(v1) == CMLSL_MAJOR(v2) && CMLSL_MINOR(v1) > CMLSL_MINOR(v2)))

/* v1 < v2 */
#define CMLSL_VERSION_LT(v1, v2)          \
  ((CMLSL_MAJOR(v1) < CMLSL_MAJOR(v2)) || \
   (CMLSL_MAJOR(v1) == CMLSL_MAJOR(v2) && CMLSL_MINOR(v1) < CMLSL_MINOR(v2)))

#define CMLSL_SUCCESS 0
#define CMLSL_FAILURE -1

/* Defined when the nodecomm extensions below are declared. */
#define MLSL_H_NODECOMM_EXTENSIONS 1

/* `unsigned long long` is C99 and C++11; __extension__ keeps a C89 -pedantic build of a
 * program quiet about it (every compiler MLSL supported has the type). */
#if defined(__GNUC__)
#define CMLSL_LONG_LONG_DECL __extension__
#else
#define CMLSL_LONG_LONG_DECL
#endif

/* Handles: the address of the library's object, widened to 64 bits. A request handle is the
 * CommReq* token that a collective returned. */
#define PTR_TYPE unsigned long long
CMLSL_LONG_LONG_DECL typedef PTR_TYPE mlsl_environment;
CMLSL_LONG_LONG_DECL typedef PTR_TYPE mlsl_session;
CMLSL_LONG_LONG_DECL typedef PTR_TYPE mlsl_operation;
CMLSL_LONG_LONG_DECL typedef PTR_TYPE mlsl_operation_reg_info;
CMLSL_LONG_LONG_DECL typedef PTR_TYPE mlsl_distribution;
CMLSL_LONG_LONG_DECL typedef PTR_TYPE mlsl_parameter_set;
CMLSL_LONG_LONG_DECL typedef PTR_TYPE mlsl_activation;
CMLSL_LONG_LONG_DECL typedef PTR_TYPE mlsl_comm_block_info;
CMLSL_LONG_LONG_DECL typedef PTR_TYPE mlsl_comm_req;
CMLSL_LONG_LONG_DECL typedef PTR_TYPE mlsl_statistics;
/* The address of a structure laid out as mlsl.hpp's MLSL::QuantParams: four char* (library
 * path, quantize, dequantize and reduce-sum function names), then two size_t (block size in
 * bytes, elements per block). */
CMLSL_LONG_LONG_DECL typedef PTR_TYPE mlsl_quant_params;

/* DT_BYTE is unsigned: its sums wrap modulo 256. */
typedef enum { DT_FLOAT = 0, DT_DOUBLE = 1, DT_BYTE = 2 } mlsl_data_type;

typedef enum { PT_TRAIN = 0, PT_TEST = 1 } mlsl_phase_type;

typedef enum { GT_DATA = 0, GT_MODEL = 1, GT_GLOBAL = 2 } mlsl_group_type;

typedef enum { RT_SUM = 0, RT_MIN = 1, RT_MAX = 2 } mlsl_reduction_type;

typedef enum {
  OT_CC = 0,
  OT_BIAS = 1,
  OT_ACT = 2,
  OT_POOL = 3,
  OT_SPLIT = 4,
  OT_CONCAT = 5,
  OT_BCAST = 6,
  OT_REDUCE = 7,
  OT_DATA = 8,
  OT_EVAL = 9
} mlsl_op_type;

typedef enum { CT_NONE = 0, CT_QUANTIZATION = 1 } mlsl_compression_type;

#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* CommBlockInfo */
int mlsl_comm_block_info_get_mb_offset(mlsl_comm_block_info block_info, size_t* mb_offset);
int mlsl_comm_block_info_get_mb_count(mlsl_comm_block_info block_info, size_t* mb_count);
int mlsl_comm_block_info_get_fm_offset(mlsl_comm_block_info block_info, size_t* fm_offset);
int mlsl_comm_block_info_get_fm_count(mlsl_comm_block_info block_info, size_t* fm_count);
int mlsl_comm_block_info_get_fm_size(mlsl_comm_block_info block_info, size_t* fm_size);
int mlsl_comm_block_info_get_data_type(mlsl_comm_block_info block_info, mlsl_data_type* dtype);
int mlsl_comm_block_info_get_buf_offset(mlsl_comm_block_info block_info, size_t* buf_offset);

/* Activation */
int mlsl_activation_get_global_fm_count(mlsl_activation act, size_t* global_fm_count);
int mlsl_activation_get_global_fm_offset(mlsl_activation act, size_t* global_fm_offset);
int mlsl_activation_get_local_fm_count(mlsl_activation act, size_t* local_fm_count);
int mlsl_activation_get_pack_block_count(mlsl_activation act, size_t* pack_block_count);
int mlsl_activation_get_unpack_block_count(mlsl_activation act, size_t* unpack_block_count);
int mlsl_activation_get_pack_block(mlsl_activation act, size_t block_idx,
                                   mlsl_comm_block_info* block_info);
int mlsl_activation_get_unpack_block(mlsl_activation act, size_t block_idx,
                                     mlsl_comm_block_info* block_info);
int mlsl_activation_get_data_type(mlsl_activation act, mlsl_data_type* dtype);
int mlsl_activation_get_fm_size(mlsl_activation act, size_t* fm_size);
int mlsl_activation_get_comm_buf(mlsl_activation act, void** comm_buf);
int mlsl_activation_get_comm_buf_size(mlsl_activation act, size_t* size);
int mlsl_activation_start_comm(mlsl_activation act, void* buffer);
/* *ret_buffer: the buffer to unpack from, or NULL when there is nothing to unpack. */
int mlsl_activation_wait_comm(mlsl_activation act, void** ret_buffer);

/* ParameterSet */
int mlsl_parameter_set_get_global_kernel_count(mlsl_parameter_set param_set,
                                               size_t* global_kernel_count);
int mlsl_parameter_set_get_global_kernel_offset(mlsl_parameter_set param_set,
                                                size_t* global_kernel_offset);
int mlsl_parameter_set_get_local_kernel_count(mlsl_parameter_set param_set,
                                              size_t* local_kernel_count);
int mlsl_parameter_set_get_owned_kernel_count(mlsl_parameter_set param_set,
                                              size_t* owned_kernel_count);
int mlsl_parameter_set_get_owned_kernel_offset(mlsl_parameter_set param_set,
                                               size_t* owned_kernel_offset);
int mlsl_parameter_set_get_data_type(mlsl_parameter_set param_set, mlsl_data_type* dtype);
int mlsl_parameter_set_get_kernel_size(mlsl_parameter_set param_set, size_t* kernel_size);
int mlsl_parameter_set_is_distributed_update(mlsl_parameter_set param_set, int* is_dist_update);
int mlsl_parameter_set_start_gradient_comm(mlsl_parameter_set param_set, void* buffer);
int mlsl_parameter_set_start_increment_comm(mlsl_parameter_set param_set, void* buffer);
/* *ret_buffer: the summed gradients (the owned part with distributed update), or NULL. */
int mlsl_parameter_set_wait_gradient_comm(mlsl_parameter_set param_set, void** ret_buffer);
int mlsl_parameter_set_test_gradient_comm(mlsl_parameter_set param_set, int* is_completed,
                                          void** ret_buffer);
int mlsl_parameter_set_wait_increment_comm(mlsl_parameter_set param_set, void** ret_buffer);

/* Distribution: each collective stores a request handle in *req, to be passed once to
 * mlsl_environment_wait (or to mlsl_environment_test until it reports completion). */
int mlsl_distribution_get_process_count(mlsl_distribution dist, mlsl_group_type group_type,
                                        size_t* process_count);
int mlsl_distribution_get_process_idx(mlsl_distribution dist, mlsl_group_type group_type,
                                      size_t* process_idx);
int mlsl_distribution_bcast(mlsl_distribution dist, void* buffer, size_t count,
                            mlsl_data_type dtype, size_t root_idx, mlsl_group_type group_type,
                            mlsl_comm_req* req);
int mlsl_distribution_reduce(mlsl_distribution dist, void* send_buffer, void* recv_buffer,
                             size_t count, mlsl_data_type dtype, mlsl_reduction_type red_type,
                             size_t root_idx, mlsl_group_type group_type, mlsl_comm_req* req);
int mlsl_distribution_all_reduce(mlsl_distribution dist, void* send_buffer, void* recv_buffer,
                                 size_t count, mlsl_data_type dtype, mlsl_reduction_type red_type,
                                 mlsl_group_type group_type, mlsl_comm_req* req);
int mlsl_distribution_all_to_all(mlsl_distribution dist, void* send_buffer, size_t send_count,
                                 void* recv_buffer, mlsl_data_type dtype,
                                 mlsl_group_type group_type, mlsl_comm_req* req);
int mlsl_distribution_all_to_allv(mlsl_distribution dist, void* send_buffer, size_t* send_counts,
                                  size_t* send_offsets, void* recv_buffer, size_t* recv_counts,
                                  size_t* recv_offsets, mlsl_data_type dtype,
                                  mlsl_group_type group_type, mlsl_comm_req* req);
int mlsl_distribution_gather(mlsl_distribution dist, void* send_buffer, size_t send_count,
                             void* recv_buffer, mlsl_data_type dtype, size_t root_idx,
                             mlsl_group_type group_type, mlsl_comm_req* req);
int mlsl_distribution_all_gather(mlsl_distribution dist, void* send_buffer, size_t send_count,
                                 void* recv_buffer, mlsl_data_type dtype,
                                 mlsl_group_type group_type, mlsl_comm_req* req);
int mlsl_distribution_scatter(mlsl_distribution dist, void* send_buffer, void* recv_buffer,
                              size_t recv_count, mlsl_data_type dtype, size_t root_idx,
                              mlsl_group_type group_type, mlsl_comm_req* req);
int mlsl_distribution_reduce_scatter(mlsl_distribution dist, void* send_buffer, void* recv_buffer,
                                     size_t recv_count, mlsl_data_type dtype,
                                     mlsl_reduction_type red_type, mlsl_group_type group_type,
                                     mlsl_comm_req* req);
int mlsl_distribution_barrier(mlsl_distribution dist, mlsl_group_type group_type);

/* nodecomm extension: Distribution::AllGatherv. Block i of recv_buffer starts at the sum of
 * recv_counts[0..i); send_count must equal recv_counts[own index]. */
int mlsl_distribution_all_gatherv(mlsl_distribution dist, void* send_buffer, size_t send_count,
                                  void* recv_buffer, size_t* recv_counts, mlsl_data_type dtype,
                                  mlsl_group_type group_type, mlsl_comm_req* req);

/* OperationRegInfo: add_input, add_output and add_parameter_set* drop the new index (as MLSL's
 * C API does); it is the number of earlier calls of the same kind. */
int mlsl_operation_reg_info_set_name(mlsl_operation_reg_info reg_info, const char* name);
int mlsl_operation_reg_info_add_input(mlsl_operation_reg_info reg_info, size_t fm_count,
                                      size_t fm_size, mlsl_data_type dtype);
int mlsl_operation_reg_info_add_output(mlsl_operation_reg_info reg_info, size_t fm_count,
                                       size_t fm_size, mlsl_data_type dtype);
int mlsl_operation_reg_info_add_parameter_set(mlsl_operation_reg_info reg_info, size_t kernel_count,
                                              size_t kernel_size, mlsl_data_type dtype,
                                              int dist_update);
int mlsl_operation_reg_info_add_parameter_set_with_compress(mlsl_operation_reg_info reg_info,
                                                            size_t kernel_count, size_t kernel_size,
                                                            mlsl_data_type dtype, int dist_update,
                                                            mlsl_compression_type compress_type);
/* dist may be 0 (no distribution). */
int mlsl_operation_reg_info_validate(mlsl_operation_reg_info reg_info, mlsl_distribution dist);

/* Operation */
int mlsl_operation_set_distribution(mlsl_operation op, mlsl_distribution dist);
int mlsl_operation_get_distribution(mlsl_operation op, mlsl_distribution* dist);
int mlsl_operation_get_session(mlsl_operation op, mlsl_session* session);
int mlsl_operation_get_op_type(mlsl_operation op, mlsl_op_type* op_type);
/* prev / next may be 0: the activation has no peer. */
int mlsl_operation_set_prev(mlsl_operation op, mlsl_operation prev, size_t act_idx,
                            size_t prev_op_act_idx);
int mlsl_operation_set_next(mlsl_operation op, mlsl_operation next, size_t act_idx,
                            size_t next_op_act_idx);
int mlsl_operation_get_name(mlsl_operation op, const char** name);
int mlsl_operation_get_global_minibatch_size(mlsl_operation op, size_t* global_minibatch_size);
int mlsl_operation_get_local_minibatch_size(mlsl_operation op, size_t* local_minibatch_size);
int mlsl_operation_get_global_minibatch_offset(mlsl_operation op, size_t* global_minibatch_offset);
int mlsl_operation_get_input_count(mlsl_operation op, size_t* input_count);
int mlsl_operation_get_input(mlsl_operation op, size_t input_idx, mlsl_activation* input_act);
int mlsl_operation_get_output_count(mlsl_operation op, size_t* output_count);
int mlsl_operation_get_output(mlsl_operation op, size_t output_idx, mlsl_activation* output_act);
int mlsl_operation_has_parameter_sets(mlsl_operation op, int* has_params);
int mlsl_operation_get_parameter_set_count(mlsl_operation op, size_t* param_count);
int mlsl_operation_get_parameter_set(mlsl_operation op, size_t param_idx,
                                     mlsl_parameter_set* param_set);

/* Statistics */
int mlsl_statistics_start(mlsl_statistics stat);
int mlsl_statistics_stop(mlsl_statistics stat);
int mlsl_statistics_reset(mlsl_statistics stat);
int mlsl_statistics_print(mlsl_statistics stat);
int mlsl_statistics_is_started(mlsl_statistics stat, int* is_started);
int mlsl_statistics_is_enabled(mlsl_statistics stat, int* is_enabled);
CMLSL_LONG_LONG_DECL int mlsl_statistics_get_isolation_comm_cycles(mlsl_statistics stat,
                                                                   size_t op_idx,
                                                                   unsigned long long* cycles);
int mlsl_statistics_get_comm_size(mlsl_statistics stat, size_t op_idx, size_t* size);
CMLSL_LONG_LONG_DECL int mlsl_statistics_get_comm_cycles(mlsl_statistics stat, size_t op_idx,
                                                         unsigned long long* cycles);
CMLSL_LONG_LONG_DECL int mlsl_statistics_get_compute_cycles(mlsl_statistics stat, size_t op_idx,
                                                            unsigned long long* cycles);
CMLSL_LONG_LONG_DECL int mlsl_statistics_get_total_isolation_comm_cycles(
    mlsl_statistics stat, unsigned long long* cycles);
int mlsl_statistics_get_total_comm_size(mlsl_statistics stat, size_t* size);
CMLSL_LONG_LONG_DECL int mlsl_statistics_get_total_comm_cycles(mlsl_statistics stat,
                                                               unsigned long long* cycles);
CMLSL_LONG_LONG_DECL int mlsl_statistics_get_total_compute_cycles(mlsl_statistics stat,
                                                                  unsigned long long* cycles);

/* Session */
int mlsl_session_set_global_minibatch_size(mlsl_session session, size_t global_minibatch_size);
int mlsl_session_get_global_minibatch_size(mlsl_session session, size_t* global_minibatch_size);
int mlsl_session_get_phase_type(mlsl_session session, mlsl_phase_type* phase_type);
int mlsl_session_create_operation_reg_info(mlsl_session session, mlsl_op_type op_type,
                                           mlsl_operation_reg_info* reg_info);
int mlsl_session_delete_operation_reg_info(mlsl_session session, mlsl_operation_reg_info reg_info);
int mlsl_session_add_operation_with_distribution(mlsl_session session,
                                                 mlsl_operation_reg_info reg_info,
                                                 mlsl_distribution dist, size_t* op_idx);
int mlsl_session_add_operation(mlsl_session session, mlsl_operation_reg_info reg_info,
                               size_t* op_idx);
int mlsl_session_remove_operations(mlsl_session session);
int mlsl_session_get_operation_count(mlsl_session session, size_t* op_count);
int mlsl_session_get_operation(mlsl_session session, size_t op_idx, mlsl_operation* op);
int mlsl_session_commit(mlsl_session session);
int mlsl_session_get_stats(mlsl_session session, mlsl_statistics* stat);

/* Environment: env is the handle mlsl_environment_get_env stores. */
int mlsl_environment_get_env(mlsl_environment* env);
int mlsl_environment_get_version(int* version);
/* config may be NULL. */
int mlsl_environment_configure(mlsl_environment env, const char* config);
int mlsl_environment_init(mlsl_environment env, int* argc, char** argv[]);
int mlsl_environment_finalize(mlsl_environment env);
int mlsl_environment_is_initialized(mlsl_environment env, int* is_initialized);
int mlsl_environment_get_process_idx(mlsl_environment env, size_t* process_idx);
int mlsl_environment_get_process_count(mlsl_environment env, size_t* process_count);
int mlsl_environment_create_session(mlsl_environment env, mlsl_phase_type phase_type,
                                    mlsl_session* session);
int mlsl_environment_delete_session(mlsl_environment env, mlsl_session session);
int mlsl_environment_create_distribution(mlsl_environment env, size_t data_partitions,
                                         size_t model_partitions, mlsl_distribution* dist);
int mlsl_environment_delete_distribution(mlsl_environment env, mlsl_distribution dist);
int mlsl_environment_wait(mlsl_environment env, mlsl_comm_req req);
int mlsl_environment_test(mlsl_environment env, mlsl_comm_req req, int* is_completed);
int mlsl_environment_alloc(mlsl_environment env, size_t size, size_t alignment, void** ptr);
int mlsl_environment_free(mlsl_environment env, void* ptr);
/* params is itself the address of a QuantParams-shaped structure (see mlsl_quant_params
 * above), cast to mlsl_quant_params* as MLSL's callers do; the library keeps a deep copy. Can
 * be set once per process. */
int mlsl_environment_set_quantization_params(mlsl_environment env, mlsl_quant_params* params);
/* Stores the address of the library's copy in *params, or 0 when none was set. */
int mlsl_environment_get_quantization_params(mlsl_environment env, mlsl_quant_params* params);

/* nodecomm extension: Environment::CreateDistributionWithColors. Processes that pass the same
 * data_color form one data group, the same model_color one model group; colors must be
 * non-negative. Collective over the global group. */
int mlsl_environment_create_distribution_with_colors(mlsl_environment env, int data_color,
                                                     int model_color, mlsl_distribution* dist);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#undef CMLSL_LONG_LONG_DECL

#ifdef __cplusplus
}
#endif

#endif /* MLSL_H */
